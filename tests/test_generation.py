"""GenerationSession on a tiny Qwen3 with real Dynamo (aot_eager on CPU): exact compile counts."""

import pytest

import tpu_lab as tl
from tpu_lab.errors import InvalidArgument

pytestmark = pytest.mark.slow


@pytest.fixture
def fresh():
    # A new model per test: transformers remembers the largest static cache a model has used.
    loaded = tl.load_model("tiny:qwen3")
    return loaded.model, loaded.tokenizer


def ids(n, start=11):
    return [start + (i * 7) % 500 for i in range(n)]


def test_buckets_bound_compiles_and_second_pass_compiles_nothing(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, buckets=(8, 16, 32), max_new_tokens=4) as s:
        lengths = [5, 16, 3, 20, 8, 31, 12, 32]  # 16, 8 and 32 fill their bucket exactly: no padding
        first = [s.generate(ids(n)) for n in lengths]
        assert s.total_compiles == 3 + 1  # one prefill graph per bucket, one decode graph
        assert [r.bucket for r in first] == [8, 16, 8, 32, 8, 32, 16, 32]
        assert [r.compiles for r in first] == [2, 1, 0, 1, 0, 0, 0, 0]
        second = [s.generate(ids(n, start=40)) for n in lengths]
        assert sum(r.compiles for r in second) == 0
        rows = {str(r.signature): r for r in s.compile_table}
        assert set(rows) == {
            "prefill 1x8 cache=96",
            "prefill 1x16 cache=96",
            "prefill 1x32 cache=96",
            "decode 1x1 cache=96",
        }  # no "no-mask" variant for the exact fills
        assert rows["decode 1x1 cache=96"].calls == 16 * 3
        assert rows["prefill 1x8 cache=96"].calls == 6 and rows["prefill 1x8 cache=96"].compiles == 1


def test_naive_compiles_every_new_length_twice(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, max_new_tokens=4) as s:
        records = [s.generate(ids(n)) for n in (5, 7, 9)]
        # prefill for each new length, and decode again because the static cache grows with the prompt
        assert [(r.compiles_prefill, r.compiles_decode) for r in records] == [(1, 1), (1, 1), (1, 1)]
        assert [r.decode.cache for r in records] == [8, 10, 12]
        reasons = records[1].reasons
        assert reasons[0].startswith("new prompt length 7") and "static cache length changed to 10" in reasons[1]
        # Length 7 again: transformers now sizes the cache 12 (it only grows), so the prefill graph is new.
        again = s.generate(ids(7))
        assert (again.compiles_prefill, again.compiles_decode) == (1, 0)
        assert again.reasons[0].startswith("static cache length changed to 12")
        assert s.total_compiles == 7


def test_fixed_cache_without_buckets_compiles_one_decode_graph(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, max_cache_len=64, max_new_tokens=4) as s:
        records = [s.generate(ids(n)) for n in (5, 7, 9, 7)]
        assert [r.compiles for r in records] == [2, 1, 1, 0]


def test_greedy_tokens_with_buckets_equal_those_without(fresh):
    model, tok = fresh
    prompts = ["The French Bread Law states", "Hello world!", "Each process learns how the graph stays stable."]
    with tl.GenerationSession(model, tok, max_new_tokens=8) as plain:
        expected = [plain.generate(p, min_new_tokens=8).token_ids for p in prompts]
    with tl.GenerationSession(model, tok, buckets=(16, 32), max_new_tokens=8) as bucketed:
        got = [bucketed.generate(p, min_new_tokens=8).token_ids for p in prompts]
    assert got == expected
    assert all(len(t) == 8 for t in got)


def test_warmup_then_no_recompiles(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, buckets=(8, 16, 24), max_new_tokens=4) as s:
        warm = s.warmup([8, 16])
        assert [r.padded_length for r in warm] == [8, 16] and all(r.warmup for r in warm)
        assert s.total_compiles == 3
        with s.no_recompiles():
            assert s.generate(ids(6)).compiles == 0
            assert s.generate("The French Bread Law states").compiles == 0
            with pytest.raises(tl.RecompileError, match=r"prefill 1x24 cache=88 would compile") as e:
                s.generate(ids(20))
        assert "warmup" in e.value.fix
        assert s.generate(ids(20)).compiles == 1  # outside the block it just compiles


def test_recompile_limit_is_reported(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, max_new_tokens=3, recompile_limit=3) as s:
        a = s.generate(ids(5))
        b = s.generate(ids(7))
        c = s.generate(ids(9))
        assert (a.compiles, a.limit_hit) == (2, False)
        assert b.compiles == 1 and b.limit_hit  # prefill 7 was the 3rd graph; its decode hit the limit
        assert c.compiles == 0 and not c.limit_hit  # Dynamo gave up on the function: no record, runs eager
        assert s.limit_hit
        rows = s.compile_table
        assert sum(r.uncompiled_calls for r in rows) > 0
        assert "UNCOMPILED" in str(s)
        assert "tpu-lab-limit-banner" in s._repr_mimebundle_()["text/html"]


def test_decode_only_mode_compiles_no_prefill(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, compile="decode", max_cache_len=64, max_new_tokens=3) as s:
        records = [s.generate(ids(n)) for n in (5, 9)]
        assert [(r.compiles_prefill, r.compiles_decode) for r in records] == [(0, 1), (0, 0)]


def test_record_fields_and_close(fresh):
    model, tok = fresh
    s = tl.GenerationSession(model, tok, buckets=(16,), max_new_tokens=5)
    r = s.generate("The French Bread Law states")
    assert (r.prompt_tokens, r.padded_length, r.bucket) == (5, 16, 16)
    assert str(r.prefill) == "prefill 1x16 cache=80" and str(r.decode) == "decode 1x1 cache=80"
    assert 0 < r.ttft_seconds <= r.wall_seconds and r.tokens_per_second > 0
    assert r.new_tokens == len(r.token_ids) <= 5 and isinstance(r.text, str)
    assert r.compile_seconds > 0 and r.reasons[0] == "first prefill compile"
    assert "forward" in vars(model)
    s.close()
    assert "forward" not in vars(model)  # the class's forward again
    out = model.generate(**tok("hi", return_tensors="pt"), max_new_tokens=2)
    assert out.shape[1] >= 2


@pytest.mark.parametrize(
    ("kwargs", "call", "match"),
    [
        ({}, lambda s: s.generate(""), "The prompt is empty"),
        ({}, lambda s: s.generate("   "), "The prompt is empty"),
        ({"buckets": (8,)}, lambda s: s.generate(ids(9)), "longer than the largest bucket"),
        ({"max_cache_len": 10}, lambda s: s.generate(ids(8), max_new_tokens=4), "does not fit max_cache_len=10"),
        ({}, lambda s: s.generate("hi", max_new_tokens=0), "max_new_tokens=0 must be a positive integer"),
        ({}, lambda s: s.generate("hi", max_new_tokens=-3), "max_new_tokens=-3"),
        ({}, lambda s: s.warmup([]), "non-empty list"),
    ],
)
def test_bad_calls(fresh, kwargs, call, match):
    model, tok = fresh
    with tl.GenerationSession(model, tok, **kwargs) as s:
        with pytest.raises(InvalidArgument, match=match) as e:
            call(s)
        assert e.value.fix
        assert len(s.compile_table) == 0 and s.records == []  # nothing ran


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"buckets": (32, 16)}, "not strictly increasing"),
        ({"buckets": (16, 16)}, "not strictly increasing"),
        ({"buckets": (16, 32), "max_cache_len": 32}, "leaves no room"),
        ({"max_cache_len": 0}, "max_cache_len=0"),
        ({"compile": "sometimes"}, "compile='sometimes'"),
        ({"max_new_tokens": 0}, "max_new_tokens=0"),
    ],
)
def test_bad_sessions(fresh, kwargs, match):
    model, tok = fresh
    with pytest.raises(InvalidArgument, match=match):
        tl.GenerationSession(model, tok, **kwargs)
    assert "forward" not in vars(model)  # a refused session leaves the model alone


def test_tokenizer_without_pad_token(fresh):
    model, tok = fresh
    tok.pad_token = None
    with pytest.raises(InvalidArgument, match="no pad token") as e:
        tl.GenerationSession(model, tok)
    assert "tokenizer.pad_token = tokenizer.eos_token" in e.value.fix
