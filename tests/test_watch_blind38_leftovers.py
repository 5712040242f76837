"""tl.watch() checked blind, round 38's leftovers: a size Dynamo traced dynamic that a later line of the
user's code takes as a Python number (``range(t.shape[0])``) is named by that line, on both sides of a graph
break, and never told "none needed once Dynamo makes the size dynamic". Checked against Dynamo's records."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


def class_targets(p, t, arange=False):  # ultralytics/yolov5's build_targets, cut down: a mask, then a range
    t = t[t[:, 2] < 0.8]  # the anchor-ratio filter: a graph break (its size depends on the data)
    c = t[:, 1].long()
    tc = torch.zeros(t.shape[0], p.shape[1])
    tc[torch.arange(t.shape[0]) if arange else range(t.shape[0]), c] = 1.0
    return torch.nn.functional.binary_cross_entropy_with_logits(p[: t.shape[0]], tc)


def batches(arange):
    torch.manual_seed(0)
    for n in (6, 9, 12, 15, 18):  # targets per batch: each a new size after the mask
        t = torch.rand(n, 3)
        t[:, 1] = torch.randint(0, 4, (n,)).float()
        yield torch.randn(24, 4), t, arange


def test_a_size_a_later_range_pins_after_a_break_is_named_by_that_line_and_fixed_by_arange(dynamo):
    f = torch.compile(class_targets, backend="eager")
    with tl.watch() as w:
        for args in batches(arange=False):
            f(*args)
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    resumed = [c for r in w.table if "after the graph break" in r.function for c in r.causes if c.kind == "size"]
    assert len(resumed) >= 2, w.table.to_text()
    assert all("takes t.shape[0] as a Python int in range()" in c.words for c in resumed), w.table.to_text()
    assert all("torch.arange(t.shape[0]) in place of range(t.shape[0])" in c.fix for c in resumed), resumed
    assert not any("once Dynamo makes the size dynamic" in c.fix for c in resumed), resumed
    torch._dynamo.reset()
    with tl.watch() as fixed:  # the fix as printed
        for args in batches(arange=True):
            f(*args)
    assert fixed.table.total_compiles < w.table.total_compiles, (fixed.table.to_text(), w.table.to_text())


def row_counts(x, w):  # a plain function whose loop runs over a size Dynamo traced dynamic
    out = x.sum(1)
    for i in range(x.shape[0]):
        out = out + w[i % 4] * i
    return out


def test_a_loop_over_a_size_is_named_by_its_line_with_no_mark_dynamic(dynamo):
    f = torch.compile(row_counts, backend="eager")
    with tl.watch() as w:
        for n in (3, 5, 7, 9):
            f(torch.randn(n, 2), torch.randn(4))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sized = [c for r in w.table for c in r.causes if c.kind == "size"]
    loop = row_counts.__code__.co_firstlineno + 2
    looped = [c for c in sized if f"line {loop} (for i in range(x.shape[0]):) takes x.shape[0] as the length" in c.words]
    assert looped, w.table.to_text()
    assert all(c.fix.startswith(f"vectorise the loop at line {loop}") and "mark_dynamic(" not in c.fix for c in looped), looped
