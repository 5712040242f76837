"""tl.watch() on real-code scenarios its author did not test, written from PyTorch's and transformers'
public docs, tutorials and tests (torch.compile's troubleshooting and "dealing with recompilations"
pages, test/dynamo/test_recompiles.py, the compiled-optimizer tutorial, inference_mode's docs,
fine-tuning by freezing parameters, transformers' text-generation pipeline and static-cache docs).
Each is checked against Dynamo's own compilation records and its TORCH_LOGS records for the same run
(``check_against_dynamo``), then the words and the fix are checked against what actually changed."""

import enum
import functools

import pytest
import torch
from _dynamo_oracle import check_against_dynamo, only_causes

import tpu_lab as tl

BACKEND = "eager"


def causes(w, kind=None):
    found = [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")]
    return [c for c in found if kind is None or c.kind == kind]


def sample(logits, temperature):
    return torch.softmax(logits / temperature, -1)


def test_a_sampling_temperature_is_a_float_value(dynamo):
    # a sampling loop that anneals its temperature: a Python float is baked in until Dynamo makes it dynamic
    # at the first change (three values, two graphs: the third reuses the dynamic one)
    f = torch.compile(sample, backend=BACKEND)
    with tl.watch() as w:
        for t in (1.0, 0.7, 0.5):
            f(torch.ones(4), t)
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "sample")
    assert (
        cause.words
        == "Python float temperature changed (was 1.0): Dynamo made temperature dynamic, so later values reuse this graph"
    )
    assert cause.fix == "none needed: later values reuse this graph" and w.table.total_compiles == 2
    assert any(r.dynamic == "temperature" for r in w.table)


class Mode(enum.Enum):
    GREEDY = 1
    SAMPLE = 2


def decode(x, mode):
    return x.argmax(-1) if mode is Mode.GREEDY else x.softmax(-1).argmax(-1)


def test_an_enum_mode_is_a_value_not_another_object(dynamo):
    f = torch.compile(decode, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 3), Mode.GREEDY)
        f(torch.ones(2, 3), Mode.SAMPLE)
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "decode")
    assert cause.kind == "enum" and cause.words == "mode is another Mode member (each enum value is its own graph)"
    assert "reuse one instance" not in cause.fix


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)
        self.act = torch.nn.ReLU()
        self.use_cache = True  # a transformers-style config flag read in forward

    def forward(self, x):
        y = self.act(self.proj(x))
        return y * 2 if self.use_cache else y + 1


def test_module_flag_and_a_replaced_submodule(dynamo):
    model = Block()
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 3))
        model.use_cache = False
        f(torch.ones(2, 3))
        model.act = torch.nn.GELU()
        f(torch.ones(2, 3))
    check_against_dynamo(w, dynamo)
    flag, swapped = only_causes(w, "Block.forward")
    assert flag.kind == "flag" and "self.use_cache was True" in flag.words
    assert swapped.kind == "type" and swapped.words == "self.act is now a GELU, was a ReLU (a submodule was replaced)"
    assert "verbatim" not in {c.kind for c in causes(w)}


def apply(model, x):
    return model(x)


def test_a_fresh_module_instance_and_one_of_another_size(dynamo):
    # test_recompiles.py: a new instance of the same shape reuses the graph (parameters are inputs);
    # another size fails a guard on a parameter, which mark_dynamic on an input cannot fix
    f = torch.compile(apply, backend=BACKEND)
    with tl.watch() as w:
        f(torch.nn.Linear(3, 3), torch.ones(2, 3))
        f(torch.nn.Linear(3, 3), torch.ones(2, 3))
        f(torch.nn.Linear(3, 4), torch.ones(2, 3))
    # Dynamo logs the bias (its first failed guard); the weight's other shape failed too
    check_against_dynamo(w, dynamo, also=["tensor 'model._parameters['weight']' size mismatch at index 0"])
    (cause,) = only_causes(w, "apply")  # one change: both parameters of the bigger model
    assert cause.kind == "parameter_shape" and len(cause.guard.splitlines()) == 2
    assert cause.words.startswith("parameters model.bias, model.weight have another shape (dimension 0: 3 -> 4)")
    assert "mark_dynamic" not in cause.fix and "force_parameter_static_shapes" in cause.fix


def test_inference_mode_after_no_grad_is_an_inference_tensor_not_a_device(dynamo):
    model = torch.nn.Linear(3, 3)
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        with torch.no_grad():
            f(torch.ones(2, 3))
        with torch.inference_mode():
            f(torch.ones(2, 3))
    # Dynamo logs the input; the parameters failed too: inference mode drops autograd for every tensor
    check_against_dynamo(w, dynamo, also=["tensor 'fn._parameters['weight']'", "tensor 'fn._parameters['bias']'"])
    made, seen = only_causes(w, "Linear.forward")
    assert made.kind == "inference" and made.words.startswith("input is now an inference tensor")
    assert seen.kind == "inference" and seen.words.startswith("self.bias, self.weight are seen without autograd")
    assert "device" not in made.words + seen.words and "inference_mode" in made.fix


def test_freezing_a_parameter(dynamo):
    # fine-tuning tutorials freeze layers with requires_grad_(False)
    model = torch.nn.Linear(3, 3)
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 3))
        model.weight.requires_grad_(False)
        f(torch.ones(2, 3))
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "Linear.forward")
    assert cause.words == "parameter self.weight was frozen (requires_grad True -> False)"
    assert "detach" not in cause.fix and "freeze" in cause.fix


def concat(xs):
    return torch.cat(xs).sum()


def test_a_tuple_of_tensors_that_grows(dynamo):
    f = torch.compile(concat, backend=BACKEND)
    with tl.watch() as w:
        for n in (2, 3, 4):
            f((torch.ones(2),) * n)
    check_against_dynamo(w, dynamo)
    assert [c.words for c in only_causes(w, "concat")] == [
        "xs has a different length (was 2)",
        "xs grows at every compile (was 3): each new length compiles a graph of its own, at most 8",
    ]


def shifted(x, cfg):
    return x * cfg["opt"]["scale"] + cfg["opt"]["shift"]


def test_a_nested_config_dict_value(dynamo):
    f = torch.compile(shifted, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2), {"opt": {"scale": 2, "shift": 0.5}})
        f(torch.ones(2), {"opt": {"scale": 2, "shift": 0.25}})
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "shifted")
    assert cause.words.startswith("Python float cfg['opt']['shift'] changed (was 0.5")


def scale(x, *, k):
    return x * k


class Scaler:
    def __init__(self, s: float) -> None:
        self.s = s

    def __call__(self, x):
        return x * self.s


def test_a_partial_and_a_callable_object_are_named_by_their_code(dynamo):
    obj = Scaler(2.0)
    g = torch.compile(obj, backend=BACKEND)
    with tl.watch() as w:
        for k in (2, 3):
            torch.compile(functools.partial(scale, k=k), backend=BACKEND)(torch.ones(2))
        g(torch.ones(2))
        obj.s = 3.0
        g(torch.ones(2))
    check_against_dynamo(w, dynamo)
    assert not [r for r in w.table if "external_utils" in r.function or r.function.startswith("inner ")]
    (k,) = only_causes(w, "scale")
    assert k.words.startswith("Python int k changed (was 2")
    # every non-module callable goes through one wrapper code object in torch.compile: Dynamo files the
    # object's first compile as a recompile of it (guard: the wrapped object's type)
    shared, s = only_causes(w, "Scaler.__call__")
    assert shared.kind == "shared_wrapper" and shared.words.startswith("the first compile of this callable")
    assert "share one recompile limit" in shared.fix
    # a float attribute changed once: Dynamo makes it dynamic (checked: 4 values give 2 graphs)
    assert (
        s.words == "Python float self.s changed (was 2.0): Dynamo made self.s dynamic, so later values reuse this graph"
    )


def test_many_compiled_callables_share_one_recompile_limit(dynamo):
    classes = [type(f"Step{i}", (), {"__call__": lambda self, x, i=i: x * (i + 1)}) for i in range(10)]
    w = tl.watch()
    with w:
        for cls in classes:
            torch.compile(cls(), backend=BACKEND)(torch.ones(2))
    check_against_dynamo(w, dynamo)
    # eight compiles fill the shared wrapper's limit: the ninth object is refused (Dynamo records that
    # one refusal; later calls of that code run uncompiled without a record, and the table says so)
    (limited,) = [r for r in w.table if r.limit_hit]
    assert limited.function.startswith("Step8.__call__") and limited.uncompiled == 1
    assert "share one recompile limit" in limited.causes[-1].fix
    assert "recompile limit: Step8.__call__" in str(w.table) and "Dynamo no longer sees later calls" in str(w.table)


def noisy(x):
    torch.manual_seed(0)
    return x + torch.randn(2)


def debug(x):
    print("shape", x.shape)
    return x * 2


def sparse(x):
    n = x.nonzero()
    return n.sum() + x.tolist()[0]


def test_graph_breaks_from_seed_print_nonzero_and_tolist(dynamo):
    with tl.watch() as w:
        for fn, arg in ((noisy, torch.ones(2)), (debug, torch.ones(2)), (sparse, torch.tensor([0.0, 1.0]))):
            torch.compile(fn, backend=BACKEND)(arg)
    check_against_dynamo(w, dynamo)
    assert len(w.table.breaks) == 4 and all(b.where.startswith("test_watch_unseen.py:") for b in w.table.breaks)
    assert all(b.fix for b in w.table.breaks)  # Dynamo's hint for each
    # print("shape", x.shape): a torch.Size, which reorderable_logging_functions refuses (can_reorder_logs)
    assert "manual_seed" in str(w.table) and "reorderable_logging_functions" not in str(w.table)
    assert "if not torch.compiler.is_compiling(): print(...)" in str(w.table)
    assert "capture_dynamic_output_shape_ops" in str(w.table) and any("tolist()" in b.words for b in w.table.breaks)


def test_compiled_adam_step_breaks_inside_torch_not_in_the_users_code(dynamo):
    # PyTorch's tutorial "Compiling the optimizer with torch.compile": the step is wrapped in a compiled function
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    @torch.compile(backend=BACKEND)
    def step():
        opt.step()

    with tl.watch() as w:
        for _ in range(2):
            model(torch.ones(2, 3)).sum().backward()
            step()
    check_against_dynamo(w, dynamo)
    assert w.table.breaks
    for b in w.table.breaks:
        assert ("library code" in b.words or "torch's own code" in b.words) and "optimizer.py:" in b.words, b
        assert "none on your side" in b.fix and "Remove" not in b.fix


def parity(x):
    return x * 2 if x.shape[0] % 2 == 0 else x - 1


def test_dynamic_true_is_not_called_automatic_and_a_parity_branch_names_the_line(dynamo):
    f = torch.compile(parity, backend=BACKEND, dynamic=True)
    with tl.watch() as w:
        for n in (4, 6, 5):
            f(torch.ones(n))
    check_against_dynamo(w, dynamo)
    words = [c.words for r in w.table for c in r.causes]
    assert "x dim 0 dynamic from the first compile (torch.compile(dynamic=True))" in words
    assert not any("automatic dynamic" in x for x in words)
    (branch,) = only_causes(w, "parity")
    assert branch.kind == "specialised" and "test_watch_unseen.py:" in branch.words


def test_a_collate_fn_with_two_batch_sizes(dynamo):
    data = [torch.ones(3)] * 5
    f = torch.compile(torch.nn.Linear(3, 1), backend=BACKEND)
    with tl.watch() as w:
        for batch_size in (2, 3):
            for x in torch.utils.data.DataLoader(data, batch_size=batch_size, collate_fn=torch.stack):
                f(x)
    check_against_dynamo(w, dynamo)
    first = only_causes(w, "Linear.forward")[0]
    assert "dimension 0 changed 2 -> 1" in first.words and "drop_last=True" in first.fix
    assert "on a TPU: pad to buckets" in first.fix  # TPU advice labelled as such on CPU


@pytest.fixture(scope="module")
def qwen():
    return tl.load_model("tiny:qwen3")


@pytest.mark.slow
def test_a_text_generation_pipeline_with_a_dynamic_cache(dynamo, qwen):
    from transformers import pipeline

    model, tok = qwen
    pipe = pipeline("text-generation", model=model, tokenizer=tok)
    forward = model.forward
    model.forward = torch.compile(forward, backend=BACKEND)
    try:
        with tl.watch() as w:
            for prompt in ("Hello", "Hello world, how are you"):
                pipe(prompt, max_new_tokens=3, do_sample=False)
    finally:
        model.forward = forward
    # Dynamo logs one layer's guard; every layer's cache changes alike, and position_ids follows the prompt
    also = ["kwargs['cache'].layers[", "tensor 'kwargs['position_ids']' size mismatch at index 1. expected 1, actual 6"]
    check_against_dynamo(w, dynamo, also=also)
    found = {c.kind: c for c in causes(w)}
    assert "static" not in found["cache_length"].words and "DynamicCache" in found["cache_length"].words
    assert found["cache_state"].words == "the KV cache was empty, now holds tokens (prefill -> decode)"
    dynamic = [c.words for r in w.table for c in r.causes if c.kind == "dynamic"]
    assert dynamic and not any("kwargs_cache_layers" in d for d in dynamic), dynamic
    # the pipeline builds input_ids: no mark_dynamic on a tensor the user never holds; names as forward's
    (prompt,) = [c for c in causes(w) if c.words.startswith("a 6-token prompt (prefill)")]
    assert "mark_dynamic(" not in prompt.fix and prompt.fix.startswith("none needed: Dynamo made input_ids dim 1")
    assert "; to skip even this one: transformers builds this input" in prompt.fix
    assert any(r.signature.startswith("self: Qwen3ForCausalLM (eval), input_ids: i64[1, 6]") for r in w.table)


@pytest.mark.slow
def test_generate_with_a_static_cache_and_another_max_new_tokens(dynamo, qwen):
    from transformers import CompileConfig

    model, tok = qwen
    config = CompileConfig(backend=BACKEND, dynamic=False, mode="default")
    config._compile_all_devices = True  # generate auto-compiles only on accelerators otherwise
    ids = tok("The French Bread Law states", return_tensors="pt")
    with tl.watch() as w:
        for n in (3, 6):
            model.generate(**ids, max_new_tokens=n, cache_implementation="static", compile_config=config)
    # Dynamo logs layer 0's keys; the other layers and the attention mask (it spans the cache) failed too
    mask = "tensor 'kwargs['attention_mask']['full_attention']' size mismatch at index 3. expected 7, actual 10"
    check_against_dynamo(w, dynamo, also=["tensor 'kwargs['cache'].layers[", mask])
    (cause,) = causes(w)
    assert cause.kind == "cache_length" and cause.words.startswith("static cache length changed 7 -> 10")
    assert cause.words.endswith("(the attention mask follows it)") and "max_cache_len" in cause.fix


class Stack(torch.nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_module_list_that_grows_and_a_mark_static_input(dynamo):
    # progressive growing of a network (a layer appended between stages), and torch._dynamo.mark_static
    model = Stack(2)
    f = torch.compile(model, backend=BACKEND)
    g = torch.compile(lambda x: x * 2, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2))
        model.layers.append(torch.nn.Linear(2, 2))
        f(torch.ones(2))
        for n in (2, 3, 4):
            x = torch.ones(n)
            torch._dynamo.mark_static(x, 0)
            g(x)
    check_against_dynamo(w, dynamo)
    (grown,) = only_causes(w, "Stack.forward")
    assert grown.words == "self.layers has another number of modules (was 2)" and grown.kind == "length"
    pinned = only_causes(w, "<lambda>")
    assert [c.words.split(" (")[0] for c in pinned] == ["x dimension 0 changed 2 -> 3", "x dimension 0 changed 3 -> 4"]
    assert all("mark_static" in c.words and "mark_dynamic" not in c.fix for c in pinned)
