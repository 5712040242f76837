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
            with pytest.raises(tl.RecompileError, match=r"^Shape prefill 1x24 cache=88: Qwen3ForCausalLM") as e:
                s.generate(ids(20))
        # one sentence: the shape, the function, what changed (against the nearest warmed graph), the inputs
        assert "would compile inside no_recompiles() because prompt length changed 16 -> 24" in e.value.what
        assert e.value.what.count("no_recompiles") == 1 and "tpu_lab_forward" not in e.value.what
        assert "tuple" not in e.value.what and "\n" not in e.value.what and "warmup" in e.value.fix
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
        ({}, lambda s: s.generate([]), "The list of prompts is empty"),
        ({}, lambda s: s.generate(["Hello", " "]), r"The prompt is empty \(prompt 1 of the list\)"),
        ({}, lambda s: s.generate([ids(4), []]), r"has no tokens \(prompt 1 of the list\)"),
        ({}, lambda s: s.generate(["Hello", ids(4)]), "mixes text prompts and token-id prompts"),
        ({}, lambda s: s.generate([ids(3), [1, "x"]]), r"list of token ids \(prompt 1 of the list\)"),
        (
            {"batch_buckets": (1, 2)},
            lambda s: s.generate([ids(3)] * 3),
            r"3 prompts in one call, more than the largest batch bucket \(2\)",
        ),
        ({"batch_buckets": (1, 2)}, lambda s: s.warmup([4], batches=[4]), "more than the largest batch bucket"),
        (
            {"buckets": (8, 16), "max_cache_len": 20},
            lambda s: s.generate([ids(3), ids(12)], max_new_tokens=5),
            r"The longest of these 2 prompts \(12 tokens, padded to 16\) plus max_new_tokens=5 does not fit",
        ),
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
        ({"batch_buckets": (4, 2)}, "batch_buckets=\\(4, 2\\) are not strictly increasing"),
        ({"batch_buckets": (0, 2)}, "batch_buckets=\\(0, 2\\) must be positive"),
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


PROMPTS = [
    "The French Bread Law states",
    "Hello world!",
    "Each process learns how the graph stays stable when the shapes stay the same.",
]


def test_a_batch_gives_each_prompt_its_alone_tokens(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, buckets=(8, 16, 32), batch_buckets=(1, 2, 4), max_new_tokens=8) as s:
        alone = [s.generate(p) for p in PROMPTS]
        # an end-of-sequence token that one prompt reaches early: its row must stop there, the others go on
        eos = alone[0].token_ids[2]
        alone_eos = [s.generate(p, eos_token_id=eos).token_ids for p in PROMPTS]
        assert len(alone_eos[0]) == 3
        batch = s.generate(PROMPTS, eos_token_id=eos)
        plain = s.generate(PROMPTS)
    assert [r.token_ids for r in batch] == alone_eos
    assert [r.token_ids for r in plain] == [r.token_ids for r in alone]
    assert [r.text for r in plain] == [r.text for r in alone]
    longest = max(r.prompt_tokens for r in alone)
    for i, r in enumerate(batch):
        assert (r.row, r.batch_size, r.padded_batch, r.batch_bucket) == (i, 3, 4, 4)
        assert r.batch_shape == (4, 32) and r.padded_length == 32 and r.bucket == 32
        assert r.prompt_tokens == alone[i].prompt_tokens and r.prefill.batch == 4 and r.decode.batch == 4
    assert longest > 16  # the longest prompt set the length bucket for every row
    assert all(r.batch_shape == (1, r.padded_length) for r in alone)


def test_batches_without_batch_buckets_compile_per_size_and_table_keys_by_batch(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, buckets=(16,), max_new_tokens=3) as s:
        first = s.generate(PROMPTS[:2])
        assert [(r.batch_size, r.padded_batch, r.batch_bucket) for r in first] == [(2, 2, None)] * 2
        assert (first[0].compiles_prefill, first[0].compiles_decode) == (1, 1)
        assert first[0].reasons == ("first prefill compile", "first decode compile: one graph serves every decode step")
        again = s.generate([PROMPTS[1], PROMPTS[0]])  # the same shape: nothing new
        three = s.generate([PROMPTS[0]] * 3)
        assert again[0].compiles == 0 and three[0].compiles == 2
        assert three[0].reasons[0].startswith("new batch size 3 (compiled so far: 2); batch buckets bound these")
        assert s.observed_batches == [(2, 5), (2, 5), (3, 5)]
        rows = {str(r.signature): r for r in s.compile_table}
        assert set(rows) == {
            "prefill 2x16 cache=80",
            "decode 2x1 cache=80",
            "prefill 3x16 cache=80",
            "decode 3x1 cache=80",
        }
        assert rows["prefill 2x16 cache=80"].calls == 2
        cells = s.compile_table.to_dict()["rows"]
        assert {(c["batch"], c["length"], c["cache"]) for c in cells} == {
            (2, 16, 80),
            (2, 1, 80),
            (3, 16, 80),
            (3, 1, 80),
        }
        assert "shape (batch x length)" in s.to_html()
        # warm-up with no argument keeps warming what was seen: each length bucket at each batch size seen
        assert [r.batch_shape for r in s.warmup()] == [(2, 16), (3, 16)] and s.total_compiles == 4


def test_warmup_covers_every_batch_and_length_bucket_pair(fresh):
    model, tok = fresh
    buckets, batch_buckets = (8, 16), (1, 2, 4)
    with tl.GenerationSession(model, tok, buckets=buckets, batch_buckets=batch_buckets, max_new_tokens=3) as s:
        warm = s.warmup()  # 6 prefill + 3 decode graphs: past Dynamo's default limit of 8, raised for the buckets
        assert [r.batch_shape for r in warm] == [(b, n) for b in batch_buckets for n in buckets]
        assert s.total_compiles == 2 * 3 + 3 and not s.limit_hit
        with s.no_recompiles():
            for batch in ([PROMPTS[0]], PROMPTS[:2], [ids(16)] * 3, [ids(3), ids(9)]):
                assert s.generate(batch)[0].compiles == 0
            with pytest.raises(tl.RecompileError):  # not warmed up: a length bucket added afterwards
                s.set_buckets((8, 16, 24))
                s.generate([ids(20)] * 4)
        assert s.observed_batches == [(1, 5), (2, 5), (3, 16), (2, 9)]


def test_generation_panel_runs_a_batch_and_fits_both_axes(fresh):
    model, tok = fresh
    with tl.GenerationSession(model, tok, max_new_tokens=2, max_cache_len=64) as s:
        panel = tl.widgets.GenerationPanel(s)
        panel.prompt.value = "\n".join(PROMPTS) + "\n\n"
        records = panel.run()
        assert [r.prompt for r in records] == PROMPTS and records[0].batch_shape[0] == 3
        assert panel.status.value.startswith("3 prompts -> batch 3 x ") and "<b>2 compiles</b>" in panel.status.value
        assert all(p in panel.output.value for p in ("The French Bread Law states", "Hello world!"))
        assert "prefill 3x" in panel.table.value and "batch buckets" in panel.table.value
        panel.prompt.value = "Hello world!"
        panel.run()
        panel.policy.value = "recommended"
        assert s.batch_buckets == (1, 3) and "batch buckets: 1, 3" in panel.status.value
        panel.warmup_button.click()
        assert panel.status.value.startswith("warmed up 4 shapes")


def test_a_second_session_on_the_same_model_takes_over_and_never_compiles_the_first(fresh):
    """A re-run notebook cell builds a second session on a model that already has one: the first is
    closed (said so), the second compiles the model's own forward, not the first session's wrapper
    (whose timing would enter the graph as a float and recompile every call)."""
    model, tok = fresh
    first = tl.GenerationSession(model, tok, buckets=(8,), max_cache_len=32, max_new_tokens=3)
    first.generate(ids(5))
    with pytest.warns(UserWarning, match="already open on this model"):
        second = tl.GenerationSession(model, tok, buckets=(8,), max_cache_len=32, max_new_tokens=3)
    with second:
        records = [second.generate(ids(n)) for n in (5, 6, 7, 5)]
        assert [r.compiles for r in records] == [2, 0, 0, 0]  # one prefill and one decode graph, once
        assert "Python float" not in " ".join(str(r.reasons) for r in records)
        first.close()  # the first's close no longer touches the model: the second still owns it
        assert model.forward.__self__ is second
    assert getattr(model.forward, "__self__", None) is model
