"""The compile counting's pure parts: sources on recorded data, attribution to shapes, explanations."""

from types import SimpleNamespace

from tpu_lab.compile.causes.explain import explain
from tpu_lab.compile.generation.signature import ShapeSignature
from tpu_lab.compile.generation.tally import ForwardCall, ShapeTally
from tpu_lab.compile.sources.dynamo_dynamic import dynamic_inputs
from tpu_lab.compile.sources.dynamo_records import is_limit_refusal, served_from_cache
from tpu_lab.compile.sources.dynamo_source import take_record
from tpu_lab.compile.sources.tpu_source import CompileEvent, TpuCacheSource, read_tpu_stats


def fold(calls):
    tally = ShapeTally()
    reasons = [tally.add(call) for call in calls]
    return tally.rows(), reasons


def sig(phase="prefill", length=16, cache=96, mask=True):
    return ShapeSignature(phase, 1, length if phase == "prefill" else 1, cache, mask)


def ev(reason=None, seconds=1.0, limit=False):
    return CompileEvent("dynamo", reason, seconds, limit)


def test_reading_recorded_dynamo_records():
    # Field names of torch._dynamo.utils.CompilationMetrics (torch 2.14), as the watcher reads them.
    forward = SimpleNamespace(
        compile_id="0/1", is_forward=True, graph_node_shapes="{'l_x_': ['s77', 3], 'l_n_': [], 'mul': ['s77', 3]}"
    )
    backward = SimpleNamespace(compile_id="0/1", is_forward=False, aotautograd_local_cache_hit_count=1)
    limit = SimpleNamespace(fail_reason="Dynamo recompile limit exceeded\n  Explanation: ...")
    pending = [forward, backward]
    assert take_record(pending, backward=True) is backward and take_record(pending, backward=True) is None
    assert take_record(pending, backward=False) is forward and pending == []
    assert is_limit_refusal(limit) and not is_limit_refusal(forward)
    assert served_from_cache(backward) and not served_from_cache(forward)
    signature = (("x", "f32[4, 3]"), ("n", "int 2"))
    assert dynamic_inputs(forward, signature) == ("x dim 0, n", "x dim 0, n")
    assert dynamic_inputs(SimpleNamespace(graph_node_shapes=None), signature) == ("", "")
    # a size traced symbolic, then specialised to one (range(x.shape[1])); a tensor inside a carried input
    again = SimpleNamespace(graph_node_shapes="{'l_x_': ['s77', '3'], 'l_stack0_data_ids_': [2, 's1']}")
    inside = {"L['___stack0'].data['ids']": "the carried value.data['ids']"}
    assert dynamic_inputs(again, signature, inside) == (
        "x dim 0, the carried value.data['ids'] dim 1",
        "x dim 0, the carried value.data['ids'] dim 1, x dim 1",
    )


# Recorded from torch_tpu's _get_cache_stats() field names (FACTS.md); durations as numbers or timedeltas.
def tpu_stats(reqs, hits, compilations, durations):
    return SimpleNamespace(
        num_cache_reqs=reqs,
        num_cache_hits=hits,
        num_compilations=compilations,
        per_entry_stats=[SimpleNamespace(compilation_duration=d) for d in durations],
    )


def test_tpu_cache_source_diffs_counters_that_never_reset():
    import datetime

    snaps = iter(
        [
            tpu_stats(10, 4, 6, [0.5] * 6),
            tpu_stats(30, 20, 9, [0.5] * 6 + [1.0, 2.0, datetime.timedelta(seconds=3)]),
            tpu_stats(50, 40, 9, [0.5] * 6 + [1.0, 2.0, 3.0]),
        ]
    )
    src = TpuCacheSource(lambda: next(snaps))
    a, b, c = src.snapshot(), src.snapshot(), src.snapshot()
    events = src.events_between(a, b)
    assert len(events) == 3 and all(e.source == "torch_tpu" for e in events)
    assert abs(sum(e.seconds for e in events) - 6.0) < 1e-9
    assert src.events_between(b, c) == []  # only hits: a warm call


def test_read_tpu_stats_from_a_dict():
    s = read_tpu_stats(
        {
            "num_cache_reqs": 3,
            "num_cache_hits": 1,
            "num_compilations": 2,
            "per_entry_stats": [{"compilation_duration": 0.25}],
        }
    )
    assert (s.requests, s.hits, s.compilations, s.compile_seconds) == (3, 1, 2, 0.25)


def test_attribution_groups_by_shape_and_explains():
    calls = [
        ForwardCall(sig(length=16), 1.2, (ev(),)),
        ForwardCall(
            sig("decode"),
            0.8,
            (ev("0/0: tensor 'kwargs['input_ids']' size mismatch at index 1. expected 16, actual 1"),),
        ),
        ForwardCall(sig("decode"), 0.002),
        ForwardCall(sig(length=32), 0.9, (ev(),)),
        ForwardCall(sig(length=16), 0.003),
        ForwardCall(sig(length=16, mask=False), 0.7, (ev(),)),
        ForwardCall(sig("decode", cache=128), 0.6, (ev(),)),
    ]
    table, reasons = fold(calls)
    rows = {str(r.signature): r for r in table}
    assert list(rows) == [
        "prefill 1x16 cache=96",
        "decode 1x1 cache=96",
        "prefill 1x32 cache=96",
        "prefill 1x16 cache=96 no-mask",
        "decode 1x1 cache=128",
    ]
    first = rows["prefill 1x16 cache=96"]
    assert (first.calls, first.compiles, first.first_call_seconds, first.last_call_seconds) == (2, 1, 1.2, 0.003)
    assert first.reason == "first prefill compile"
    assert rows["decode 1x1 cache=96"].reason.startswith("first decode compile")
    assert rows["decode 1x1 cache=96"].guard.startswith("0/0: tensor")
    assert rows["prefill 1x32 cache=96"].reason.startswith("new prompt length 32 (compiled so far: 16)")
    assert "attention mask is None" in rows["prefill 1x16 cache=96 no-mask"].reason
    assert "static cache length changed to 128" in rows["decode 1x1 cache=128"].reason
    assert reasons[2] == ""


def test_limit_hit_calls_are_not_counted_as_compiles():
    calls = [
        ForwardCall(sig(length=5), 1.0, (ev(),)),
        ForwardCall(sig(length=7), 0.05, (ev("0/7: ...", 0.0, limit=True),), compiled=False),
        ForwardCall(sig(length=9), 0.05, compiled=False),
    ]
    rows, _ = fold(calls)
    assert [r.compiles for r in rows] == [1, 0, 0]
    assert [r.uncompiled_calls for r in rows] == [0, 1, 1]
    assert "recompile limit" in rows[1].reason


def test_explain_fallbacks():
    assert explain(None) == "first compile"
    assert "KV cache length changed 70 -> 90" in explain(
        "0/1: tensor 'kwargs['cache'].layers[0].keys' size mismatch at index 2. expected 70, actual 90"
    )
    assert explain("0/3: ___check_obj_id(L['self'], 1234)").startswith("self is a different object than")
    # text no rule knows is shown verbatim, marked so (without Dynamo's source comment)
    said = explain("0/4: ___some_new_guard(L['x'])   # x = f(y)  # file.py:3 in g")
    assert said == "Dynamo's guard, not translated: ___some_new_guard(x)"  # the user's names, Dynamo's guard


def test_explain_new_batch_sizes_and_pairs():
    from tpu_lab.compile.generation.shape_reasons import explain_new_shape

    def s(phase, batch, length, cache=96):
        return ShapeSignature(phase, batch, length if phase == "prefill" else 1, cache, True)

    compiled = [s("prefill", 1, 16), s("decode", 1, 1), s("prefill", 4, 32), s("decode", 4, 1)]
    assert explain_new_shape(s("prefill", 2, 16), compiled) == (
        "new batch size 2 (compiled so far: 1, 4); batch buckets bound these"
    )
    assert explain_new_shape(s("decode", 2, 1), compiled).startswith("new batch size 2 (compiled so far: 1, 4)")
    both = explain_new_shape(s("prefill", 8, 64), compiled)
    assert both.startswith("new prompt length 64 (compiled so far: 16, 32); buckets bound these; new batch size 8")
    assert explain_new_shape(s("prefill", 4, 16), compiled) == (
        "new (batch, length) pair 4x16: each pair is its own graph (compiled so far: 1x16, 4x32)"
    )
    assert explain_new_shape(s("prefill", 4, 32), compiled) is None  # compiled before: Dynamo's text explains
    assert str(s("prefill", 4, 32)) == "prefill 4x32 cache=96"
