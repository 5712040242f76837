"""The base both compile tables share (the session's per-shape table and the watch's per-function
table): list-like rows, totals, and an HTML table whose headers never wrap, whose long text is cut
with the whole text on hover, and which folds long tables, worst rows first."""

from __future__ import annotations

from collections.abc import Iterator
from html import escape
from typing import Any

from tpu_lab._report import Report

MAX_OPEN_ROWS = 12  # rows shown before the rest fold away


class Cell(str):
    """A table cell cut for display, keeping its whole text for the hover title."""

    full: str

    def __new__(cls, shown: str, full: str | None = None) -> Cell:
        cell = super().__new__(cls, shown)
        cell.full = shown if full is None else full
        return cell


def cut(text: str, width: int) -> Cell:
    flat = " ".join(text.split())
    return Cell(flat if len(flat) <= width else flat[: width - 1] + "…", text)


def compiled_words(compiles: int, cached: int) -> str:
    """``3``, ``1 compiled from cache``, ``3 (1 from cache)``: cached and compiled told apart in words."""
    if cached and cached == compiles:
        return f"{compiles} compiled from cache"
    return f"{compiles} ({cached} from cache)" if cached else str(compiles)


class CompileTableBase(Report):
    """List-like over ``rows`` (each with ``compiles`` and ``compile_seconds``); subclasses give ``_cells``
    (in row order), ``HEADER`` and the text/summary."""

    rows: tuple[Any, ...]
    HEADER: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        return self.rows[i]

    @property
    def total_compiles(self) -> int:
        return sum(r.compiles for r in self.rows)

    @property
    def compile_seconds(self) -> float:
        return sum(r.compile_seconds for r in self.rows)

    @property
    def from_cache(self) -> int:
        return sum(getattr(r, "cached", 0) for r in self.rows)

    def total_line(self) -> str:
        """``total: 4 compiles, 1.20 s compiling``; a run served from caches says so."""
        n, cached = self.total_compiles, self.from_cache
        line = f"total: {n} compiles, {self.compile_seconds:.2f} s compiling"
        if cached and cached == n:
            line += " (all served from the persistent compile cache)"
        elif cached:
            line += f" ({cached} served from the persistent compile cache)"
        if failed := sum(getattr(r, "failed", 0) for r in self.rows):
            line += f"; {failed} compile{'s' * (failed > 1)} failed or skipped: no graph (see below)"
        return line

    def _cells(self) -> list[tuple[str, ...]]:
        raise NotImplementedError

    def html_table(self) -> str:
        """Rows worst first (most compile time) when the table is long; the rest fold under a summary."""
        cells = self._cells()
        order = list(range(len(cells)))
        if len(cells) > MAX_OPEN_ROWS:
            order.sort(key=lambda i: -(self.rows[i].compile_seconds + self.rows[i].compiles))
        head = "".join(f"<th style='text-align:left;white-space:nowrap'>{escape(h)}</th>" for h in self.HEADER)
        body = ["".join(_td(c) for c in cells[i]) for i in order]
        shown = "".join(f"<tr>{r}</tr>" for r in body[:MAX_OPEN_ROWS])
        table = f"<table class='tpu-lab-table'><thead><tr>{head}</tr></thead><tbody>{shown}</tbody></table>"
        if len(body) > MAX_OPEN_ROWS:
            rest = "".join(f"<tr>{r}</tr>" for r in body[MAX_OPEN_ROWS:])
            table += (
                f"<details class='tpu-lab-more'><summary>{len(body) - MAX_OPEN_ROWS} more rows (fewer compiles)"
                f"</summary><table class='tpu-lab-table'><tbody>{rest}</tbody></table></details>"
            )
        return f"<div class='tpu-lab-scroll' style='overflow-x:auto;max-width:100%'>{table}</div>"


def _td(cell: str) -> str:
    full = getattr(cell, "full", cell)
    title = f" title='{escape(full)}'" if full != cell else ""
    return f"<td style='text-align:left'{title}>{escape(str(cell))}</td>"
