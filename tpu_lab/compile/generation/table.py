"""The per-shape compile table as one renderable object: text, HTML, a chart and a dict."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tpu_lab._report import banner_html
from tpu_lab.compile.generation.tally import ShapeRow
from tpu_lab.compile.table_base import CompileTableBase, compiled_words, cut

LIMIT_BANNER = (
    "Dynamo's recompile limit was hit: later new shapes ran UNCOMPILED, with only a log line. "
    "Bound the shapes with buckets and a fixed max_cache_len."
)


@dataclass(frozen=True)
class CompileTable(CompileTableBase):
    """Rows in first-seen order, one per (phase, batch, length, cache, mask) signature; iterates, indexes and
    measures like a list of ``ShapeRow``."""

    rows: tuple[ShapeRow, ...]
    limit_hit: bool = False
    """Dynamo's recompile limit was hit: some calls ran uncompiled (a banner says so)."""
    HEADER = (
        "shape (batch x length)",
        "calls",
        "compiles",
        "compile s",
        "first call ms",
        "last call ms",
        "why it compiled",
    )
    # One line per row at notebook width; the whole reason and Dynamo's guard are in the row's disclosure.
    HTML_COLUMNS = ((0, 26), (1, 6), (2, 22), (3, 9), (4, 13), (5, 12), (6, 40))
    HTML_FLEX = (6, 0)  # why, then the shape, take the room the others leave

    def _cells(self) -> list[tuple[str, ...]]:
        return [
            (
                str(r.signature),
                str(r.calls),
                compiled_words(r.compiles, r.cached)
                + (f" ({r.uncompiled_calls} ran uncompiled)" if r.uncompiled_calls else ""),
                f"{r.compile_seconds:.2f}",
                f"{r.first_call_seconds * 1000:.1f}",
                f"{r.last_call_seconds * 1000:.1f}",
                cut(r.reason or _uncompiled_words(r), 160),
            )
            for r in self.rows
        ]

    def _details(self, row: ShapeRow) -> list[tuple[str, str]]:
        return [("why it compiled", row.reason), ("Dynamo's guard", row.guard)]

    def to_text(self) -> str:
        cells = self._cells()
        width = max([8] + [len(c[2]) for c in cells])
        lines = [f"{'shape':<30} {'calls':>5} {'compiles':>{width}} {'compile s':>9} {'last ms':>8}  why"]
        lines += [f"{c[0]:<30} {c[1]:>5} {c[2]:>{width}} {c[3]:>9} {c[5]:>8}  {c[6]}" for c in cells]
        lines.append(self.total_line())
        if self.limit_hit:
            lines.append("WARNING: " + LIMIT_BANNER)
        return "\n".join(lines)

    def to_html(self) -> str:
        banner = (
            banner_html("Recompile limit hit.", LIMIT_BANNER, css_class="tpu-lab-limit-banner")
            if self.limit_hit
            else ""
        )
        return self.table_html(banner, [self.total_line()])

    def to_dict(self) -> dict[str, Any]:
        rows = [{**asdict(r), **r.signature._asdict(), "signature": str(r.signature)} for r in self.rows]
        return {"rows": rows, "limit_hit": self.limit_hit, "total_compiles": self.total_compiles}

    def chart(self, *, label: str = "this session") -> Any:
        """A matplotlib Figure: compiles per shape, and first versus latest call time."""
        from tpu_lab.compile.chart import compile_chart

        return compile_chart({label: self.rows})


def _uncompiled_words(row: Any) -> str:
    """Why a shape that compiled nothing is there: its calls ran uncompiled at the recompile limit."""
    if getattr(row, "uncompiled_calls", 0) and not row.compiles:
        return "not compiled: Dynamo's recompile limit was reached, so these calls ran eagerly"
    return ""
