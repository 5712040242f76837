"""tl.watch() checked blind, eleventh round (first part): gpt-fast's sampling compiled with fullgraph=True
and its own recompile limit, driven by a settings dataclass whose top_k goes from an int to None; the same
limit made an error by Dynamo's config instead; a number whose type changes after Dynamo made it dynamic;
a padded batch passed by keyword through **kwargs, refused at the limit. The words a blind reviewer found
wrong are asserted right here, each run also checked against Dynamo's records."""

import dataclasses
import json
import textwrap

import pytest
import torch
from _dynamo_oracle import check_against_dynamo
from test_trace import run_scenario
from torch._dynamo.exc import FailOnRecompileLimitHit

import tpu_lab as tl

BACKEND = "eager"


@dataclasses.dataclass(frozen=True)
class Settings:
    temperature: float = 0.8
    top_k: int | None = 200


def logits_to_probs(logits, temperature, top_k):
    logits = logits / max(temperature, 1e-5)
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = torch.where(logits < v[..., -1:], -float("inf"), logits)
    return torch.softmax(logits, dim=-1)


def sample(logits, settings):
    return logits_to_probs(logits, settings.temperature, settings.top_k)


REQUESTS = [Settings(), Settings(1.0, 200), Settings(0.7, 50), Settings(0.7, None), Settings(0.7, None)]


def _run(f, requests=REQUESTS):
    raised = 0
    for settings in requests:
        try:
            f(torch.randn(2, 16), settings)
        except FailOnRecompileLimitHit:
            raised += 1
    return raised


def _limit_row(w):
    (row,) = [r for r in w.table if r.limit_hit]
    (cause,) = [c for c in row.causes if c.kind == "limit"]
    return row, cause


def test_a_refusal_under_fullgraph_says_the_call_raised_and_so_does_every_later_one(dynamo):
    f = torch.compile(sample, backend=BACKEND, fullgraph=True, recompile_limit=3)
    with tl.watch() as w:
        raised = _run(f)
    assert raised == 2  # both calls with top_k=None: Dynamo refused each, and raised
    check_against_dynamo(w, dynamo)
    text = w.table.to_text()
    row, cause = _limit_row(w)
    assert (row.raised, row.refused, row.uncompiled, row.compiles) == (2, 2, 0, 0)
    assert "ran uncompiled" not in text and "UNCOMPILED" not in text and "(2 raised)" in text
    assert (
        "the call raised FailOnRecompileLimitHit (fullgraph=True turns the limit into an error), and so does every "
        "later call that needs a new graph" in cause.words
    )
    assert "the limit is 3, set for this function by torch.compile(..., recompile_limit=3)" in cause.words
    assert "raise the recompile limit, or drop fullgraph=True so calls past it run uncompiled" in cause.fix
    assert "2 call(s) raised in this watch" in text and "Dynamo no longer sees later calls" not in text
    assert "RAISED FailOnRecompileLimitHit" in text.split("WARNING: ")[-1]
    # top_k went from an int to None: its own fix, never a float's; the input that changed is shown
    assert "settings.top_k is now None, was " in cause.words and "(each case is its own graph)" in cause.words
    assert "in place of None" in cause.fix and "always a float" not in cause.fix
    assert "settings.top_k: None" in row.signature
    # an earlier graph made top_k dynamic: a type change claims no value baked in (2.15 takes that graph as
    # the nearest, its type guard; 2.13 the graph before, its == 200)
    assert "baked" not in cause.words and "settings.top_k" in row.shown_guard


def test_dynamos_config_making_the_limit_an_error_is_worded_the_same(dynamo):
    f = torch.compile(sample, backend=BACKEND)
    with tl.watch() as w, torch._dynamo.config.patch(recompile_limit=3, fail_on_recompile_limit_hit=True):
        raised = _run(f)
    assert raised == 2
    check_against_dynamo(w, dynamo)
    row, cause = _limit_row(w)
    assert (row.raised, row.uncompiled) == (2, 0)
    setting = "torch._dynamo.config.fail_on_recompile_limit_hit = True"
    assert f"the call raised FailOnRecompileLimitHit ({setting} turns the limit into an error)" in cause.words
    assert "set torch._dynamo.config.fail_on_recompile_limit_hit = False so calls past it run uncompiled" in cause.fix
    assert "fullgraph" not in cause.fix.split("; else ")[-1]


def test_without_fullgraph_the_refused_call_still_runs_uncompiled_and_a_counted_call_keeps_its_row(dynamo):
    w = tl.watch()
    f = w(torch.compile(sample, backend=BACKEND, recompile_limit=3))
    assert _run(f) == 0
    row, cause = _limit_row(w)
    assert (row.raised, row.uncompiled) == (0, 1) and "raised" not in cause.words
    assert "settings.top_k: None" in row.signature
    assert row.calls == 2  # the refused call and the one after it: one row, the None shown in both
    assert "ran uncompiled" in w.table.to_text() and "UNCOMPILED" in w.table.to_text()


def scaled(x, scale):
    return x * scale


def test_a_type_change_after_dynamo_made_the_number_dynamic_claims_no_value_baked_in(dynamo):
    f = torch.compile(scaled, backend=BACKEND)
    with tl.watch() as w:
        for scale in (2, 3, 4, 2.5):
            f(torch.ones(3), scale)
    check_against_dynamo(w, dynamo)
    types = [c for r in w.table for c in r.causes if c.kind == "type"]
    assert types and all("baked" not in c.words for c in types)
    assert any("scale is now a float" in c.words for c in types)
    assert "Dynamo made scale dynamic" in w.table.to_text()


def classify(**kwargs):  # the model forward behind a wrapper that passes **kwargs on
    return kwargs["input_ids"].float().sum(-1)


def test_the_refused_rows_guard_names_the_keyword_as_the_other_rows_do(dynamo):
    f = torch.compile(classify, backend=BACKEND, dynamic=False)
    with tl.watch() as w, torch._dynamo.config.patch(recompile_limit=2):
        for length in (5, 7, 9):
            f(input_ids=torch.ones(2, length, dtype=torch.long))
    check_against_dynamo(w, dynamo, own={"kwargs"})  # the function's own **kwargs: its fix may name them
    row, cause = _limit_row(w)
    assert "kwargs[" in cause.guard  # Dynamo's own text is kept
    assert row.shown_guard and "kwargs[" not in row.shown_guard and "'input_ids'" in row.shown_guard
    assert "[tensor 'kwargs[" not in w.table.to_text()  # the guard column, on every row


TRACED = textwrap.dedent(
    """
    import json, sys, torch
    import tpu_lab as tl
    from torch._dynamo.exc import FailOnRecompileLimitHit

    def pick(x, k):
        return x * k if k is not None else x

    f = torch.compile(pick, backend="eager", fullgraph=True, recompile_limit=2)
    with tl.watch() as w:
        for k in (2, 3, None):
            try:
                f(torch.ones(3), k)
            except FailOnRecompileLimitHit:
                pass
    json.dump(w.to_dict(), open(sys.argv[1], "w"))
    """
)


@pytest.mark.slow
def test_the_offline_reader_says_a_refusal_raised_as_the_live_watch_does(tmp_path):
    run_scenario(tmp_path / "trace", tmp_path / "live.json", TRACED)
    live = json.loads((tmp_path / "live.json").read_text())
    (on,) = [r for r in live["rows"] if r["refused"]]
    (off,) = [r for r in tl.read_trace(tmp_path / "trace").runs[0][0].to_dict()["rows"] if r["refused"]]
    for row in (on, off):
        assert (row["raised"], row["uncompiled"]) == (1, 0)
        assert "the call raised FailOnRecompileLimitHit (fullgraph=True turns the limit into an error)" in row["cause"]
