"""Charts of compile tables (matplotlib's object API: no pyplot state, works headless)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from tpu_lab.compile.tally import ShapeRow


def compile_chart(tables: Mapping[str, Sequence[ShapeRow]]) -> Any:
    """Per shape: compiles (left) and first versus latest call time (right), one colour per table."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax_compiles, ax_time = fig.subplots(1, 2)
    labels: list[str] = []
    for rows in tables.values():
        labels += [str(r.signature) for r in rows if str(r.signature) not in labels]
    width = 0.8 / max(len(tables), 1)
    for k, (name, rows) in enumerate(tables.items()):
        by_sig = {str(r.signature): r for r in rows}
        xs = [i + k * width for i, label in enumerate(labels) if label in by_sig]
        picked = [by_sig[label] for label in labels if label in by_sig]
        ax_compiles.bar(xs, [r.compiles for r in picked], width, label=f"{name} ({sum(r.compiles for r in rows)})")
        ax_time.scatter(xs, [r.first_call_seconds * 1000 for r in picked], marker="o", label=f"{name}: first call")
        ax_time.scatter(xs, [r.last_call_seconds * 1000 for r in picked], marker="x", label=f"{name}: latest call")
    for ax in (ax_compiles, ax_time):
        ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
        ax.legend(fontsize=7)
    ax_compiles.set_title("compiles per input shape")
    ax_compiles.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_time.set_title("first (compiling) vs latest call, ms")
    ax_time.set_yscale("log")
    return fig


def png_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()
