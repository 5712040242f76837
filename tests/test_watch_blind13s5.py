"""tl.watch() checked blind, thirteenth round, scenario s5: timm's ModelEmaV3 keeps an EMA copy of a model and
lerps it toward the model in a ``@torch.no_grad()`` method compiled on its own each step (a second EMA instance
through the same decorated method); forward-mode AD opened inside a compiled function while an outer dual level
is active makes Dynamo fail on its own error; a conv net fed contiguous and then channels_last (or transposed)
images of another size. What the reviewer found wrong is asserted right here; every run is also checked
against Dynamo's own records and the watch's invariants."""

import copy
import inspect

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _dynamo_oracle import check_against_dynamo, only_causes

import tpu_lab as tl

BACKEND = "eager"


class ModelEmaV3(torch.nn.Module):
    def __init__(self, model, decay=0.9999):
        super().__init__()
        self.module = copy.deepcopy(model)
        self.module.requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def update(self, model, step=None):
        decay = self.decay if step is None else min(self.decay, (1 + step) / (10 + step))
        ema_params, model_params = list(self.module.parameters()), list(model.parameters())
        torch._foreach_lerp_(ema_params, model_params, 1.0 - decay)


class Averager:  # another EMA helper, not a module: a plain object with a decorated method
    def __init__(self, model):
        self.shadow = [p.detach().clone() for p in model.parameters()]

    @torch.no_grad()
    def step(self, model):
        for s, p in zip(self.shadow, model.parameters(), strict=True):
            s.mul_(0.5).add_(p, alpha=0.5)


UPDATE_LINE = inspect.unwrap(ModelEmaV3.update).__code__.co_firstlineno
NAME = f"ModelEmaV3.update via @torch.no_grad (test_watch_blind13s5.py:{UPDATE_LINE})"


def test_a_no_grad_method_is_named_through_its_decorator_and_a_second_instance_is_said(dynamo):
    model = torch.nn.Linear(4, 4)
    ema, ema2 = ModelEmaV3(model), ModelEmaV3(model, decay=0.999)
    ema.update = torch.compile(ema.update, backend=BACKEND)
    with tl.watch() as w:
        for step in range(3):
            ema.update(model, step=step)
        torch.compile(ema2.update, backend=BACKEND)(model, step=5)
    check_against_dynamo(w, dynamo)
    assert {r.function for r in w.table} == {NAME}  # not ModelEmaV3.forward (module.py), not torch's wrapper
    assert all("model: Linear (train)" in r.signature and "args" not in r.signature for r in w.table)
    # the second instance shares the method's compiled code: its own decay failed the guard
    (decay,) = [c for c in only_causes(w, "ModelEmaV3.update") if "decay" in c.words]
    assert decay.words.startswith("Python float self.decay changed (was 0.9999)")
    assert "another instance of ModelEmaV3 than the one the graph was compiled for" in decay.words


def test_another_callable_through_the_shared_wrapper_says_whose_graph_it_was_compared_with(dynamo):
    model, wide = torch.nn.Linear(4, 4), torch.nn.Linear(4, 8)
    compiled = torch.compile(ModelEmaV3.update, backend=BACKEND)  # the class's method: self is args[0]
    with tl.watch() as w:
        compiled(ModelEmaV3(model), model, step=1)
        torch.compile(Averager(model).step, backend=BACKEND)(model)
        compiled(ModelEmaV3(wide), wide, step=1)
    check_against_dynamo(
        w,
        dynamo,
        also=[
            # the other method's code (Dynamo logs the wrapper's first guard); torch 2.13 guards the code its
            # decorator's closure holds
            "___check_obj_id(fn.__code__" if torch.__version__ >= "2.14" else "___check_obj_id(fn.__closure__",
            "size mismatch at index 0. expected 4, actual 8",  # each parameter of the wider model
        ],
    )
    (shared,) = only_causes(w, "Averager.step")
    assert shared.kind == "shared_wrapper" and shared.words.endswith(f"(it last held {NAME})")
    (wider,) = only_causes(w, "ModelEmaV3.update")
    assert wider.kind == "parameter_shape" and "self.module.weight" in wider.words
    assert "(another instance of ModelEmaV3 than the one the graph was compiled for" in wider.words
    assert all("self: ModelEmaV3 (train), model: Linear (train)" in r.signature for r in w.table.by_function(NAME))


def jvp_step(primal, tangent):
    with fwAD.dual_level():
        dual = fwAD.make_dual(primal, tangent)
        return fwAD.unpack_dual(torch.sin(dual)).tangent


def test_an_internal_dynamo_error_is_its_own_failed_compile_with_disable_as_the_fix(dynamo):
    # torch's own test suite (test_jvp ... forward_ad): nested forward-mode AD inside a compiled function
    # raises InternalTorchDynamoError; Dynamo's record holds the wrapped error (fail_type RuntimeError)
    f = torch.compile(jvp_step, backend=BACKEND)
    x, t = torch.rand(3), torch.rand(3)
    with tl.watch() as w:
        f(x, t)
        with pytest.raises(torch._dynamo.exc.InternalTorchDynamoError), fwAD.dual_level():
            f(x, t)
    check_against_dynamo(w, dynamo, also=["_current_level == -1"])
    line = jvp_step.__code__.co_firstlineno + 1
    (failed,) = [c for c in only_causes(w, "jvp_step") if c.kind == "failed"]
    assert failed.words.startswith(
        "Dynamo failed internally (RuntimeError: Nested forward mode AD is not supported at the moment) compiling "
        f"jvp_step at test_watch_blind13s5.py:{line}"
    )
    assert "the call raised InternalTorchDynamoError, and so does every call of jvp_step that needs a new graph" in (
        failed.words
    )
    assert failed.fix.startswith(
        f"wrap jvp_step (or the line at test_watch_blind13s5.py:{line}) in torch.compiler.disable"
    )
    assert "report it to PyTorch" in failed.fix


def conv_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU())


def test_channels_last_with_a_new_size_names_both_and_reuse_is_limited_to_that_layout(dynamo):
    f = torch.compile(conv_net(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 3, 8, 8))
        f(torch.randn(2, 3, 16, 16).to(memory_format=torch.channels_last))
    check_against_dynamo(w, dynamo, also=["stride mismatch at index", "size mismatch at index 3"])
    (row,) = [r for r in w.table if r.compiles and "16, 16" in r.signature]
    assert row.signature == "input: f32[2, 3, 16, 16] channels_last"
    layout = next(c for c in row.causes if c.kind == "stride")
    assert layout.words == "input's memory layout changed to channels_last (stride 1: 64 -> 1)"
    sizes = [c for c in row.causes if c.kind == "size"]
    assert len(sizes) == 2 and all("reuse this graph only while input stays channels_last" in c.fix for c in sizes)
    (note,) = [c for c in row.causes if c.kind == "dynamic"]
    assert note.fix == "none needed: new sizes and values reuse this graph only while input stays channels_last"


def layer_norm_ish(x):
    return (x - x.mean(-1, keepdim=True)) * 2


def test_a_transposed_input_then_a_contiguous_one_of_another_size_names_the_layout_too(dynamo):
    f = torch.compile(layer_norm_ish, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(8, 4).t())  # a transposed view: (4, 8) with strides (1, 4)
        f(torch.randn(5, 8))
    check_against_dynamo(w, dynamo, also=["stride mismatch at index"])
    causes = only_causes(w, "layer_norm_ish")
    assert [c.kind for c in causes] == ["size", "stride"]
    assert causes[1].words == "x's memory layout changed to contiguous (stride 0: 1 -> 8)"
    assert "later sizes reuse this graph only while x stays contiguous" in causes[0].fix
    assert [r.signature for r in w.table] == ["x: f32[4, 8] non-contiguous", "x: f32[5, 8]"]


def test_a_dynamic_graph_then_channels_last_is_a_layout_change_not_a_size_bound(dynamo):
    f = torch.compile(conv_net(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 3, 8, 8))
        f(torch.randn(2, 3, 16, 16))  # sizes made dynamic
        f(torch.randn(2, 3, 12, 12).to(memory_format=torch.channels_last))
    # the dynamic graph's symbolic strides: its contiguity is a relation between stride and sizes
    check_against_dynamo(w, dynamo, also=["args[0].stride()[", "size mismatch at index 3"])
    (row,) = [r for r in w.table if "channels_last" in r.signature]
    (layout,) = [c for c in row.causes if c.kind not in ("first", "dynamic")]
    assert (
        layout.kind == "stride" and layout.words == "input's memory layout changed to channels_last (stride 3: 1 -> 3)"
    )
