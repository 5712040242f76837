"""tl.watch() checked blind, round 35's leftovers: every value carried over a break on an augmented assignment
(``self.histogram += torch.histc(x, ..., min=float(lo), max=float(hi))``, torch's HistogramObserver) is named
as the line names it, so a changed ``float(lo)`` is never said to be ``float(hi)``; a Python float compared
to ``inf`` is translated; a backward row names its forward's carried values. Checked against Dynamo's records."""

import itertools

import numpy as np
import pytest
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


class HistObserver(torch.nn.Module):  # torch.ao's HistogramObserver, cut down: a histogram over a running range
    def __init__(self, bins=8):
        super().__init__()
        self.bins = bins
        self.register_buffer("histogram", torch.zeros(bins))
        self.register_buffer("min_val", torch.tensor(float("inf")))
        self.register_buffer("max_val", torch.tensor(float("-inf")))

    def forward(self, x):
        mn, mx = torch.aminmax(x.detach())
        if self.min_val.item() == float("inf"):  # the first batch sets the range
            self.min_val.copy_(mn)
            self.max_val.copy_(mx)
        lo, hi = torch.minimum(mn, self.min_val), torch.maximum(mx, self.max_val)
        edges = torch.linspace(0, 1, self.bins + 1) * (hi - lo) + lo
        idx = torch.searchsorted(edges, x.detach().flatten().contiguous(), right=True).clamp(1, self.bins) - 1
        self.histogram += torch.bincount(idx, minlength=self.bins)[: self.bins].float()
        self.histogram += torch.histc(x, bins=self.bins, min=float(lo), max=float(hi))
        self.min_val.copy_(lo)
        self.max_val.copy_(hi)
        return x


def test_values_carried_over_a_break_in_an_augmented_assignment_are_each_named_as_the_line_names_them(dynamo):
    torch.manual_seed(0)
    observer = torch.compile(HistObserver(), backend="aot_eager", dynamic=True)  # histc specialises min, max
    with tl.watch() as w:
        for n in (10, 17, 33):  # calibration batches, each widening the range
            observer(torch.randn(n, 4) * n)
    check_against_dynamo(w, dynamo, also=("___stack6 == ",))  # float(hi) changed too: Dynamo logs only float(lo)
    histc = [r for r in w.table if "histc: function" in r.signature]
    assert histc and all(r.signature.startswith("self.histogram: f32[8], histc: function, ") for r in histc), [
        r.signature for r in histc
    ]
    assert all(r.signature.count("self: ") == 1 for r in w.table), [r.signature for r in w.table]
    changed = [c for r in histc for c in r.causes if c.count and "changed" in c.words]
    # each recompile's guard is on float(lo), the first of the two: never told as float(hi)'s change
    assert changed and all(c.words.startswith("Python float float(lo) changed") for c in changed), [
        c.words for c in changed
    ]
    branch = [
        c
        for r in w.table
        if r.signature.startswith("self.min_val.item()")
        for c in r.causes
        if c.count and c.kind != "first"
    ]
    assert branch and all("self.min_val.item() changed (was inf)" in c.words for c in branch), [
        (c.kind, c.words) for c in branch
    ]


class LM(torch.nn.Module):  # pytorch/examples' word language model: a recurrent layer Dynamo breaks at
    def __init__(self):
        super().__init__()
        self.emb, self.out = torch.nn.Embedding(20, 8), torch.nn.Linear(8, 20)

    def rnn(self, x):  # a GRU's output and state (torch 2.13 gives up on a whole forward at a real GRU)
        torch._dynamo.graph_break()
        return x.tanh(), x[:, -1]

    def forward(self, src, tgt):
        h, _ = self.rnn(self.emb(src))
        return torch.nn.functional.cross_entropy(self.out(h).flatten(0, 1), tgt.flatten())


def test_a_backward_row_names_the_carried_values_as_its_forward_row_does(dynamo):
    model = torch.compile(LM(), backend="aot_eager")  # a backward graph to compile
    with tl.watch() as w:
        model(torch.randint(0, 20, (2, 6)), torch.randint(0, 20, (2, 6))).backward()
    check_against_dynamo(w, dynamo)
    resumed = {r.function.replace(" (backward)", ""): r.signature for r in w.table if "graph break" in r.function}
    backward = [r for r in w.table if "graph break" in r.function and "(backward)" in r.function]
    assert backward and all(r.signature == resumed[r.function.replace(" (backward)", "")] for r in backward)
    ours = [r for r in backward if r.function.startswith("forward after")]  # the line h, _ = self.rnn(...) resumes
    assert ours and all(r.signature.startswith("h: f32[2, 6, 8]") for r in ours), [r.signature for r in backward]


class AdaptiveLM(torch.nn.Module):  # pytorch/examples' word language model with an adaptive softmax head
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)
        self.head = torch.nn.AdaptiveLogSoftmaxWithLoss(16, 40, cutoffs=[10, 20])

    def forward(self, h, tgt):
        return self.head(self.proj(h).flatten(0, 1), tgt.flatten()).loss


def test_a_data_dependent_op_inside_library_code_is_never_told_to_be_rewritten_at_a_fixed_size(dynamo):
    model = torch.compile(AdaptiveLM(), backend="eager")
    with tl.watch() as w:
        model(torch.randn(2, 6, 8), torch.randint(0, 40, (2, 6)))
    check_against_dynamo(w, dynamo)
    inside = [b for b in w.table.breaks if "library code" in b.words and "nonzero" in b.words]
    # the stand-in (a mask and torch.where) would be an edit of torch's adaptive.py: the user's call moves instead
    assert inside and all("make your line's call outside the compiled function" in b.fix for b in inside), [
        (b.words, b.fix) for b in w.table.breaks
    ]
    assert not any("in place of" in b.fix for b in inside), [b.fix for b in inside]


class TinyGPT(torch.nn.Module):  # minGPT: learned positions, a context cropped past block_size
    def __init__(self, block_size=16):
        super().__init__()
        self.block_size, self.wte, self.wpe = block_size, torch.nn.Embedding(30, 8), torch.nn.Embedding(block_size, 8)

    def forward(self, idx):
        t = idx.size(1)
        if t > self.block_size:
            idx = idx[:, -self.block_size :]
            t = self.block_size
        return self.wte(idx) + self.wpe(torch.arange(0, t))


def test_dynamos_own_lower_bound_of_a_size_is_not_said_to_be_set_by_the_line_that_first_used_it(dynamo):
    model = torch.compile(TinyGPT(), backend="eager")
    with tl.watch() as w:
        for t in (6, 9, 20):
            model(torch.randint(0, 30, (2, t)))
    check_against_dynamo(w, dynamo)
    crossed = [c for r in w.table for c in r.causes if "crossed a bound" in c.words]
    # 2 <= t is Dynamo's 0/1 specialisation, shown at t = idx.size(1); the user's bound is the branch's
    assert crossed and all("if t > self.block_size" in c.words for c in crossed), [c.words for c in crossed]
    assert not any("t = idx.size(1)" in c.words for c in crossed), [c.words for c in crossed]


def brute_force_match(cost):  # DETR's matcher, scipy's linear_sum_assignment done by brute force over numpy
    n_q, n_t = cost.shape
    best = min(itertools.permutations(range(n_q), n_t), key=lambda rows: sum(cost[r, j] for j, r in enumerate(rows)))
    return np.array(best), np.arange(n_t)


def set_loss(matcher):
    def loss(pred, target):
        rows, cols = matcher(torch.cdist(pred, target, p=1).detach().numpy())
        return torch.nn.functional.l1_loss(pred[torch.as_tensor(rows)], target[torch.as_tensor(cols)])

    return loss


@pytest.mark.skipif(torch.__version__ < "2.14", reason="torch 2.13's Dynamo traces itertools.permutations itself")
def test_a_failure_inside_dynamos_stand_in_for_a_builtin_is_placed_on_the_users_line_and_told_to_disable(dynamo):
    torch.manual_seed(0)
    with tl.watch() as w:
        f = torch.compile(set_loss(brute_force_match), backend="eager")
        f(torch.rand(3, 2), torch.rand(2, 2))
    check_against_dynamo(w, dynamo, also=("rows[1] == 2",))  # both items changed: Dynamo logs rows[0] only
    line = brute_force_match.__code__.co_firstlineno + 2
    gave_up = [r for r in w.table if r.function.startswith("brute_force_match") and r.failed]
    assert gave_up and all(
        f":{line}" in c.words and "stand-in for itertools.permutations" in c.words for r in gave_up for c in r.causes
    ), [c.words for r in gave_up for c in r.causes]
    assert all("@torch.compiler.disable" in c.fix for r in gave_up for c in r.causes), [
        c.fix for r in gave_up for c in r.causes
    ]
    assert not any("polyfills" in b.words or "polyfills" in b.where for b in w.table.breaks), w.table.breaks
    torch._dynamo.reset()
    with tl.watch() as fixed:  # the fix as printed: the key lambda is no longer compiled for each permutation
        f = torch.compile(set_loss(torch.compiler.disable(brute_force_match)), backend="eager")
        f(torch.rand(3, 2), torch.rand(2, 2))
    assert fixed.table.total_compiles < w.table.total_compiles, (fixed.table.to_text(), w.table.to_text())


def decode_step(emb, prev_tok, gt_tok, teacher_force):  # a captioning decoder's step, teacher forcing drawn per step
    logits = emb(prev_tok) @ emb.weight.T
    return logits, gt_tok if teacher_force else logits.argmax(-1)


def test_a_recompile_tied_between_a_flags_graph_and_a_layouts_graph_is_told_as_the_layout_the_flags_graph_lacks(dynamo):
    emb, caps = torch.nn.Embedding(20, 8), torch.randint(0, 20, (2, 5))
    step = torch.compile(decode_step, backend="eager")
    with tl.watch() as w:  # (flag, layout): (F, a column of caps), (F, argmax's), (T, argmax's), (T, caps column)
        for prev, force in (
            (caps[:, 0], False),
            (caps[:, 0].clone(), False),
            (caps[:, 0].clone(), True),
            (caps[:, 0], True),
        ):
            step(emb, prev, caps[:, 1], force)
    check_against_dynamo(w, dynamo)
    last = [r for r in w.table if r.function.startswith("decode_step")][-1]
    # the flag-True graph differs only in prev_tok's layout: the layout fix (.contiguous()) saves this compile too
    assert "prev_tok's memory layout changed to non-contiguous" in last.cause, last.cause
    layout = [c for r in w.table for c in r.causes if c.kind == "stride" and c.count]
    assert len(layout) == 2, w.table.to_text()


def rand_box(size, lam):  # CutMix's rand_bbox: a box drawn with numpy, returned as numpy numbers
    cut = int(size[2] * np.sqrt(1.0 - lam))
    cx = np.random.randint(size[2])
    return np.clip(cx - cut // 2, 0, size[2]), np.clip(cx + cut // 2, 0, size[2])


def cutmix(x):  # clovaai/CutMix-PyTorch's train step, cut down: the box's bounds slice the batch
    lam = np.random.uniform()
    x1, x2 = rand_box(x.size(), lam)
    x[:, :, x1:x2] = x.flip(0)[:, :, x1:x2]
    return x.sum()


def test_a_backends_failure_on_a_random_draw_is_told_as_such_with_the_draws_fix_never_a_loop(dynamo):
    np.random.seed(0)
    step = torch.compile(cutmix, backend="aot_eager")  # aot_eager fails on the numbers read back
    with tl.watch() as w:
        for _ in range(3):
            step(torch.randn(2, 3, 8))
    check_against_dynamo(w, dynamo)
    backend = [b for b in w.table.breaks if b.words.startswith("Backend compiler") and "random draw" in b.words]
    assert backend, [b.words for b in w.table.breaks]
    # no loop, no try/with: a backend's failure is what Dynamo cannot resume after (the frame's own break says so)
    assert any("cannot resume after a backend's failure" in b.words for b in backend), [b.words for b in backend]
    assert not any("try/with" in b.words or "up to line" in b.words for b in backend), [b.words for b in backend]
    assert all(b.fix.startswith("draw the random number outside the compiled function") for b in backend), backend
    gave_up = [c for r in w.table if r.failed for c in r.causes if "Backend compiler" in c.words]
    assert gave_up and all(c.fix.startswith("draw the random number outside") for c in gave_up), gave_up
