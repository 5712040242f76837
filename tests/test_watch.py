"""tl.watch() and tl.no_recompiles() on real torch.compile'd code (aot_eager/eager: the counts are the
same as inductor's, FACTS.md), each cause of a recompile produced for real and read back in words."""

import re
import threading

import pytest
import torch

import tpu_lab as tl
from tpu_lab.errors import InvalidArgument

BACKEND = "eager"


def compiled(fn, **kw):
    torch._dynamo.reset()  # every test starts from no compiled graphs
    return torch.compile(fn, backend=BACKEND, **kw)


def causes(w, name):
    return [r.cause for r in w.table.by_function(name) if r.compiles]


def scale(x, n):
    return x * n


def test_int_shape_dtype_and_automatic_dynamic():
    f = compiled(scale)
    with tl.watch() as w:
        f(torch.ones(2), 2)
        f(torch.ones(2), 3)  # a Python int changed: Dynamo recompiles once and makes it dynamic
        f(torch.ones(4), 3)  # a new shape: Dynamo then makes dim 0 dynamic
        f(torch.ones(4, dtype=torch.float64), 3)
    got = causes(w, "scale")
    assert got[0] == "first compile"
    assert got[1] == "Python int n changed (was 2): Dynamo made n dynamic, so later values reuse this graph"
    assert got[2].startswith("x dimension 0 changed 2 -> 4") and "Dynamo made x dim 0 dynamic" in got[2]
    assert got[3] == "x dtype changed Float -> Double"  # not the size, which the dynamic graph covers
    rows = w.table.by_function("scale")
    assert [r.signature for r in rows] == [
        "x: f32[2], n: int 2",
        "x: f32[2], n: int 3",
        "x: f32[4], n: int 3",
        "x: f64[4], n: int 3",
    ]
    assert rows[1].guard == "n == 2"  # Dynamo's own words, kept
    assert rows[2].dynamic == "x dim 0"
    assert w.table.total_compiles == 4
    assert w.table.to_dict()["total_compiles"] == 4
    assert "<table" in w.table.to_html() and "scale (test_watch.py:" in str(w)


def sine(x):
    return x.sin() * 2


def test_grad_mode_and_requires_grad():
    f = compiled(sine)
    with tl.watch() as w:
        f(torch.ones(2))
        with torch.no_grad():
            f(torch.ones(2))
        f(torch.ones(2, requires_grad=True))
    got = causes(w, "sine")
    assert got[1].startswith("grad mode changed (torch.no_grad()")
    assert got[2] == "x.requires_grad changed False -> True"


FLAG = True


def flagged(x):
    return x + 1 if FLAG else x - 1


def test_global_flag():
    global FLAG
    f = compiled(flagged)
    with tl.watch() as w:
        f(torch.ones(2))
        FLAG = False
        try:
            f(torch.ones(2))
        finally:
            FLAG = True
    (row,) = w.table.by_function("flagged")  # same inputs, so one row: compiled twice
    assert (
        row.compiles == 2
        and row.causes[1].words == "the global FLAG changed (was True; its value is baked into the graph)"
    )
    assert "G['FLAG'] == True" in row.guard


def apply(fn, x):
    return fn(x) * 2


def test_a_different_object_argument():
    f = compiled(apply)
    with tl.watch() as w:
        f(torch.sin, torch.ones(2))
        f(torch.cos, torch.ones(2))
    (row,) = w.table.by_function("apply")  # same described inputs: one row, compiled twice
    assert row.compiles == 2 and row.causes[1].words.startswith("fn is a different object than the one compiled for")
    assert "___check_obj_id(fn" in row.guard


class Dropout(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x, 0.5, self.training)


def step(model, x):
    return model(x)


def test_train_eval_change():
    f = compiled(step)
    model = Dropout()
    with tl.watch() as w:
        f(model, torch.ones(2))
        model.eval()
        f(model, torch.ones(2))
    assert causes(w, "step")[1] == "train/eval switched: model.training was True"


def breaks(x):
    if x.sum().item() > 0:
        return x * 2
    return x


def test_graph_break_from_item():
    f = compiled(breaks)
    with tl.watch() as w:
        f(torch.ones(3))
    table = w.table
    assert list(table.graph_breaks.values()) == [1]
    assert "item()" in next(iter(table.graph_breaks))
    resume = [r for r in table if "after the graph break at line" in r.function]
    assert len(resume) == 1 and "test_watch.py" in resume[0].function
    assert "graph breaks: 1" in str(table)


def add(x, n):
    return x + n


def test_recompile_limit_banner():
    f = compiled(add, dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2), tl.watch() as w:
        for n in range(1, 6):
            f(torch.ones(n), 1)
    table = w.table
    assert table.limit_hit and table.total_compiles == 2
    # Dynamo refuses once, then runs the function uncompiled for good, silently
    assert sum(r.uncompiled for r in table) == 1
    assert "Recompile limit hit" in table.to_html() and "UNCOMPILED" in str(table)


def test_decorator_counts_calls_per_signature():
    f = compiled(scale)
    watcher = tl.watch()

    @watcher
    def train_step(x, n):
        return f(x, n)

    for batch in (8, 8, 8, 4):
        train_step(torch.ones(batch), 2)
    calls = {r.signature: r.calls for r in watcher.table.by_function("train_step")}
    assert calls == {"x: f32[8], n: int 2": 3, "x: f32[4], n: int 2": 1}
    assert watcher.table.by_function("scale")[0].compiles == 1


def test_exception_inside_propagates_and_record_stays():
    f = compiled(scale)
    with pytest.raises(ZeroDivisionError), tl.watch() as w:
        f(torch.ones(2), 2)
        1 / 0  # noqa: B018
    assert w.table.total_compiles == 1


def test_nested_watches_both_see_the_inner_compile():
    f = compiled(scale)
    with tl.watch() as outer:
        f(torch.ones(2), 2)
        with tl.watch() as inner:
            f(torch.ones(2), 3)
    assert outer.table.total_compiles == 2 and inner.table.total_compiles == 1


def test_watches_in_two_threads_see_their_own_compiles():
    torch._dynamo.reset()
    totals = {}

    def work(name, n):
        g = torch.compile(lambda x: x * n, backend=BACKEND)
        with tl.watch() as w:
            g(torch.ones(n))
        totals[name] = w.table.total_compiles

    threads = [threading.Thread(target=work, args=(f"t{i}", i + 1)) for i in range(2)]
    with tl.watch() as main:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert totals == {"t0": 1, "t1": 1}
    assert main.table.total_compiles == 0  # compiles in other threads are theirs


def test_no_recompiles_names_the_function_and_what_changed():
    f = compiled(scale)
    f(torch.ones(2), 2)
    with pytest.raises(tl.RecompileError) as e, tl.no_recompiles():
        f(torch.ones(2), 7)
    assert re.match(r"scale \(test_watch.py:\d+\) would compile inside no_recompiles\(\) because ", str(e.value))
    assert "Python int n changed (was 2" in e.value.what and "(inputs: x: f32[2], n: int 7)." in e.value.what
    assert "pass a tensor" in e.value.fix and e.value.what.count("no_recompiles") == 1
    with pytest.raises(tl.RecompileError, match=r"x has 2 dimensions, was 1"), tl.no_recompiles():
        f(torch.ones(2, 2), 2)
    assert f(torch.ones(2), 7).tolist() == [7.0, 7.0]  # afterwards it compiles as usual


def test_no_recompiles_allow_count_and_predicate():
    f = compiled(scale)
    with tl.no_recompiles(allow=2) as guard:
        f(torch.ones(2), 2)
        f(torch.ones(2), 3)
    assert guard.allowed == 2
    with pytest.raises(tl.RecompileError), tl.no_recompiles(allow=1):
        f(torch.ones(3, 3), 1)
        f(torch.ones(3, 3, 3), 1)
    with tl.no_recompiles(allow=lambda c: c.function.name == "scale") as guard:
        f(torch.ones(5, 5, 5, 5), 2)
    assert guard.allowed == 1


@pytest.mark.parametrize("allow", [-1, 1.5, "2", True, None])
def test_no_recompiles_bad_allow(allow):
    with pytest.raises(InvalidArgument, match="allow=") as e:
        tl.no_recompiles(allow=allow)
    assert e.value.fix


def test_decorating_a_non_function_is_a_clear_error():
    with pytest.raises(InvalidArgument, match="decorates a function"):
        tl.watch()(42)


def test_chart_has_one_line_per_function():
    f = compiled(scale)
    with tl.watch() as w:
        f(torch.ones(2), 2)
        f(torch.ones(2), 3)
    fig = w.table.chart()
    assert len(fig.axes[0].lines) == 1


@pytest.mark.slow
def test_generate_auto_compile_names_the_growing_static_cache():
    from transformers import CompileConfig

    model, tok = tl.load_model("tiny:qwen3")
    config = CompileConfig(backend=BACKEND, dynamic=False, mode="default")
    config._compile_all_devices = True  # generate auto-compiles only on accelerators otherwise (FACTS.md)
    torch._dynamo.reset()
    with tl.watch() as w:
        for prompt in ("The French Bread Law states", "Hello world! How are you today? I am fine."):
            ids = tok(prompt, return_tensors="pt")
            model.generate(**ids, max_new_tokens=4, cache_implementation="static", compile_config=config)
    rows = w.table.by_function("Qwen3ForCausalLM.forward")
    assert [r.compiles for r in rows] == [1, 1] and "modeling_qwen3.py" in rows[0].function
    (cause,) = rows[1].causes
    assert cause.words.startswith("static cache length changed") and "max_cache_len" in cause.fix


def test_compiled_module_forward_and_lazy_backward_are_separate_rows():
    torch._dynamo.reset()
    model = torch.nn.Linear(4, 2)
    forward = torch.compile(model, backend="aot_eager", dynamic=False)
    with tl.watch() as w:
        for batch in (3, 5, 3):
            forward(torch.ones(batch, 4)).sum().backward()
    rows = w.table.by_function("Linear.forward")
    assert [
        (r.function.split(" (")[0] + (" (backward)" if "(backward)" in r.function else ""), r.compiles) for r in rows
    ] == [
        ("Linear.forward", 1),
        ("Linear.forward (backward)", 1),
        ("Linear.forward", 1),
        ("Linear.forward (backward)", 1),
    ]
    assert "first backward pass" in rows[1].cause and rows[2].cause.startswith("input dimension 0 changed 3 -> 5")


CACHED_RUN = """
import torch, tpu_lab as tl
def f(x):
    return torch.sin(x) * 2 + 1
with tl.watch() as w:
    torch.compile(f, backend="inductor")(torch.ones(8))
row = w.table.rows[0]
print(row.compiles, row.cached, "1 compiled from cache" in str(w), "all served from the persistent" in str(w))
"""


@pytest.mark.slow
def test_a_compile_served_from_the_on_disk_cache_says_so(tmp_path):
    # Two fresh processes, as after a kernel restart: inductor's FX graph cache serves the second.
    import os
    import subprocess
    import sys

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    runs = [
        subprocess.run([sys.executable, "-c", CACHED_RUN], env=env, capture_output=True, text=True, timeout=600)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr[-2000:]
    assert [r.stdout.split() for r in runs] == [["1", "0", "False", "False"], ["1", "1", "True", "True"]]
