"""tl.watch() checked blind, thirty-fourth round: a symbolic stride guard with a constant factor
(Transformer-XL's memory, now a slice) is a layout change, never a "bound"; a Python int under a guard on a
list item (packed sequences' cu_seqlens) reuses the graph and is said so; a value carried over a break is
never printed as Dynamo's placeholder (in a condition, or beside a function the line was about to call); a
cache keyed by object id names no raw id. Checked against Dynamo's records; printed fixes are run."""

import numpy as np
import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def with_memory(h, mem, mem_len=8):  # Transformer-XL: the memory is the last mem_len hidden states
    cat = h if mem is None else torch.cat([mem, h], 1)
    return h.tanh(), cat[:, max(0, cat.size(1) - mem_len) :]


def test_a_symbolic_stride_guard_is_a_layout_change_never_a_bound(dynamo):
    f = torch.compile(with_memory, backend=BACKEND)
    with tl.watch() as w:
        mem = None
        for _ in range(4):  # None, 3, 6, then 8 sliced from 9: a non-contiguous view
            _, mem = f(torch.randn(2, 3, 4), mem)
    check_against_dynamo(w, dynamo, also=("mem.size()", "mem.stride()", "size mismatch"))
    said = [c for r in w.table for c in r.causes if "stride()" in c.guard]
    assert said and all(c.kind == "stride" and "layout changed to non-contiguous" in c.words for c in said), said
    assert not any(c.words.endswith(", set") or "crossed" in c.words for c in said), said
    assert all("mem.contiguous()" in c.fix for c in said), [c.fix for c in said]


def packed(x, cu_seqlens):  # transformers' varlen fallback: attention per document of a packed row
    outs = [
        x[s:e].view(e - s, 2, -1).transpose(0, 1).softmax(-1).transpose(0, 1).reshape(e - s, -1)  # two heads
        for s, e in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True)  # noqa: RUF007
    ]
    return torch.cat(outs, 0)


def test_an_int_in_a_list_that_dynamo_made_dynamic_is_said_to_reuse_the_graph_and_does(dynamo):
    f = torch.compile(packed, backend=BACKEND)
    with tl.watch() as w:
        for cu in ([0, 7, 16], [0, 5, 16], [0, 9, 16], [0, 2, 16]):
            f(torch.randn(16, 4), cu)
    check_against_dynamo(w, dynamo, also=("cu_seqlens",))
    assert w.table.total_compiles == 2, w.table.to_text()  # the last two reuse the graph, as it says
    (made,) = [c for r in w.table for c in r.causes if c.kind == "value_dynamic"]
    assert "Dynamo made cu_seqlens[1] dynamic, so later values reuse this graph" in made.words, made.words
    assert not any("baked into this graph" in c.words for r in w.table for c in r.causes)


class NTXent(torch.nn.Module):  # SimCLR's loss: the negatives picked by a mask built per batch size
    def mask(self, batch):
        m = torch.ones(2 * batch, 2 * batch, dtype=torch.bool).fill_diagonal_(0)
        for i in range(batch):
            m[i, batch + i] = m[batch + i, i] = 0
        return m

    def forward(self, z_i, z_j):
        batch = z_i.size(0)
        N = 2 * batch
        z = torch.cat((z_i, z_j), 0)
        sim = F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=2)
        pos = torch.cat((torch.diag(sim, batch), torch.diag(sim, -batch)), 0).reshape(N, 1)
        neg = sim[self.mask(batch)].reshape(N, -1)
        return F.cross_entropy(torch.cat((pos, neg), 1), torch.zeros(N, dtype=torch.long))


class Regulate(torch.nn.Module):  # FastSpeech2's length regulator: each phoneme repeated its predicted times
    def forward(self, x, durations):
        return torch.repeat_interleave(x[0], durations[0], dim=0)[None]


class Adaptor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lr, self.dec = Regulate(), torch.nn.Linear(4, 2)

    def forward(self, x):
        dur = torch.clamp(x.sum(-1).round().abs(), min=1).long()
        return self.dec(self.lr(x, dur))


def test_a_carried_value_is_never_printed_as_a_placeholder(dynamo):
    torch.manual_seed(0)
    loss, adaptor = torch.compile(NTXent(), backend=BACKEND), torch.compile(Adaptor().eval(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for batch in (8, 8, 6, 4):
            loss(torch.randn(batch, 8), torch.randn(batch, 8))
        for n in (5, 7, 9):
            adaptor(torch.randn(1, n, 4))
    check_against_dynamo(w, dynamo, also=("size", "N", "stack"))  # its d_names invariant flags a placeholder
    text = w.table.to_text()
    assert "the value carried over the graph break." not in text and "the carried value" not in text, text


class Orthogonal(torch.nn.Module):  # an orthogonal RNN (expRNN-style): the weight through parametrize
    def __init__(self):
        super().__init__()
        from torch.nn.utils.parametrizations import orthogonal

        self.rec = orthogonal(torch.nn.Linear(4, 4, bias=False))

    def forward(self, x):
        h = torch.zeros(x.size(0), 4)
        for t in range(x.size(1)):
            h = torch.tanh(x[:, t] + self.rec(h))
        return h


def test_a_cache_keyed_by_object_id_names_no_raw_id(dynamo):
    import torch.nn.utils.parametrize as P

    torch.manual_seed(0)
    model = Orthogonal()
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 3, 4)).sum().backward()
        model.eval()
        with torch.no_grad(), P.cached():  # evaluation with the parametrization cached
            f(torch.randn(2, 3, 4))
            f(torch.randn(2, 3, 4))
    check_against_dynamo(w, dynamo, also=("_cache", "grad_mode"))  # its d_names invariant: no raw object id
    (keyed,) = [c for r in w.table for c in r.causes if "gained a key for one more object" in c.words]
    assert "(its id, with 'weight')" in keyed.words and keyed.fix.startswith("fill it before the first compiled call")


def rand_bbox(size, lam):  # CutMix's box: a random centre, clipped to the image
    W, H = size[2], size[3]
    cut_w = cut_h = int(W * np.sqrt(1.0 - lam))
    cx, cy = np.random.randint(W), np.random.randint(H)
    bbx1, bby1 = np.clip(cx - cut_w // 2, 0, W), np.clip(cy - cut_h // 2, 0, H)
    bbx2, bby2 = np.clip(cx + cut_w // 2, 0, W), np.clip(cy + cut_h // 2, 0, H)
    return bbx1, bby1, bbx2, bby2


def cutmix(x, lam):
    x1, y1, x2, y2 = rand_bbox(x.size(), lam)
    x[:, :, x1:x2, y1:y2] = x.flip(0)[:, :, x1:x2, y1:y2]
    return x.mean()


def test_a_random_draw_carried_over_a_break_is_told_to_be_drawn_outside(dynamo):
    np.random.seed(0)
    f = torch.compile(cutmix, backend=BACKEND)
    with tl.watch() as w:
        for _ in range(5):
            f(torch.randn(2, 3, 16, 16), 0.5)
    check_against_dynamo(w, dynamo, also=("___stack",))
    drawn = [c for r in w.table for c in r.causes if c.kind == "value" and "np.random.randint" in c.words]
    assert drawn, [(c.kind, c.words) for r in w.table for c in r.causes]
    assert all(c.fix.startswith("draw np.random.randint(") for c in drawn if c.count), [c.fix for c in drawn]


class Detect(torch.nn.Module):  # YOLOv5's Detect: a grid cache that starts as an empty placeholder
    def __init__(self):
        super().__init__()
        self.grid = torch.empty(0)

    def forward(self, x):
        ny, nx = x.shape[2:4]
        if self.grid.shape[2:4] != x.shape[2:4]:
            yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
            self.grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
        return x.sum(1)[..., None] + self.grid


def test_a_module_tensor_its_forward_rewrites_is_told_so_and_building_it_each_call_saves_compiles(dynamo):
    """Round 34 told this placeholder to start at its final rank; round 52 showed that saves nothing (the grid's
    size changes next): the cause is the cache forward rewrites, and building it each call is the fix."""
    f = torch.compile(Detect().eval(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for s in (8, 8, 4):
            f(torch.randn(1, 3, s, s))
    check_against_dynamo(w, dynamo, also=("self.grid", "size mismatch"))
    told = [c for r in w.table for c in r.causes if c.kind == "rewritten"]
    assert told and all("Detect.forward" in c.words and "compute it inside the call" in c.fix for c in told), told
    assert not any("final rank" in c.fix or "reshape inputs" in c.fix for r in w.table for c in r.causes)
    torch._dynamo.reset()

    class EachCall(Detect):  # the fix, applied: the grid built from the input every call, never kept
        def forward(self, x):
            ny, nx = x.shape[2:4]
            yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
            return x.sum(1)[..., None] + torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()

    g = torch.compile(EachCall().eval(), backend=BACKEND)
    with tl.watch() as fixed, torch.no_grad():
        for s in (8, 8, 4):
            g(torch.randn(1, 3, s, s))
    assert fixed.table.total_compiles < w.table.total_compiles
