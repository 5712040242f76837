"""Compiles per rank, merged and compared (tp.results.rank_compiles, tp.results.divergence, tp.results.live_compiles), on real watch
data: each "rank" here is a real tl.watch() over real torch.compile'd code in this process, its table
passed through JSON as a rank's file is. The launches themselves are in test_rank_watch.py."""

import json
import time

import pytest
import torch

import tpu_lab as tl
from tpu_lab.tp.results.divergence import MAX_FINDINGS
from tpu_lab.tp.results.live_compiles import RankCompiles, compile_words, hang_words, rank_span, waiting_words
from tpu_lab.tp.results.rank_compiles import RunCompiles
from tpu_lab.tp.results.rank_table import SHOWN_ROWS, RankTable, split_signature
from tpu_lab.tp.results.run_state import RankState, RunState


def prefill(input_ids, n):
    return (input_ids * n).sum()


def rank_file(*calls, last_at=None, **extra):
    """What one rank's watcher writes: a real watch over real compiles, through JSON."""
    torch._dynamo.reset()  # each "rank" starts with no graphs, as a fresh process does
    f = torch.compile(prefill, backend="aot_eager", dynamic=False)
    with tl.watch() as w:
        for shape, n in calls:
            f(torch.ones(*shape, dtype=torch.long), n)
    last = {"function": "prefill (x)", "inputs": "", "ended": last_at} if last_at else None
    data = {"compiles": w.total_compiles, "compiling": None, "last": last, "table": w.to_dict(), "done": True}
    return json.loads(json.dumps({**data, **extra}))


@pytest.fixture(scope="module")
def shapes():
    return {64: rank_file(((1, 64), 2)), 96: rank_file(((1, 96), 2))}


def test_a_rank_with_another_input_shape_is_named_with_both_shapes(shapes):
    files = {0: shapes[64], 1: shapes[96], 2: shapes[64], 3: shapes[64]}
    compiles = RunCompiles.from_files(files, 4)
    (finding,) = [f for f in compiles.findings if f.code == "rank-inputs-differ"]
    assert finding.message.startswith("rank 1: prefill input_ids i64[1, 96] where ranks 0, 2, 3 had i64[1, 64]")
    assert "size depends on the rank" in finding.message and "bucket" in finding.fix
    assert compiles.diverged and compiles.total == 4
    merged = {m.signature: m.ranks for m in compiles.merged}
    assert merged == {"input_ids: i64[1, 64], n: int 2": (0, 2, 3), "input_ids: i64[1, 96], n: int 2": (1,)}
    text = str(compiles)
    assert "rank 1: 1 graph(s), 1 compile(s)" in text and "ranks: 0, 2, 3" in text
    assert "<table" in compiles.to_html() and compiles.to_dict()["total_compiles"] == 4
    one = str(compiles[1])  # a rank's own table, with causes
    assert (
        one.startswith("rank 1: 1 compile(s)") and "input_ids: i64[1, 96], n: int 2  compiles: 1  first compile" in one
    )


def test_a_rank_that_died_right_after_a_compile_still_shows_its_inputs(shapes):
    # notebook 04's divergent run: rank 0 compiled, ran into the mismatched all-reduce and was aborted
    # before Dynamo's record reached its table; its marker still names what it compiled
    row = shapes[64]["table"]["rows"][0]
    aborted = {
        **shapes[64],
        "table": {"rows": []},
        "done": False,
        "last": {"function": row["function"], "inputs": row["signature"], "ended": time.time()},
    }
    compiles = RunCompiles.from_files({0: aborted, 1: shapes[96]}, 2)
    assert compiles[0].compiles == 1 and "rank ended right after this compile" in str(compiles[0])
    assert [f.code for f in compiles.findings] == ["rank-inputs-differ"]  # not "compiled nothing"
    assert compiles.findings[0].message.startswith("rank 1: prefill input_ids i64[1, 96] where rank 0 had i64[1, 64]")


def test_a_rank_that_ended_early_with_nothing_compiled_is_not_blamed_on_a_disable(shapes):
    ended = {**shapes[64], "table": {"rows": []}, "compiles": 0, "last": None, "done": False}
    (finding,) = RunCompiles.from_files({0: shapes[64], 1: ended}, 2).findings
    assert finding.code == "rank-compiled-nothing" and "ended before its code finished" in finding.message
    assert "torch.compiler.disable" not in finding.message


def test_uniform_ranks_have_no_divergence(shapes):
    compiles = RunCompiles.from_files({0: shapes[64], 1: shapes[64]}, 2)
    assert compiles.findings == () and not compiles.diverged
    assert [m.ranks for m in compiles.merged] == [(0, 1)] and "ranks: all" in str(compiles)


def test_a_python_number_per_rank_is_named_as_a_value():
    files = {0: rank_file(((1, 8), 0)), 1: rank_file(((1, 8), 1))}
    (finding,) = RunCompiles.from_files(files, 2).findings
    assert finding.message.startswith("rank 1: prefill n int 1 where rank 0 had int 0")
    assert "Python number that differs per rank" in finding.message and "tensor" in finding.fix


def test_ranks_that_compiled_nothing_say_why(shapes):
    files = {0: shapes[64], 1: {**shapes[64], "table": {"rows": []}, "compiles": 0, "dynamo_disabled": True}, 2: None}
    by_code = {}
    for f in RunCompiles.from_files(files, 3).findings:
        by_code.setdefault(f.code, []).append(f.message)
    disabled, unseen = by_code["rank-compiled-nothing"]
    assert (
        disabled.startswith("rank 1 compiled nothing where rank 0 compiled 1 graph(s)") and "disable = True" in disabled
    )
    assert unseen.startswith("rank 2 compiled nothing") and "never imported Dynamo" in unseen
    assert "Dynamo disabled" in str(RunCompiles.from_files(files, 3))


def test_a_rank_that_kept_compiling_after_the_others_stopped():
    t = time.time()
    files = {
        0: rank_file(((1, 8), 2), last_at=t - 30),
        1: rank_file(((1, 8), 2), ((1, 9), 2), ((1, 10), 2), last_at=t),
    }
    codes = {f.code: f.message for f in RunCompiles.from_files(files, 2).findings}
    assert codes["rank-kept-compiling"].startswith("rank 1 kept compiling after rank 0 stopped: 3 compiles")
    assert "30 s after theirs" in codes["rank-kept-compiling"]


def test_a_rank_that_died_mid_compile_keeps_its_table(shapes):
    dying = {**shapes[96], "done": False, "compiling": {"function": "step (w.py:3)", "inputs": "x: f32[2]", "since": 1}}
    compiles = RunCompiles.from_files({0: shapes[64], 1: dying}, 2)
    assert compiles[1].compiles == 1  # the compiles before it
    died = [f for f in compiles.findings if f.code == "rank-died-compiling"]
    assert died[0].message.startswith("rank 1 ended while compiling step (w.py:3) with x: f32[2]")
    assert "ended while compiling step" in str(compiles)


def test_one_rank_has_no_divergence_and_torch_tpu_counters_show(shapes):
    tpu = {**shapes[64], "tpu": {"requests": 9, "hits": 7, "compilations": 2, "compile_seconds": 1.5}}
    compiles = RunCompiles.from_files({0: tpu}, 1)
    assert compiles.findings == () and "torch_tpu cache: requests 9, hits 7, compilations 2" in str(compiles)


def test_a_huge_table_stays_bounded(shapes):
    row = shapes[64]["table"]["rows"][0]
    rows = [{**row, "signature": f"input_ids: i64[1, {n}], n: int 2"} for n in range(1, 400)]
    odd = [{**row, "signature": f"input_ids: i64[2, {n}], n: int 2"} for n in range(1, 400)]
    files = {r: {**shapes[64], "table": {"rows": odd if r % 2 else rows}} for r in range(8)}
    compiles = RunCompiles.from_files(files, 8)
    assert len(compiles.merged) == 798  # every row kept...
    text = str(compiles)
    assert len(text.splitlines()) < SHOWN_ROWS + MAX_FINDINGS * 2 + 20  # ...but the view is bounded
    assert "and 768 more rows" in text and len(compiles.to_html()) < 40_000
    assert len(compiles.findings) <= MAX_FINDINGS
    assert "and 396 more input signature(s) only ranks 1, 3, 5, 7 compiled" in compiles.findings[0].message


def test_signatures_split_at_top_level_commas():
    assert split_signature("x: f32[2, 3], n: int 4, grad mode: off") == {
        "x": "f32[2, 3]",
        "n": "int 4",
        "grad mode": "off",
    }


def test_rank_spans_and_live_words():
    assert [rank_span(r) for r in ([3], [0, 2], [0, 1, 2], [0, 1, 2, 5])] == [
        "rank 3",
        "ranks 0, 2",
        "ranks 0-2",
        "ranks 0-2, 5",
    ]
    busy = RankCompiles(2, "step (w.py:3)", "x: f32[2]", since=100.0)
    idle = RankCompiles(2, last="step (w.py:3) with x: f32[1]", last_at=90.0)
    live = {0: idle, 1: idle, 2: idle, 3: busy}
    assert waiting_words(live, [0, 1, 2, 3], now=140.0) == "rank 3 compiling step for 40 s, ranks 0-2 waiting"
    assert waiting_words({0: idle}, [0]) == ""
    assert busy.label(now=112.0) == "2 compiles, compiling step for 12 s" and idle.label() == "2 compiles"
    assert (
        hang_words(live, [3], [0, 1, 2])
        == "rank 3 still running after ranks 0-2 finished (still compiling step (w.py:3) with x: f32[2])"
    )
    assert hang_words({0: idle}, [0], [1]).endswith("(last compiled step (w.py:3) with x: f32[1])")
    assert RankCompiles.from_marker(busy.to_marker()) == busy and RankCompiles.from_marker(idle.to_marker()) == idle


def test_the_run_state_carries_live_compiles():
    state = RunState(3)
    for r in range(3):
        state.set_rank(r, RankState.RUNNING)
    state.set_compiles(2, RankCompiles(1, "forward (m.py:1)", since=time.time() - 5))
    assert state.ranks[2].compiles is not None and state.ranks[0].compiles is None
    assert compile_words(state).startswith("rank 2 compiling forward for 5 s, ranks 0, 1 waiting")
    state.set_compiles(2, RankCompiles(1, last="forward (m.py:1)"))
    state.set_rank(0, RankState.OK, exit_code=0)
    assert compile_words(state) == (
        "rank 1 still running after rank 0 finished (compiled nothing); "
        "rank 2 still running after rank 0 finished (last compiled forward (m.py:1))"
    )


def test_a_rank_table_from_nothing_or_garbage():
    assert RankTable.from_file(0, None).seen is False
    odd = RankTable.from_file(1, {"table": "not a table", "compiles": 3})
    assert odd.rows == () and odd.live.count == 3
