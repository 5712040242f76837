"""The compile tables' one HTML rendering (the watch's and the generation session's, in a cell's output
and in a widget): one line per header and row, long text cut with the whole on hover and in the row's
disclosure, long tables folded worst rows first, nothing dropped. The browser checks the same at notebook
width (tests/browser/test_jupyterlab.py::test_compile_tables_read_at_a_glance_at_notebook_width)."""

from __future__ import annotations

import re
from html import unescape

from tpu_lab.compile.generation.signature import ShapeSignature
from tpu_lab.compile.generation.table import CompileTable
from tpu_lab.compile.generation.tally import ShapeRow
from tpu_lab.compile.table_base import LINE_CHARS, MAX_OPEN_ROWS, _widths, worst_first
from tpu_lab.compile.watching.watch_table import RowCause, WatchRow, WatchTable

LONG_INPUTS = "input_ids: i64[4, {n}], attention_mask: i64[4, {n}], cache_position: i64[{n}], use_cache: bool True"


def watch_table(n_rows: int) -> WatchTable:
    rows = []
    for n in range(n_rows):
        row = WatchRow(
            function="Qwen3ForCausalLM.forward (modeling_qwen3.py:512)",
            signature=LONG_INPUTS.format(n=n + 1),
            compiles=1 + (n == 20) * 3,
            compile_seconds=0.1 + n / 1000,
            uncompiled=2 if n == 25 else 0,
        )
        row.add(RowCause("first compile", kind="first") if n == 0 else _size_cause(n))
        rows.append(row)
    return WatchTable(rows=tuple(rows))


def _size_cause(n: int) -> RowCause:
    return RowCause(
        f"input_ids, attention_mask dimension 1 changed {n} -> {n + 1} (automatic dynamic shapes off, by "
        "torch.compile(dynamic=False): every size is its own graph)",
        guard=f"tensor 'input_ids' size mismatch at index 1. expected {n}, actual {n + 1}",
        fix="pad to a few sizes; on a TPU: pad to buckets instead (torch_tpu rejects dynamic shapes)",
        kind="size",
    )


def generation_table(n_rows: int) -> CompileTable:
    rows = tuple(
        ShapeRow(
            ShapeSignature("prefill", 1, n, 96, True),
            calls=2,
            compiles=1,
            compile_seconds=0.5 + (n % 5) / 10,
            first_call_seconds=0.6,
            last_call_seconds=0.01,
            reason=f"new prompt length {n} (was {n - 1}): pad prompts to a few bucket lengths",
            guard=f"tensor 'input_ids' size mismatch at index 1. expected {n - 1}, actual {n}",
        )
        for n in range(5, 5 + n_rows)
    )
    return CompileTable(rows)


def cells(html: str) -> list[list[str]]:
    """Each body row's cells as a reader sees them when nothing is opened: the text outside disclosures."""
    out = []
    for body in re.findall(r"<tbody>(.*?)</tbody>", html, re.S):
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
            tds = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            out.append([unescape(re.sub(r"<[^>]+>", "", re.sub(r"</summary>.*", "", td, flags=re.S))) for td in tds])
    return out


def test_every_row_is_one_short_line_and_nothing_is_dropped():
    for table in (watch_table(32), generation_table(32)):
        html = table.to_html()
        rows = cells(html)
        assert len(rows) == 32  # the open rows and the folded ones
        widths = [w for _, w in table.HTML_COLUMNS]
        for row in rows:
            assert len(row) == len(widths) and not any("\n" in text for text in row)
            assert sum(len(text) for text in row) <= LINE_CHARS - 2, row  # the line holds the row
            fixed = [(t, w) for k, (t, w) in enumerate(zip(row, widths, strict=True)) if k not in table.HTML_FLEX]
            assert all(len(text) <= w for text, w in fixed), row
        assert "<br>" not in html[: html.index("</table>")].split("<details", 1)[0]  # no line breaks in open rows
        # every row's whole text is in the page: on hover and in the row's disclosure
        flat = unescape(html)
        for r in table.rows:
            why = getattr(r, "reason", None) or r.cause
            assert why in flat and r.guard in flat
        assert f"{32 - MAX_OPEN_ROWS} more rows (fewer compiles)</summary>" in html


def test_long_inputs_are_cut_with_the_whole_on_hover_and_in_the_disclosure():
    html = watch_table(3).to_html()
    inputs = LONG_INPUTS.format(n=2)
    assert f" title='{inputs}'" in unescape(html)  # the whole on hover
    assert f"<b>inputs</b><div style='padding-left:1em'>{inputs}</div>" in unescape(html)
    assert "pad to a few sizes" in html and "<b>fix</b>" in html  # the fix one click away


def test_long_tables_show_the_worst_rows_first():
    table = watch_table(32)
    order = worst_first(table.rows)
    assert order[:2] == [25, 20]  # calls that ran uncompiled first, then the most compiles
    assert [table.rows[i].compile_seconds for i in order[2:]] == sorted(
        (r.compile_seconds for i, r in enumerate(table.rows) if i not in (20, 25)), reverse=True
    )
    shown = cells(table.to_html())
    assert shown[0][1].startswith("input_ids: i64[4, 26]") and shown[1][3] == "4"
    short = watch_table(5)  # a short table keeps the order things happened in
    assert [c[1][:21] for c in cells(short.to_html())] == [LONG_INPUTS.format(n=n)[:21] for n in range(1, 6)]


def test_the_static_table_and_the_widget_share_one_rendering():
    import tpu_lab as tl

    table = watch_table(14)

    class Fixed:
        version = 1

        def __init__(self):
            self.table = table

        def poll(self):
            pass

    panel = tl.widgets.WatchPanel(Fixed())  # type: ignore[arg-type]
    assert panel.table.value == table.to_html()
    # a widget's own 28 px line-height never reaches the table or the lines under it
    assert "line-height:1.4" in panel.table.value.split("<table", 1)[0]
    assert "tpu-lab-total' style='font-size:var(--jp-ui-font-size1,13px);line-height:1.4" in panel.table.value


def test_the_flexible_columns_take_the_room_the_others_leave():
    header, columns = ("function", "inputs", "why it compiled"), ((0, 31), (1, 22), (2, 38))
    why = "x dimension 0 changed 8 -> 9 (automatic dynamic shapes off, by torch.compile(dynamic=False)) " * 2
    short = [("<lambda> (h.py:2)", "x: f32[9]", why)]
    assert _widths(header, short, columns, (2, 1)) == [17, 9, LINE_CHARS - 2 - 17 - 9]  # why fills the line
    crowded = [("f" * 31, "y" * 80, why), ("g", "z", "first compile")]
    wide = [(0, 31), (1, 22), (2, 38), (0, 60)]  # a fourth column that wants most of the line
    widths = _widths((*header, "extra"), crowded, wide, (2, 1))
    assert widths[2] < 38 and sum(widths) == LINE_CHARS - 2  # why gives up room first
    assert _widths(("a", "b"), [("x" * 200, "y" * 200)], ((0, 100), (1, 100)), (0, 1)) == [
        16,
        92,
    ]  # a floor, then the next
