"""Charts of compile tables (matplotlib's object API: no pyplot state, works headless)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from tpu_lab.compile.generation.tally import ShapeRow


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
    # One legend above both plots, outside them: legends inside covered points (issue 13).
    handles = [h for ax in (ax_compiles, ax_time) for h in ax.get_legend_handles_labels()[0]]
    fig.legend(handles=handles, loc="outside upper center", ncols=min(len(handles), 6), fontsize=8, frameon=False)
    ax_compiles.set_title("compiles per input shape")
    ax_compiles.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_time.set_title("first (compiling) vs latest call, ms")
    ax_time.set_yscale("log")
    return fig


def demo_chart(
    cumulative: Mapping[str, Sequence[int]], tokens: Mapping[str, tuple[int, int]], *, pass_length: int
) -> Any:
    """The demo at a glance. Left: compiles so far after each request, one line per policy (naive climbs,
    bucketed flattens once its few shapes are compiled). Right: prompt and padding tokens per policy.
    ``tokens``: policy -> (prompt tokens, tokens prefilled); ``pass_length``: requests per pass."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, ax_pad = fig.subplots(1, 2, width_ratios=(3, 2))
    colours = dict(zip(cumulative, ("#d62728", "#1f77b4", "#2ca02c", "#9467bd"), strict=False))
    top = max((max(c, default=0) for c in cumulative.values()), default=0)
    for name, counts in cumulative.items():
        xs = range(1, len(counts) + 1)
        ax.step(
            xs,
            counts,
            where="post",
            color=colours[name],
            linewidth=2.2,
            label=f"{name}: {counts[-1] if counts else 0} compiles",
        )
    requests = max((len(c) for c in cumulative.values()), default=0)
    for boundary in range(pass_length, requests, pass_length):
        ax.axvline(boundary + 0.5, color="#888", linestyle="--", linewidth=1)
        ax.text(boundary + 0.7, top * 0.03, "same prompts again", color="#555", fontsize=9)
    ax.set_xlabel("request", fontsize=10)
    ax.set_ylabel("compiles so far", fontsize=10)
    ax.set_title("compiles over requests", fontsize=12)
    ax.set_ylim(0, max(top, 1) * 1.08)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    # Below the plot, so it can never cover a line.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=len(cumulative), fontsize=10, frameon=False)

    names = list(tokens)
    real = [tokens[n][0] for n in names]
    padding = [tokens[n][1] - tokens[n][0] for n in names]
    ax_pad.barh(names, real, color="#999", label="prompt tokens")
    ax_pad.barh(names, padding, left=real, color="#ff9f1c", label="padding tokens")
    for i, (r, p) in enumerate(zip(real, padding, strict=True)):
        share = p / (r + p) if r + p else 0.0
        ax_pad.text(r + p, i, f"  {p} padding ({share:.0%})", va="center", fontsize=10)
    ax_pad.set_xlim(0, max((r + p for r, p in zip(real, padding, strict=True)), default=1) * 1.45)
    ax_pad.invert_yaxis()
    ax_pad.tick_params(labelsize=10)
    ax_pad.set_xlabel("tokens prefilled per pass", fontsize=10)
    ax_pad.set_title("the price of buckets: padding", fontsize=12)
    ax_pad.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2, fontsize=10, frameon=False)
    return fig


def png_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()
