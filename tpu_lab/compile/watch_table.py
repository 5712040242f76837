"""What a watch saw, as one renderable object: per function and input signature, calls, compiles, the
cause in words and Dynamo's guard text; graph breaks; the recompile-limit banner; a chart; a dict."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from typing import Any

from tpu_lab._report import Report, banner_html, table
from tpu_lab.compile.explain import LIMIT_TEXT

HEADER = ("function", "inputs", "calls", "compiles", "compile s", "why it compiled", "Dynamo's guard")


@dataclass
class WatchRow:
    """One compiled function with one input signature (a watch keeps these, never a per-call history)."""

    function: str
    """Name and file:line, e.g. ``step (train.py:12)``."""
    signature: str
    """The inputs it specialised on: ``x: f32[8, 128], n: int 3``."""
    calls: int | None = None
    """Calls with these inputs; None where they are not counted (code the watch does not wrap)."""
    compiles: int = 0
    compile_seconds: float = 0.0
    cause: str = ""
    """Why it last compiled, in words."""
    guard: str = ""
    """Dynamo's own text for the guard that failed."""
    cached: int = 0
    """Compiles served from a persistent cache (inductor's on-disk FX graph cache, AOTAutograd's)."""
    uncompiled: int = 0
    """Times Dynamo refused to compile (recompile limit): the call ran uncompiled."""
    dynamic: str = ""
    """Inputs made dynamic by automatic dynamic shapes (e.g. ``x dim 0``): torch_tpu rejects these."""

    def frozen(self) -> WatchRow:
        return dataclasses.replace(self)


@dataclass(frozen=True)
class WatchTable(Report):
    rows: tuple[WatchRow, ...]
    graph_breaks: dict[str, int]
    """Dynamo's reason (first line) -> how many times it broke the graph."""
    limit_hit: bool
    timeline: tuple[tuple[float, str, int], ...] = ()
    """(seconds since the watch began, function, its counted calls so far) per compile."""

    def __iter__(self) -> Iterator[WatchRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> WatchRow:
        return self.rows[i]

    @property
    def total_compiles(self) -> int:
        return sum(r.compiles for r in self.rows)

    def by_function(self, name: str) -> list[WatchRow]:
        """Rows of the functions whose label starts with ``name``."""
        return [r for r in self.rows if r.function.startswith(name)]

    def _cells(self) -> list[tuple[str, ...]]:
        return [
            (
                r.function,
                r.signature or "-",
                "-" if r.calls is None else str(r.calls),
                str(r.compiles)
                + (f" ({r.cached} cached)" if r.cached else "")
                + (f" +{r.uncompiled} uncompiled" if r.uncompiled else ""),
                f"{r.compile_seconds:.2f}",
                r.cause,
                r.guard.splitlines()[0][:160] if r.guard else "",
            )
            for r in self.rows
        ]

    def _summary(self) -> list[str]:
        lines = [f"total: {self.total_compiles} compiles, {sum(r.compile_seconds for r in self.rows):.2f} s compiling"]
        if self.graph_breaks:
            where = sorted({r.function for r in self.rows if "after the graph break" in r.function})
            lines.append(
                f"graph breaks: {sum(self.graph_breaks.values())}" + (f" (at {'; '.join(where)})" if where else "")
            )
            lines += [f"  {n} x {reason}" for reason, n in self.graph_breaks.items()]
        if any(r.cached for r in self.rows):
            lines.append("cached: served from a persistent compile cache (a restarted kernel pays little for these)")
        return lines

    def to_text(self) -> str:
        lines = [f"{'function':<34} {'inputs':<40} {'calls':>5} {'compiles':>8}  why"]
        lines += [f"{c[0]:<34} {c[1]:<40} {c[2]:>5} {c[3]:>8}  {c[5]}" for c in self._cells()]
        lines += self._summary()
        if self.limit_hit:
            lines.append("WARNING: " + LIMIT_TEXT)
        return "\n".join(lines)

    def to_html(self) -> str:
        banner = (
            banner_html("Recompile limit hit.", LIMIT_TEXT, css_class="tpu-lab-limit-banner") if self.limit_hit else ""
        )
        summary = "<br>".join(escape(line) for line in self._summary())
        return f"{banner}{table(self._cells(), HEADER)}<div class='tpu-lab-total'>{summary}</div>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [dataclasses.asdict(r) for r in self.rows],
            "graph_breaks": dict(self.graph_breaks),
            "limit_hit": self.limit_hit,
            "total_compiles": self.total_compiles,
        }

    def chart(self) -> Any:
        """A matplotlib Figure: cumulative compiles per function, over its calls where they are counted,
        else over time."""
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        fig = Figure(figsize=(7, 3.2), layout="constrained")
        ax = fig.subplots()
        by_calls = all(calls for _, _, calls in self.timeline) and bool(self.timeline)
        for name in dict.fromkeys(f for _, f, _ in self.timeline):
            points = [(calls if by_calls else t) for t, f, calls in self.timeline if f == name]
            ax.step([0, *points], range(len(points) + 1), where="post", label=name[:40])
        ax.set_xlabel("calls" if by_calls else "seconds into the watch")
        ax.set_ylabel("compiles so far")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title("cumulative compiles per function")
        if self.timeline:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
        return fig
