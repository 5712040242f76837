"""The base both compile tables share (the session's per-shape table and the watch's per-function
table): list-like rows, totals, and the one HTML rendering both use, in a cell's output and in a widget
alike (``WatchPanel``, ``GenerationPanel``): every header and row one line of text at notebook width
(long text cut with the whole text on hover, and the row's whole why, guard and fix one click away in
the row), long tables folded worst rows first, nothing past the right edge."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from html import escape
from typing import Any

from tpu_lab._report import Report

MAX_OPEN_ROWS = 12  # rows shown before the rest fold away
# Characters one table row holds at notebook width: JupyterLab's output area, ~880 px, at its 13 px font
# (measured with Debian's DejaVu Sans, wider than most UI fonts), padding and a disclosure marker counted.
LINE_CHARS = 110
FLEX_MIN = 16  # the fewest characters a flexible column keeps when the others need the line
# Inline styles, not a stylesheet: an ipywidgets HTML widget sets a 28 px line-height and no table
# padding, JupyterLab's rendered HTML its own; inline, the table reads the same in both.
TEXT_STYLE = "font-size:var(--jp-ui-font-size1,13px);line-height:1.4"
TABLE_STYLE = f"border-collapse:collapse;table-layout:auto;margin:0 0 4px 0;{TEXT_STYLE}"
CELL_STYLE = "text-align:left;vertical-align:top;white-space:nowrap;padding:2px 5px 2px 3px;line-height:1.4"
HEAD_STYLE = f"{CELL_STYLE};font-weight:bold;border-bottom:1px solid var(--jp-border-color1,#bdbdbd)"
EVEN_ROW_STYLE = "background:var(--jp-rendermime-table-row-background,#f5f5f5)"
DETAIL_STYLE = (
    "white-space:normal;overflow-wrap:break-word;padding:2px 0 4px 1.2em;"
    "border-left:2px solid var(--jp-border-color2,#e0e0e0)"
)
# The scroll box takes its container's width and nothing from the table (width 0, min-width 100%): in
# a widget's flex box the table can then never push the panel past the notebook's right edge; a table
# wider than a narrow notebook scrolls sideways inside it rather than being cut.
SCROLL_STYLE = "overflow-x:auto;width:0;min-width:100%;max-width:100%"


class Cell(str):
    """A table cell cut for display, keeping its whole text for the hover title."""

    full: str

    def __new__(cls, shown: str, full: str | None = None) -> Cell:
        cell = super().__new__(cls, shown)
        cell.full = shown if full is None else full
        return cell


def cut(text: str, width: int) -> Cell:
    flat = _flat(text)
    return Cell(flat if len(flat) <= width else flat[: width - 1] + "…", text)


def compiled_words(compiles: int, cached: int) -> str:
    """``3``, ``1 compiled from cache``, ``3 (1 from cache)``: cached and compiled told apart in words."""
    if cached and cached == compiles:
        return f"{compiles} compiled from cache"
    return f"{compiles} ({cached} from cache)" if cached else str(compiles)


def problems(row: Any) -> int:
    """What went wrong on a row beyond compiling: calls run uncompiled, compiles failed or refused."""
    counts = ("uncompiled", "uncompiled_calls", "failed", "refused")
    return sum(getattr(row, name, 0) or 0 for name in counts) + bool(getattr(row, "limit_hit", False))


def worst_first(rows: Sequence[Any]) -> list[int]:
    """Row indices, the worst first: problems, then compiles, then compile time (first seen on a tie)."""
    return sorted(range(len(rows)), key=lambda i: (-problems(rows[i]), -rows[i].compiles, -rows[i].compile_seconds))


class CompileTableBase(Report):
    """List-like over ``rows`` (each with ``compiles`` and ``compile_seconds``); subclasses give ``_cells``
    (in row order), ``HEADER`` and the text/summary, and for the HTML table ``HTML_COLUMNS`` (which of
    ``_cells``' columns show, each with the characters it shows on its one line) and ``_details`` (a row's
    whole text, by label, behind the last shown column's disclosure)."""

    rows: tuple[Any, ...]
    HEADER: tuple[str, ...] = ()
    HTML_COLUMNS: tuple[tuple[int, int], ...] = ()
    """(index into ``HEADER``/``_cells``, characters shown); empty: every column, 60 characters each."""
    HTML_FLEX: tuple[int, ...] = ()
    """Positions in ``HTML_COLUMNS`` that take the characters the others leave on the line (or give them
    up when the others need them), first first."""

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
        line = f"total: {n} compile{'' if n == 1 else 's'}, {self.compile_seconds:.2f} s compiling"
        if cached and cached == n:
            line += " (all served from the persistent compile cache)"
        elif cached:
            line += f" ({cached} served from the persistent compile cache)"
        if failed := sum(getattr(r, "failed", 0) for r in self.rows):
            line += f"; {failed} compile{'s' * (failed > 1)} failed or skipped: no graph (see below)"
        return line

    def _cells(self) -> list[tuple[str, ...]]:
        raise NotImplementedError

    def _html_cells(self) -> list[tuple[str, ...]]:
        """``_cells`` for the HTML table, where a subclass shortens a cell its own way (a ``Cell`` keeps the
        whole text); the renderer then cuts each to its column's width."""
        return self._cells()

    def _details(self, row: Any) -> list[tuple[str, str]]:
        """A row's whole text by label (why, Dynamo's guard, fix), for its disclosure; none by default."""
        return []

    def table_html(self, banner: str, lines: Sequence[str]) -> str:
        """The whole HTML: a banner, the table, the lines under it; the same in a cell's output and in a
        widget (inline styles: a widget's own 28 px line-height and JupyterLab's table styles never apply)."""
        return (
            f"<div class='tpu-lab-compile-table' style='{TEXT_STYLE}'>{banner}{self.html_table()}"
            f"{text_block(lines, 'tpu-lab-total')}</div>"
        )

    def html_table(self) -> str:
        """Each header and row on one line; a long table shows its worst rows (see ``worst_first``) and
        folds the rest under a "N more rows" summary, one click away."""
        columns = self.HTML_COLUMNS or tuple((i, 60) for i in range(len(self.HEADER)))
        order = worst_first(self.rows) if len(self.rows) > MAX_OPEN_ROWS else list(range(len(self.rows)))
        cells = self._html_cells()
        header = tuple(self.HEADER[i] for i, _ in columns)
        columns = tuple(zip((i for i, _ in columns), _widths(header, cells, columns, self.HTML_FLEX), strict=True))
        body = [_row(header, cells[i], columns, self._details(self.rows[i])) for i in order]
        html = _table(header, body[:MAX_OPEN_ROWS])
        if rest := body[MAX_OPEN_ROWS:]:
            html += (
                f"<details class='tpu-lab-more' style='{TEXT_STYLE}'><summary style='white-space:nowrap'>"
                f"{len(rest)} more rows (fewer compiles)</summary>{_table(header, rest)}</details>"
            )
        return f"<div class='tpu-lab-scroll' style='{SCROLL_STYLE}'>{html}</div>"


def _widths(
    header: Sequence[str], cells: Sequence[Sequence[str]], columns: Sequence[tuple[int, int]], flex: Sequence[int]
) -> list[int]:
    """Each column's characters: its longest cell, at most its own width; then the flexible columns take
    what is left of ``LINE_CHARS`` (or give up what the others need), so a row fills the line and no more."""
    longest = [
        max([len(h), *(len(_flat(str(c[i]))) for c in cells)]) for h, (i, _) in zip(header, columns, strict=True)
    ]
    widths = [max(len(h), min(w, n)) for h, (_, w), n in zip(header, columns, longest, strict=True)]
    spare = LINE_CHARS - sum(widths) - 2  # the disclosure marker
    for k in flex:
        grow = max(0, min(spare, longest[k] - widths[k]))  # up to its longest cell
        shrink = max(spare, min(0, FLEX_MIN - widths[k]))  # never below FLEX_MIN
        change = grow if spare >= 0 else shrink
        widths[k] += change
        spare -= change
    return widths


def text_block(lines: Sequence[str], css_class: str) -> str:
    """Lines under a table, at the table's size and spacing (a widget's own line-height is 28 px), their
    indents kept, long ones wrapped."""
    text = "<br>".join(escape(line) for line in lines)
    return f"<div class='{css_class}' style='{TEXT_STYLE};white-space:pre-wrap'>{text}</div>"


def _table(header: Sequence[str], rows: Sequence[str]) -> str:
    head = "".join(f"<th style='{HEAD_STYLE}'>{escape(h)}</th>" for h in header)
    body = "".join(f"<tr style='{EVEN_ROW_STYLE}'>{r}</tr>" if n % 2 else f"<tr>{r}</tr>" for n, r in enumerate(rows))
    return f"<table class='tpu-lab-table' style='{TABLE_STYLE}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


GUARD_LABEL = "Dynamo's guard"


def _row(
    header: Sequence[str], cells: Sequence[str], columns: Sequence[tuple[int, int]], details: list[tuple[str, str]]
) -> str:
    """One line: each shown cell cut to its width, its whole text on hover. Where a cell was cut or the row
    has text no cell shows (Dynamo's guard, the fix), the last cell holds a disclosure with all of it."""
    shown: list[tuple[str, str]] = []  # (what the cell shows, its whole text where that was cut)
    whole = [(label, text) for label, text in details if text.strip()]
    said = {label for label, _ in whole} | {_flat(text) for _, text in whole}
    for label, (i, width) in zip(header, columns, strict=True):
        full = str(getattr(cells[i], "full", cells[i]))  # a Cell shows its own short form, cut to width
        short = cut(str(cells[i]), width)
        shown.append((short, full if short != full else ""))
        if short != _flat(full) and label not in said and _flat(full) not in said:
            whole.append((label, full))
    visible = {_flat(s) for s, _ in shown}
    tds = [_td(s, title) for s, title in shown[:-1]]
    last, title = shown[-1]
    if any(_flat(text) not in visible for _, text in whole):
        body = "".join(  # Dynamo's guard is its own code, verbatim: shown as code
            f"<div><b>{escape(label)}</b>{f'<code>{_lines(text)}</code>' if label == GUARD_LABEL else _lines(text)}</div>"
            for label, text in whole
        )
        tds.append(
            f"<td style='{CELL_STYLE}'><details class='tpu-lab-detail'><summary{_title(title)}>{escape(last)}"
            f"</summary><div style='{DETAIL_STYLE}'>{body}</div></details></td>"
        )
    else:
        tds.append(_td(last, title))
    return "".join(tds)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _lines(text: str) -> str:
    """Each line of a detail on its own, hanging under its label."""
    return "".join(f"<div style='padding-left:1em'>{escape(line)}</div>" for line in text.splitlines() if line.strip())


def _title(text: str) -> str:
    return f" title='{escape(text)}'" if text else ""


def _td(shown: str, title: str) -> str:
    return f"<td style='{CELL_STYLE}'{_title(title)}>{escape(shown)}</td>"
