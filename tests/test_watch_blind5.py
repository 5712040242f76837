"""tl.watch() checked blind, fifth round: twelve scenarios from public code (PyTorch's AMP, per-sample
gradients and nn.MultiheadAttention recipes, transformers' gradient-checkpointing layer wrapper and BART's
LayerDrop, a module counting its steps, a task picked by a dataclass field) by a checker who had not read
the watcher. Every compile, failure and break was accounted for; these are the words it got wrong, each
asserted right here, and each run is checked against Dynamo's own records too."""

import dataclasses
import functools

import pytest
import torch
from _dynamo_oracle import check_against_dynamo
from torch import nn

import tpu_lab as tl

BACKEND = "eager"


def causes(w):
    return [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")]


def _checkpointing(cls):
    # transformers' GradientCheckpointingLayer: forward wrapped by @wraps(forward) def w(self, *args, **kwargs),
    # and the wrapper names itself (is it the outermost?)
    forward = cls.forward

    @functools.wraps(forward)
    def forward_with_checkpointing(self, *args, **kwargs):
        assert type(self).forward is forward_with_checkpointing
        return forward(self, *args, **kwargs)

    cls.forward = forward_with_checkpointing
    return cls


@_checkpointing
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, hidden_states, scale=1.0):
        return self.lin(hidden_states) * scale


def test_a_method_behind_a_wraps_decorator_is_named_as_the_user_names_it(dynamo):
    layer = torch.compile(Layer(), backend=BACKEND)
    with tl.watch() as w:
        layer(torch.randn(2, 4))
        layer(torch.randn(3, 4))
    check_against_dynamo(w, dynamo)
    assert {r.function.split(" (")[0] for r in w.table} == {"Layer.forward"}
    assert all(r.signature.startswith("self: Layer (train), hidden_states: f32[") for r in w.table)
    (size,) = causes(w)
    assert size.words.startswith("hidden_states dimension 0 changed 2 -> 3")
    assert "args[0]" not in str(w).replace("[tensor 'args[0]'", "")  # Dynamo's own guard text aside


def _loss(model, params, sample, target):
    out = torch.func.functional_call(model, params, (sample.unsqueeze(0),))
    return nn.functional.cross_entropy(out, target.unsqueeze(0))


def test_vmap_of_grad_is_named_after_the_users_function_and_never_told_to_mark_dynamic(dynamo):
    model = nn.Linear(6, 3)
    params = {k: v.detach() for k, v in model.named_parameters()}
    compute_loss = functools.partial(_loss, model)
    per_sample = torch.compile(torch.func.vmap(torch.func.grad(compute_loss), in_dims=(None, 0, 0)), backend=BACKEND)
    with tl.watch() as w:
        per_sample(params, torch.randn(8, 6), torch.randint(3, (8,)))
        per_sample(params, torch.randn(5, 6), torch.randint(3, (5,)))
    check_against_dynamo(w, dynamo, also=["size mismatch at index 0. expected 8, actual 5"])  # both inputs failed
    (size,) = causes(w)
    assert "mark_dynamic" not in size.fix and "pad the last batch to 8" in size.fix
    assert all(r.function.startswith("_loss (") for r in w.table)


def test_a_dimension_marked_dynamic_that_the_code_fixes_is_said_with_maybe_mark_dynamic(dynamo):
    model = nn.Linear(6, 3)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def compute_loss(params, sample, target):
        return _loss(model, params, sample, target)

    per_sample = torch.compile(torch.func.vmap(torch.func.grad(compute_loss), in_dims=(None, 0, 0)), backend=BACKEND)
    data = torch.randn(8, 6)
    torch._dynamo.mark_dynamic(data, 0)
    with tl.watch() as w, pytest.raises(Exception, match="Constraints violated"):
        per_sample(params, data, torch.randint(3, (8,)))
    (failed,) = [c for r in w.table for c in r.causes if c.kind == "failed"]
    assert "sample dimension 0 was marked dynamic (mark_dynamic), but the code fixes it at 8" in failed.words
    assert "torch._dynamo.maybe_mark_dynamic(sample, 0)" in failed.fix
    assert "args[" not in failed.words + failed.fix


def masked_mean(x, thresh):
    keep = x[x > thresh]  # a data-dependent size: a graph break, the rest resumes with it
    return keep.mean() * 2


def test_a_value_carried_over_a_graph_break_is_named_and_its_fix_is_real(dynamo):
    f = torch.compile(masked_mean, backend=BACKEND)
    with tl.watch() as w:
        f(torch.arange(16.0), 7.5)  # 8 values kept
        f(torch.arange(16.0) + 1, 7.5)  # 9
    check_against_dynamo(w, dynamo)
    resumed = [r for r in w.table if "after the graph break" in str(r.function)]
    assert len(resumed) == 2 and [r.signature for r in resumed] == [  # named as the break's line assigns it
        "keep: f32[8]",
        "keep: f32[9]",
    ]
    (size,) = causes(w)
    assert size.words.startswith("keep changed size (dimension 0: 8 -> 9)")  # what the break line assigns
    assert size.fix.startswith("remove the graph break") and "mark_dynamic" not in size.fix
    assert "stack0" not in str(w).replace("'___stack0'", "")


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.step = 0

    def forward(self, x):
        self.step += 1
        return self.lin(x) * self.step


def test_an_int_attribute_of_a_module_kept_static_gets_a_fix_that_matches(dynamo):
    m = torch.compile(Counting(), backend=BACKEND)
    with tl.watch() as w:
        for _ in range(4):
            m(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    found = [c for c in causes(w) if "self.step" in c.words]
    assert found and all("each new value compiles a graph of its own" in c.words for c in found)
    assert all("usually none" not in c.fix and "allow_unspec_int_on_nn_module = True" in c.fix for c in found)
    assert torch._dynamo.config.allow_unspec_int_on_nn_module is False  # the fix names a real, settable option


@dataclasses.dataclass
class Task:
    name: str
    temperature: float


class MultiTask(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"sst2": nn.Linear(8, 2), "mnli": nn.Linear(8, 3)})

    def forward(self, x, cfg):
        return self.heads[cfg.name](x) / cfg.temperature


def test_graphs_that_differ_by_a_string_or_a_flag_are_rows_of_their_own(dynamo):
    m = torch.compile(MultiTask(), backend=BACKEND)
    attn = torch.compile(nn.MultiheadAttention(16, 2, batch_first=True), backend=BACKEND)
    q = torch.randn(2, 5, 16)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    with tl.watch() as w, torch.no_grad():
        m(torch.randn(4, 8), Task("sst2", 1.0))
        m(torch.randn(4, 8), Task("mnli", 1.0))
        attn(q, q, q, key_padding_mask=mask)
        attn(q, q, q, key_padding_mask=mask, need_weights=False)
    check_against_dynamo(w, dynamo)
    rows = {r.signature: r.compiles for r in w.table}
    assert len(rows) == len(list(w.table)) == 4 and set(rows.values()) == {1}
    assert any("cfg.name: str 'mnli'" in s for s in rows) and any("need_weights: False" in s for s in rows)
    kwargs = [c for c in causes(w) if c.kind == "kwargs"]
    assert kwargs and kwargs[-1].words.endswith("need_weights now passed")
