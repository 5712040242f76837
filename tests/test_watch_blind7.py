"""tl.watch() checked blind, seventh round: eight scenarios from public code (a padding collator into a
tiny BERT, YOLO-style multi-scale training through F.interpolate, a loss whose label smoothing changes,
meta-llama's original attention) by a checker who had not read the watcher. Every record was accounted
for; the words it got wrong are asserted right here, each run also checked against Dynamo's records."""

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def causes(w):
    return [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")]


def rescale(imgs, sf):
    if sf != 1:
        imgs = F.interpolate(imgs, scale_factor=sf, mode="bilinear", align_corners=False)
    return imgs.mean()


def test_a_float_the_graph_still_pins_is_never_called_dynamic(dynamo):
    f = torch.compile(rescale, backend=BACKEND)
    with tl.watch() as w:
        for sf in (1.0, 0.5, 0.75, 1.25):
            f(torch.randn(2, 3, 16, 16), sf)
    check_against_dynamo(w, dynamo)
    assert not any(c.kind == "dynamic" for r in w.table for c in r.causes)
    assert all(not r.dynamic for r in w.table)
    found = causes(w)
    assert len(found) == 3 and all("each new value still compiles a graph of its own" in c.words for c in found)
    assert all("torch's interpolate needs it as one fixed value" in c.words for c in found)
    assert all("keep sf to a few values" in c.fix and "torch.tensor(" not in c.fix for c in found)


def embed(x):
    return x.sum(-1)


def test_a_size_of_one_is_told_about_mark_unbacked_not_mark_dynamic(dynamo):
    f = torch.compile(embed, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 4))
        f(torch.ones(1, 4))
    check_against_dynamo(w, dynamo)
    (size,) = causes(w)
    assert "mark_unbacked(x, 0)" in size.fix and "mark_dynamic(" not in size.fix
    assert torch._dynamo.decorators.mark_unbacked  # the fix names a real API


def test_size_one_after_mark_dynamic_is_dynamos_own_specialisation_not_a_branch(dynamo):
    f = torch.compile(embed, backend=BACKEND)
    x = torch.ones(2, 4)
    torch._dynamo.mark_dynamic(x, 0)
    with tl.watch() as w:
        f(x)
        f(torch.ones(1, 4))
    check_against_dynamo(w, dynamo)
    (one,) = causes(w)
    assert one.kind == "size_one" and "branch" not in one.words + one.fix
    assert "Dynamo compiles sizes 0 and 1 as graphs of their own" in one.words and "mark_unbacked(x, 0)" in one.fix


class Tagged(torch.Tensor):
    pass


def test_a_tensor_subclass_is_summarised_as_a_kind_of_tensor(dynamo):
    f = torch.compile(embed, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 4))
        f(torch.ones(2, 4).as_subclass(Tagged))
    summary = "\n".join(w.table.summary())
    assert "another kind of value where a tensor was compiled for (nn.Parameter, a subclass, a plain tensor" in summary
    assert "nn.Parameter vs plain tensor" not in summary


def step_with_flag(x, sync=False):
    y = x * 2
    if sync:
        y = y + 1
    return y


def test_a_flag_that_changed_is_shown_on_the_first_row_too(dynamo):
    f = torch.compile(step_with_flag, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2))
        f(torch.ones(2), sync=True)
        f(torch.ones(2), sync=False)  # the first graph again
    check_against_dynamo(w, dynamo)
    assert [r.signature for r in w.table] == ["x: f32[2], sync: False", "x: f32[2], sync: True"]
    assert [r.compiles for r in w.table] == [1, 1]
