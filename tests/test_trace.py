"""tl.read_trace over real TORCH_TRACE logs made here: a process that runs the same code under the live
watch and with TORCH_TRACE set gives the same table offline (functions, inputs, counts, failed and skipped
compiles, graph breaks, and the causes wherever the log holds the same guards); logs cut mid-compile,
damaged, from another torch, several runs in one folder; the CLI and the panel."""

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tpu_lab as tl
from tpu_lab.cli import main
from tpu_lab.compile.trace.trace_runs import SAME_RUN_S
from tpu_lab.errors import InvalidArgument

SCENARIO = textwrap.dedent(
    """
    import json, sys, torch
    import tpu_lab as tl

    def scale(x, n):
        return (x * n).sum()

    def noisy(x):
        y = x + 1
        print("step")
        return y * 2

    def inner(x):
        y = x + 1
        torch._dynamo.graph_break()
        return y

    def loop(x):
        for _ in range(2):
            x = inner(x)
        return x

    def nothing(x):
        return 3

    def pinned(x, k):
        return x * k

    def loss(w):
        return (w * 2).sum()

    torch._dynamo.config.recompile_limit = 3  # the pinned function meets it
    with tl.watch() as w:
        s = torch.compile(scale, backend="eager")
        for size, n in ((2, 2), (3, 2), (4, 3)):
            s(torch.ones(size), n)
        b = torch.compile(noisy, backend="eager")
        b(torch.ones(2)); b(torch.ones(5))
        torch.compile(loop, backend="eager")(torch.ones(3))
        torch.compile(nothing, backend="eager")(torch.ones(3))
        p = torch.compile(pinned, backend="eager", dynamic=False)
        for k in range(4):
            p(torch.ones(2), k)
        torch.compile(loss, backend="aot_eager")(torch.ones(3, requires_grad=True)).backward()
    json.dump(w.to_dict(), open(sys.argv[1], "w"))
    """
)


def run_scenario(folder: Path, live: Path, code: str = SCENARIO) -> None:
    script = folder.parent / "scenario.py"
    script.write_text(code)
    env = {**os.environ, "TORCH_TRACE": str(folder)}
    done = subprocess.run(
        [sys.executable, str(script), str(live)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    run_scenario(root / "trace", root / "live.json")
    return root / "trace", json.loads((root / "live.json").read_text())


def rows(table_rows):
    """Rows that compiled or failed (a refusal's row is compared on its own: a log holds no inputs for it)."""
    return [
        (r["function"], r["signature"], r["compiles"], r["failed"]) for r in table_rows if r["compiles"] or r["failed"]
    ]


def test_the_offline_table_is_the_live_one(logs):
    folder, live = logs
    report = tl.read_trace(folder)
    assert len(report.runs) == 1 and report.runs[0].ranks == [0]
    offline = report.runs[0][0].to_dict()
    off, on = rows(offline["rows"]), rows(live["rows"])
    assert [(f, c, x) for f, _, c, x in off] == [(f, c, x) for f, _, c, x in on]  # functions, compiles, failures
    logged = [(a[1], b[1]) for a, b in zip(off, on, strict=True) if a[1] != "inputs: not in the log"]
    assert all(a == b for a, b in logged)  # their inputs, where the log has them: all but a frame skipped early
    assert {a[0] for a in off if a[1] == "inputs: not in the log"} <= {"nothing (scenario.py:23)"}  # torch 2.15
    assert sorted(offline["graph_breaks"], key=str) == sorted(live["graph_breaks"], key=str)
    compared = 0
    graphs = [[r for r in t["rows"] if r["compiles"] or r["failed"]] for t in (offline, live)]
    for a, b in zip(*graphs, strict=True):
        if a["guard"] == b["guard"]:  # the log carries the same guards: the same words
            assert a["cause"] == b["cause"], (a, b)
            compared += 1
    assert compared >= 8
    text = str(report)
    assert (
        "not compiled: Dynamo gave up on loop" in text
        and "Dynamo found no tensor operation to trace in nothing" in text
    )
    assert "loss (backward)" in text and "scale after" not in text
    assert "noisy after the graph break at line 10, resuming at line 11" in text


def test_a_refusal_at_the_recompile_limit_is_its_own_row_as_live(logs):
    folder, live = logs
    (refused,) = [r for r in live["rows"] if r["refused"]]  # live: the refused call, with its inputs
    (offline,) = [r for r in tl.read_trace(folder).runs[0][0].to_dict()["rows"] if r["refused"]]
    assert offline["function"] == refused["function"] and offline["signature"] == "inputs: not in the log"
    assert offline["cause"].split("; the limit is")[0] == refused["cause"].split("; the limit is")[0]
    assert "the limit is 3 (torch._dynamo.config.recompile_limit, or this function's own" in offline["cause"]


def test_a_log_cut_mid_compile_gives_its_table_up_to_there(logs, tmp_path):
    folder, _ = logs
    (log,) = folder.iterdir()
    lines = log.read_bytes().splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if b'{"dynamo_start"' in line]
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / log.name).write_bytes(b"".join(lines[: starts[4] + 3]) + lines[starts[4] + 3][:20])  # mid-line too
    run = tl.read_trace(cut).runs[0]
    assert run.compiles.total == 4  # scale's three graphs and noisy's first: those that ended before the cut
    cut_at = "noisy after the graph break at line 10 (scenario.py:10)"
    assert any(f"ends while compiling {cut_at}" in n and "the log was cut" in n for n in run.notes)
    assert f"ended while compiling {cut_at}" in str(run.compiles)


def test_damaged_and_foreign_lines_are_counted_never_invented(logs, tmp_path):
    folder, _ = logs
    (log,) = folder.iterdir()
    text = log.read_bytes()
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    header = b"V1202 11:29:48.025000 5766 torch/_dynamo/utils.py:1] "
    extra = b"garbage line\n" + header + b'{"dynamo_start": {"stack": [}\n' + header + b'{"new_field_2099": {}}\n'
    middle = text.index(b"\n", len(text) // 2) + 1
    (damaged / "log.txt").write_bytes(text[:middle] + extra + text[middle:])
    with gzip.open(damaged / "copy.log.gz", "wb") as f:  # a gzip'd copy is read too: a second run
        f.write(text)
    report = tl.read_trace(damaged)
    assert len(report.runs) == 2 and report.runs[1].compiles.total == report.runs[0].compiles.total
    notes = " ".join(report.runs[0].notes + report.runs[1].notes)
    assert "2 line(s) could not be read" in notes and "new_field_2099 (1)" in notes
    cut_payload = tmp_path / "cut_payload"  # a damaged line inside a break's text: that entry is dropped whole
    cut_payload.mkdir()
    at = text.index(b"\tGraph Break Reason: ")
    at = text.index(b"\n", at) + 1
    (cut_payload / "log.txt").write_bytes(text[:at] + b"garbage inside a payload\n" + text[at:])
    whole = str(tl.read_trace(cut_payload))
    assert "{" not in whole.split("note:")[0] and " at ?" not in whole  # no unfilled template, no placeless break
    assert "___stack" not in whole and "L['" not in whole
    older = tmp_path / "older"  # a torch whose records lack a field this reader uses: said, the rest read
    older.mkdir()
    (older / "log.txt").write_bytes(text.replace(b'"graph_node_shapes": ', b'"renamed_field": '))
    run = tl.read_trace(older).runs[0]
    assert run.compiles.total == report.runs[0].compiles.total
    assert any("records lack graph_node_shapes (another torch version?)" in n for n in run.notes)


def test_a_huge_line_and_unrelated_files_stay_bounded(logs, tmp_path):
    folder, _ = logs
    (log,) = folder.iterdir()
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(log, mixed / "rank.log")
    with (mixed / "huge.log").open("wb") as f:  # a trace's first line, then 40 MB with no newline
        f.write(log.read_bytes().split(b"\n", 1)[0] + b"\n" + b"x" * (40 << 20))
    with (mixed / "big.bin").open("wb") as f:  # 1 GB, sparse: not a log, skipped after one short read
        f.truncate(1 << 30)
    (mixed / "notes.md").write_text("not a log")
    report = tl.read_trace(mixed)
    assert len(report.skipped) == 2 and "2 other file(s) skipped" in str(report)
    huge = next(r for r in report.runs if r.files[0].endswith("huge.log"))
    assert huge.compiles.total == 0 and any("1 line(s) could not be read" in n for n in huge.notes)


def test_bad_paths_and_ranks_are_refused_with_the_fix(logs, tmp_path):
    folder, _ = logs
    report = tl.read_trace(folder)
    for bad in (5, -1, "0"):
        with pytest.raises(InvalidArgument, match="this report holds 1 run"):
            report.chart(run=bad)
    with pytest.raises(InvalidArgument, match=r"run 1 has no log of rank 5.*\n.*Its ranks: \[0\]"):
        report.runs[0][5]
    for bad in (None, 3, b"/tmp"):
        with pytest.raises(InvalidArgument, match="is not a path"):
            tl.read_trace(bad)
    with pytest.raises(InvalidArgument, match="does not exist"):
        tl.read_trace(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgument, match="No TORCH_TRACE log") as e:
        tl.read_trace(tmp_path / "empty")
    assert "TORCH_TRACE=/some/dir" in str(e.value)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.log").write_text("I1202 hello\n")
    with pytest.raises(InvalidArgument, match=r"\(1 other file\(s\), none a trace log\)"):
        tl.read_trace(tmp_path / "other")
    for rank in (-1, "0", True, 1.0):
        with pytest.raises(InvalidArgument, match="is not a rank"):
            tl.read_trace(folder, rank=rank)
    with pytest.raises(InvalidArgument, match=r"(?s)No log of rank 3 .*The ranks there: \[0\]"):
        tl.read_trace(folder, rank=3)


def test_the_cli_prints_the_report_and_json(logs, capsys):
    folder, _ = logs
    assert main(["trace", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "TORCH_TRACE logs in" in out and "scale (scenario.py:5)" in out
    assert main(["trace", str(folder), "--json", "--rank", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"][0]["ranks"]["0"]["rows"][0]["function"] == "scale (scenario.py:5)"
    (log,) = folder.iterdir()
    cut = folder.parent / "cut_for_cli"
    cut.mkdir(exist_ok=True)
    (cut / log.name).write_bytes(log.read_bytes()[: log.stat().st_size // 2])
    assert main(["trace", str(cut)]) == 0  # one process cut short: said, and not a divergence between ranks
    assert "the log was cut" in capsys.readouterr().out
    assert main(["trace", str(folder / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_watch_panel_shows_a_report(logs):
    pytest.importorskip("ipywidgets")
    from tpu_lab.widgets import WatchPanel

    panel = WatchPanel(tl.read_trace(logs[0]))
    assert "tpu-lab-trace" in panel.children[0].value and panel.children[1].value[:4] == b"\x89PNG"
    with pytest.raises(InvalidArgument, match="nothing to watch"):
        panel.__enter__()


RANKS = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")  # as a real job does: the log names its rank from then on
rank = dist.get_rank()
def step(x):
    return (x * 2).sum()
f = torch.compile(step, backend="aot_eager", dynamic=False)
f(torch.ones(1, 96 if rank == 1 else 64))
f(torch.ones(1, 96 if rank == 1 else 64))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_torchrun_ranks_give_the_live_divergence(tmp_path):
    result = tl.launch(RANKS, nproc=2, timeout=300, env={"TORCH_TRACE": str(tmp_path / "t")})
    assert len(list((tmp_path / "t").iterdir())) == 2
    run = tl.read_trace(tmp_path / "t").runs[0]
    assert run.ranks == [0, 1] and [t.total_compiles for t in run.tables.values()] == [1, 1]
    live = result.compiles
    assert live is not None
    assert [f.message for f in run.compiles.findings] == [f.message for f in live.findings]
    assert run.compiles.findings[0].message.startswith("rank 1: step x f32[1, 96] where rank 0 had f32[1, 64]")
    assert [(m.function, m.signature, m.ranks) for m in run.compiles.merged] == [
        (m.function, m.signature, m.ranks) for m in live.merged
    ]
    early = tmp_path / "early"  # rank 1 started first: the tables are still by rank, as a launch's are
    early.mkdir()
    for log in sorted((tmp_path / "t").glob("*.log")):
        (early / log.name).write_bytes(_shift_clock(log.read_bytes(), 5 if "_rank_0_" in log.name else 0))
    assert [t.rank for t in tl.read_trace(early).runs[0].compiles.tables] == [0, 1]
    restart = tmp_path / "t" / "restart"  # the same job again, later: a run of its own
    restart.mkdir()
    for log in sorted((tmp_path / "t").glob("*.log")):
        (restart / log.name).write_bytes(_shift_clock(log.read_bytes(), SAME_RUN_S + 60))
    report = tl.read_trace(tmp_path / "t")
    assert [r.name for r in report.runs] == ["run 1", "run 2"] and [r.ranks for r in report.runs] == [[0, 1], [0, 1]]


def _shift_clock(log: bytes, seconds: float) -> bytes:
    """The log as if it started ``seconds`` later (its glog clock; the same day)."""
    import re

    def later(m):
        t = int(m[2]) * 3600 + int(m[3]) * 60 + float(m[4]) + seconds
        return m[1] + f"{int(t // 3600):02d}:{int(t // 60 % 60):02d}:{t % 60:09.6f}".encode()

    return re.sub(rb"^([VIWEDC]\d{4} )(\d\d):(\d\d):(\d\d\.\d+)", later, log, flags=re.M)
