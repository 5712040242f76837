"""Every notebook in real JupyterLab, in a real browser (Debian's chromium through Playwright): run all
cells, then check what a user sees in each panel. Screenshots go to test-artifacts/browser/.

Needs /usr/bin/chromium (`apt-get install chromium`; .ci/run installs it); skipped without it.
``TPU_LAB_UPDATE_SCREENSHOTS=1`` also copies the generation panel's screenshot to docs/ for the README.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
TOKEN = "tpu-lab-browser-test"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium: apt-get install chromium"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 with a token and a temporary root holding copies of the notebooks."""
    root = tmp_path_factory.mktemp("lab")
    # Every cell in the page (no windowing), so a test can read the outputs of cells out of view too.
    settings = root / ".settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(nb, root / nb.name)
    _write_live_launch_notebook(root / LIVE_LAUNCH)
    _write_tables_notebook(root / TABLES)
    port = _free_port()
    log = open(root / "jupyter.log", "w")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=",
            f"--LabApp.workspaces_dir={root / '.workspaces'}",
            f"--LabApp.user_settings_dir={root / '.settings'}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=root,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("jupyter lab exited:\n" + (root / "jupyter.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-sync",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        yield b
        b.close()


def open_and_run_all(browser, lab: str, notebook: str, timeout_s: float, *, width: int = 1400):
    """Open a notebook, wait for an idle kernel, Run All Cells, wait until every cell has run."""
    page = browser.new_page(viewport={"width": width, "height": 1800})
    # A workspace of its own, reset: only this notebook open, nothing restored from an earlier page.
    page.goto(f"{lab}/lab/workspaces/{Path(notebook).stem}/tree/{notebook}?reset&token={TOKEN}")
    # A cell run before the kernel is idle is silently dropped (FACTS.md): wait for it.
    page.get_by_text(re.compile(r"Python 3 \(ipykernel\)\s*\|\s*Idle")).wait_for(timeout=120_000)
    news = page.get_by_role("button", name="No", exact=True)  # the "official Jupyter news?" toast
    if news.count():
        news.first.click()
    page.click("text=Run", timeout=30_000)  # the Run menu
    page.click("text=Run All Cells")
    # Cells run in order, so the last code cell having an execution count means all have run. (JupyterLab
    # renders only the cells in view, so earlier prompts may not be in the page at all.)
    last_prompt = page.locator(".jp-NotebookPanel .jp-Cell.jp-CodeCell .jp-InputPrompt").last
    idle = page.get_by_text(re.compile(r"Python 3 \(ipykernel\)\s*\|\s*Idle"))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if re.search(r"\[\d+\]", last_prompt.inner_text()) and idle.count():
            break
        time.sleep(1)
    else:
        shot(page, f"{notebook}-timeout")
        raise AssertionError(f"{notebook}: not every cell ran within {timeout_s} s")
    assert (
        page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] >> text=Traceback").count()
        == 0
    )
    return page


def wait_until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout_s} s")
        time.sleep(0.3)


def text_of(locator) -> str:
    """What a user reads: the rendered text with non-breaking spaces and runs of whitespace made plain."""
    return re.sub(r"\s+", " ", locator.inner_text().replace("\xa0", " "))


def shot(page, name: str, locator=None) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    (locator or page).screenshot(path=str(path))
    return path


# Every widget label and every dropdown option whose text does not fit its box (ipywidgets cuts it with
# "..."): what a user cannot read.
CLIPPED_JS = """root => {
  const out = [];
  for (const e of root.querySelectorAll('.widget-label')) {
    if (e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1) out.push(e.textContent);
  }
  const ctx = document.createElement('canvas').getContext('2d');
  for (const sel of root.querySelectorAll('.widget-dropdown select')) {
    const s = getComputedStyle(sel);
    ctx.font = s.font;
    const room = sel.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
    for (const o of sel.options) if (ctx.measureText(o.text).width > room) out.push(o.text);
  }
  return out;
}"""


def clipped(locator) -> list[str]:
    return locator.evaluate(CLIPPED_JS)


def outputs_text(page) -> str:
    """The text of every cell output in the notebook (in view or not), whitespace made plain."""
    texts = page.locator(".jp-NotebookPanel .jp-OutputArea-output").all_text_contents()
    return re.sub(r"\s+", " ", " ".join(texts).replace("\xa0", " "))


def assert_no_raw_markup_or_mojibake(page) -> None:
    """No output shows HTML as text, a Python tuple of reasons, or a replacement character."""
    outputs = outputs_text(page)
    for bad in ("<b>", "&middot;", "&lt;", "('", "\ufffd"):
        assert bad not in outputs, (bad, outputs[outputs.find(bad) - 200 : outputs.find(bad) + 200])


def test_probe_panel_shows_findings(lab, browser):
    page = open_and_run_all(browser, lab, "01_device_probe.ipynb", 180)
    panel = page.locator(".tpu-lab-probe-panel").first
    panel.wait_for(timeout=30_000)
    panel.locator("[data-code='auto-device-map-cpu']").first.wait_for()
    assert "device cpu" in text_of(panel) and 'device_map="auto" would load' in text_of(panel)
    assert clipped(panel) == []
    outputs = outputs_text(page)
    # The simulated TPU VM: the rank counts the text promises, and one device_map in its fix.
    assert "8 x TPU v6e" in outputs and "ranks per host: 1, 4, 8" in outputs
    assert 'device_map="tpu" (tpu_lab.load_model' in outputs and '"tpu" here, "tpu" on a TPU VM' not in outputs
    assert_no_raw_markup_or_mojibake(page)
    shot(page, "01-probe-panel", panel)
    page.close()


def test_model_loader_reports_after_load(lab, browser):
    page = open_and_run_all(browser, lab, "02_load_model.ipynb", 240)
    loader = page.locator(".tpu-lab-model-loader").first
    loader.wait_for(timeout=30_000)
    status = loader.locator(".tpu-lab-status")
    loader.locator("button", has_text="Load").click()
    # "loading ..." first, then "ok: ..." (the notebook's own load already left a report on screen, and its
    # "ok:" can still show before the click's "loading" does: wait until no load is under way, judged on one
    # reading of the whole loader, and assert on that same reading, never on a later one a load may have begun)
    seen: list[str] = []

    def loaded() -> bool:
        seen.append(text_of(loader))
        return text_of(status).startswith("ok:") and "loading tiny" not in seen[-1] and "ok: tiny" in seen[-1]

    time.sleep(1)  # the click's load begins (or ends) before the first reading
    wait_until(loaded, 60)
    text = seen[-1]
    assert "placement" in text and "cpu: 27" in text and "ok: tiny:qwen3 on cpu" in text, text
    assert clipped(loader) == []  # "Loading weights", "device", "tpu (unavailable)" all whole
    # The tiny model writes words, and the seed's sentence continues in English.
    assert "The French Bread Law states that" in outputs_text(page)
    assert_no_raw_markup_or_mojibake(page)
    box = loader.locator("input").first
    box.fill("Qwen/Qwen3-8B")
    hint = loader.locator(".tpu-lab-model-hint")
    wait_until(lambda: "needs a network" in text_of(hint), 30)
    shot(page, "02-model-loader", loader)
    page.close()


def test_generation_panel_table_and_chart_after_two_prompts(lab, browser):
    page = open_and_run_all(browser, lab, "03_recompiles.ipynb", 400)
    panel = page.locator(".tpu-lab-generation-panel").last
    panel.wait_for(timeout=30_000)
    panel.locator(".tpu-lab-policy select").select_option(label="none (every length compiles)")
    status, output = panel.locator(".tpu-lab-status"), panel.locator(".tpu-lab-output")
    wait_until(lambda: text_of(status) == "buckets: none", 30)
    for text in ("Each chip runs one process.", "A static cache and shape buckets bound the compilations of a TPU."):
        before = status.inner_text()
        panel.locator("textarea").fill(text)
        panel.locator("button", has_text="Run").click()
        # the status line is updated last, but wait for the output too
        wait_until(lambda before=before, text=text: status.inner_text() != before and text in text_of(output), 120)
        assert re.search(r"\b\d+ compiles?\b", text_of(status)), text_of(status)
    table = text_of(panel.locator(".tpu-lab-shape-table table").first)
    assert table.count("prefill 1x") >= 4 and "why it compiled" in table and "new prompt length" in table
    chart = panel.locator(".tpu-lab-chart").first
    chart.wait_for(timeout=30_000)
    assert chart.evaluate("img => img.naturalWidth") > 100  # the chart really rendered
    assert clipped(panel) == []  # the bucket policies and "new tokens" read whole
    outputs = outputs_text(page)
    assert "why: first prefill compile" in outputs and "ran UNCOMPILED (limit reached)" in outputs
    assert "limit hit: False" not in outputs and "hit config.recompile_limit" not in outputs
    assert_no_raw_markup_or_mojibake(page)
    path = shot(page, "03-generation-panel", panel)
    if os.environ.get("TPU_LAB_UPDATE_SCREENSHOTS") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(path, ROOT / "docs" / "generation-panel.png")
    page.close()


def test_launch_panel_shows_per_rank_logs(lab, browser):
    page = open_and_run_all(browser, lab, "04_tensor_parallel.ipynb", 400)
    panel = page.locator(".tpu-lab-launch-panel").first
    panel.wait_for(timeout=30_000)
    for rank in (0, 1):
        view = panel.locator(f".tpu-lab-rank[data-rank='{rank}']")
        view.get_by_text(f"rank {rank} step 2").wait_for(timeout=60_000)
        wait_until(lambda view=view: text_of(view.locator(".tpu-lab-rank-state")) == "ok", 30)
    assert "2 ok" in text_of(panel) and "finished" not in text_of(panel)
    outputs = outputs_text(page)
    assert "processes of this run still alive: 0" in outputs
    assert "2 rank(s), ok" in outputs  # the panel's result, rendered, not its header's HTML source
    assert_no_raw_markup_or_mojibake(page)
    shot(page, "04-launch-panel", panel)
    page.close()


LIVE_LAUNCH = "launch_live.ipynb"
# A chatty ~30 s run: each rank prints a step every second (issue 21 item 4).
CHATTY = "import os, time\nfor i in range(30):\n    print('rank', os.environ['RANK'], 'step', i, flush=True)\n    time.sleep(1)"


def _write_live_launch_notebook(path: Path) -> None:
    import nbformat

    cell = f"import tpu_lab as tl\npanel = tl.widgets.LaunchPanel({CHATTY!r}, nproc=2).start()\npanel"
    kernel = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)], metadata={"kernelspec": kernel})
    nbformat.write(notebook, str(path))


def _last_step(view) -> int:
    steps = [int(n) for n in re.findall(r"step (\d+)", text_of(view.locator("pre")))]
    return max(steps, default=-1)


def test_launch_panel_logs_update_live_and_stop_is_calm(lab, browser):
    page = open_and_run_all(browser, lab, LIVE_LAUNCH, 120)
    panel = page.locator(".tpu-lab-launch-panel").first
    panel.wait_for(timeout=30_000)
    views = [panel.locator(f".tpu-lab-rank[data-rank='{rank}']") for rank in (0, 1)]
    wait_until(lambda: all(_last_step(v) >= 2 for v in views), 60)
    # Read the log while the run goes on: each rank's view keeps moving, a step a second.
    seen = []
    for _ in range(4):
        seen.append([_last_step(v) for v in views])
        time.sleep(2.5)
    for rank in (0, 1):
        steps = [s[rank] for s in seen]
        assert steps == sorted(steps) and steps[-1] - steps[0] >= 4, f"rank {rank} log stalled: {steps}"
    assert "running" in text_of(views[0].locator(".tpu-lab-rank-state"))
    panel.locator("button", has_text="Stop").click()
    wait_until(lambda: "Stopped by you" in text_of(panel), 30)
    text = text_of(panel)
    assert "SignalException" not in text and "Traceback" not in text, text
    assert panel.locator(".tpu-lab-error").count() == 0  # a calm note, not a red box
    for view in views:
        assert text_of(view.locator(".tpu-lab-rank-state")) == "stopped" and _last_step(view) >= seen[-1][0] - 1
    shot(page, "launch-live-stopped", panel)
    page.close()


def test_watch_panel_shows_the_training_loop_compiles(lab, browser):
    page = open_and_run_all(browser, lab, "05_debug_recompiles.ipynb", 400)
    panel = page.locator(".tpu-lab-watch-panel").first
    panel.wait_for(timeout=30_000)
    wait_until(lambda: text_of(panel).startswith("done:"), 60)
    table = text_of(panel.locator(".tpu-lab-watch-table table").first)
    assert "Sequential.forward" in table and "input dimension" in table, table  # forward()'s name for args[0]
    # 30 rows: the 12 that cost most show, the rest (the backward graphs among them) fold under a summary
    panel.locator(".tpu-lab-watch-table details.tpu-lab-more > summary").first.click()
    assert "more rows" in text_of(panel) and "(backward)" in text_of(panel.locator(".tpu-lab-watch-table"))
    assert panel.locator("img").first.evaluate("img => img.naturalWidth") > 100  # the chart rendered
    shot(page, "05-watch-panel", panel)
    page.close()


TABLES = "tables_at_notebook_width.ipynb"
# A real watch of a torch.compile'd step over 32 input shapes (tiny tensors, the eager backend), plus a global
# that changes twice and three times on two of the shapes: 32 rows, long inputs, long why/guard/fix text,
# and rows that compiled more than others (they must come first when the table folds).
TABLES_WATCH = """import ipywidgets
import torch

import tpu_lab as tl

torch._dynamo.config.recompile_limit = 64
SCALE = 1.0


def attention_mixer_step(tokens, mask, weights, scale):  # a long name: the widest function column
    return ((tokens * mask).float() @ weights * scale * SCALE).tanh().sum()


def batch(n):
    return torch.ones(2, n, dtype=torch.long), torch.ones(2, n, dtype=torch.bool), torch.ones(n, 3), 0.5


compiled = torch.compile(attention_mixer_step, backend="eager", dynamic=False)
panel = tl.widgets.WatchPanel()
display(panel)
with panel:
    for n in range(1, 33):
        compiled(*batch(n))
    for SCALE in (2.0, 3.0, 4.0):  # a global changes: the same inputs compile again, on their row
        compiled(*batch(7))
    for SCALE in (5.0, 6.0):
        compiled(*batch(12))"""
# The generation session's table: the same rendering, shown as a cell's output and in a widget (as
# GenerationPanel shows it). Synthetic rows: a real session over 30 prompt lengths takes minutes on a CPU.
TABLES_GENERATION = """from tpu_lab.compile.generation.signature import ShapeSignature
from tpu_lab.compile.generation.table import CompileTable
from tpu_lab.compile.generation.tally import ShapeRow

generation = CompileTable(tuple(
    ShapeRow(ShapeSignature("prefill", 4, n, 96, True), calls=3, compiles=1 + (n % 7 == 0),
             compile_seconds=0.5 + n / 100, first_call_seconds=0.6, last_call_seconds=0.01,
             reason=f"new prompt length {n} (was {n - 1}): input_ids, attention_mask, cache_position; "
                    "pad prompts to a few bucket lengths (GenerationSession(buckets=...))",
             guard=f"tensor 'input_ids' size mismatch at index 1. expected {n - 1}, actual {n}")
    for n in range(5, 37)
))
display(generation)
generation_widget = ipywidgets.HTML(generation.to_html())  # how GenerationPanel shows its table
generation_widget.add_class("tpu-lab-shape-table")
generation_widget"""


def _write_tables_notebook(path: Path) -> None:
    import nbformat

    cells = [nbformat.v4.new_code_cell(c) for c in (TABLES_WATCH, "panel.watch", TABLES_GENERATION)]
    kernel = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": kernel}), str(path))


# What a reader cannot read at a glance in a compile table: a header or row taller than one line of text,
# lines spaced wider than text needs, a cell whose content is cut, a table past its output's right edge or
# scrolling sideways. Folded rows (in a closed <details>) are not on screen and not checked.
TABLE_PROBLEMS_JS = """root => {
  const out = [];
  const area = root.closest('.jp-OutputArea-output') || document.body;
  const edge = area.getBoundingClientRect().right;
  for (const wrap of root.querySelectorAll('.tpu-lab-scroll')) {
    if (wrap.scrollWidth > wrap.clientWidth + 1) out.push(`scrolls sideways: ${wrap.scrollWidth} > ${wrap.clientWidth}`);
  }
  for (const table of root.querySelectorAll('table.tpu-lab-table')) {
    if (table.offsetParent === null) continue;
    const right = table.getBoundingClientRect().right;
    if (right > edge + 1) out.push(`table's right edge ${right} past its output's ${edge}`);
    for (const row of table.rows) {
      for (const cell of row.cells) {
        const s = getComputedStyle(cell);
        const line = parseFloat(s.lineHeight), font = parseFloat(s.fontSize);
        const high = cell.clientHeight - parseFloat(s.paddingTop) - parseFloat(s.paddingBottom);
        const text = cell.textContent.trim().slice(0, 60);
        if (!(line <= 1.6 * font)) out.push(`line-height ${s.lineHeight} for a ${font}px font: '${text}'`);
        if (high > 1.5 * line) out.push(`${cell.tagName} taller than one line (${high}px, line ${line}px): '${text}'`);
        if (cell.scrollWidth > cell.clientWidth + 1) out.push(`cut (${cell.scrollWidth} > ${cell.clientWidth}): '${text}'`);
        for (const e of cell.querySelectorAll('*')) {
          if (e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).display !== 'inline')
            out.push(`cut inside a cell: '${e.textContent.trim().slice(0, 60)}'`);
        }
      }
    }
  }
  return out;
}"""

# Per table of a root: its header texts and each row's cells (text, title, height), in page order.
TABLE_ROWS_JS = """root => [...root.querySelectorAll('table.tpu-lab-table')].map(t => ({
  header: [...t.querySelectorAll('thead th')].map(th => th.textContent.trim()),
  headerHeight: t.tHead ? t.tHead.rows[0].getBoundingClientRect().height : 0,
  rows: [...t.tBodies[0].rows].map(r => ({
    height: r.getBoundingClientRect().height,
    cells: [...r.cells].map(c => ({text: c.textContent.trim(), title: c.getAttribute('title') || ''})),
  })),
}))"""


def _table_problems(locator) -> list[str]:
    return locator.evaluate(TABLE_PROBLEMS_JS)


def _rows(locator) -> list[dict]:
    return locator.evaluate(TABLE_ROWS_JS)


def _leading_number(text: str) -> float:
    return float(re.match(r"[\d.]+", text).group())


def _check_folded_worst_first(tables: list[dict], total_rows: int) -> list[dict]:
    """The open table shows the rows that compiled most (then cost most), the folded one the rest, in order."""
    header = tables[0]["header"]
    rows = [row for t in tables for row in t["rows"]]
    assert len(rows) == total_rows and len(tables[0]["rows"]) < total_rows, [len(t["rows"]) for t in tables]
    n, s = header.index("compiles"), header.index("compile s")
    keys = [(_leading_number(r["cells"][n]["text"]), _leading_number(r["cells"][s]["text"])) for r in rows]
    assert keys == sorted(keys, reverse=True), keys
    return rows


def _fit_output_width(page, target: int = 900) -> None:
    """Resize the page so a cell's output area is ``target`` px wide: JupyterLab's notebook column."""
    area = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
    width = page.viewport_size["width"] + target - area.bounding_box()["width"]
    page.set_viewport_size({"width": round(width), "height": 1800})
    wait_until(lambda: abs(area.bounding_box()["width"] - target) < 2, 10)


def test_compile_tables_read_at_a_glance_at_notebook_width(lab, browser):
    page = open_and_run_all(browser, lab, TABLES, 300, width=1200)
    _fit_output_width(page)
    cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
    panel = cells.nth(0).locator(".tpu-lab-watch-panel")
    wait_until(lambda: text_of(panel).startswith("done:"), 60)
    live, static = panel.locator(".tpu-lab-watch-table"), cells.nth(1).locator(".jp-OutputArea-output").first
    shot(page, "tables-watch-panel", panel)
    shot(page, "tables-watch-static", static)
    for name, root in (("watch panel", live), ("static watch table", static)):
        problems = _table_problems(root)
        assert not problems, (name, len(problems), problems[:12])
        tables = _rows(root)
        rows = _check_folded_worst_first(tables, 32)  # a row per shape
        header = tables[0]["header"]
        assert header == ["function", "inputs", "calls", "compiles", "compile s", "why it compiled"], header
        assert rows[0]["cells"][0] == {"text": "attention_mixer_step …", "title": rows[0]["cells"][0]["title"]}
        assert rows[0]["cells"][0]["title"].startswith("attention_mixer_step (cell In[")
        assert [r["cells"][header.index("compiles")]["text"] for r in rows[:2]] == ["4", "3"]  # the global's rows
        inputs = [r["cells"][1] for r in rows]
        assert all("…" in c["text"] and "scale: float 0.5" in c["title"] for c in inputs if len(c["title"]) > 40)
        assert any(c["title"] for c in inputs), inputs[:3]  # long inputs are shortened, whole on hover
        assert "more rows" in text_of(root.locator("details.tpu-lab-more > summary").first)
    # The live panel and the static table follow the same rules: same columns, same row heights.
    live_tables, static_tables = _rows(live), _rows(static)
    assert live_tables[0]["header"] == static_tables[0]["header"]
    assert abs(live_tables[0]["headerHeight"] - static_tables[0]["headerHeight"]) <= 1
    assert [round(r["height"]) for r in live_tables[0]["rows"]] == [
        round(r["height"]) for r in static_tables[0]["rows"]
    ]
    # Folded rows are one click away, and read as the open ones do.
    for root in (live, static):
        root.locator("details.tpu-lab-more > summary").first.click()
        assert _table_problems(root) == []
        # A row's whole text (why, Dynamo's guard, fix) is one click away too, wrapped within the table.
        detail = root.locator("details.tpu-lab-detail").first
        detail.locator("summary").click()
        shown = text_of(detail)
        assert "size mismatch" in shown and "fix" in shown, shown
        assert root.evaluate(
            "r => [...r.querySelectorAll('table.tpu-lab-table')].every(t => t.getBoundingClientRect().right"
            " <= (r.closest('.jp-OutputArea-output') || document.body).getBoundingClientRect().right + 1)"
        )
    shot(page, "tables-watch-static-open", static)
    # The generation session's table: as a cell's output and in a widget, the same rules.
    generation = cells.nth(2).locator(".jp-OutputArea-output")
    for root in (generation.first, generation.last.locator(".tpu-lab-shape-table")):
        assert _table_problems(root) == []
        tables = _rows(root)
        rows = _check_folded_worst_first(tables, 32)
        assert rows[0]["cells"][0]["text"] == "prefill 4x35 cache=96"  # compiled twice, the costliest of those
    assert [round(r["height"]) for r in _rows(generation.first)[0]["rows"]] == [
        round(r["height"]) for r in _rows(generation.last)[0]["rows"]
    ]
    shot(page, "tables-generation", cells.nth(2))
    assert_no_raw_markup_or_mojibake(page)
    page.close()
