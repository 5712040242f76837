"""tl.watch() checked blind, fourteenth round (b): a top-1 mixture-of-experts layer that loops over
``idx.unique()`` and indexes its ``nn.ModuleList`` with each tensor element, nanoGPT's ``assert t <=
block_size`` bound on a dynamic sequence length, and a DDPM step whose integer timestep both indexes a
schedule and decides a branch. What the reviewer found wrong is asserted right here; every run is also
checked against Dynamo's own records and the watch's invariants."""

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo
from torch import nn

import tpu_lab as tl

BACKEND = "eager"


class TopOneMoE(nn.Module):
    def __init__(self, d=8, n_experts=4):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.router = nn.Linear(d, n_experts)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(n_experts))

    def forward(self, x):
        h = self.proj(x)
        idx = self.router(h).argmax(-1)
        out = torch.zeros_like(h)
        for e in idx.unique():
            out[idx == e] = self.experts[e](h[idx == e])
        return out


def _train_moe(dynamo):
    torch.manual_seed(0)
    model = TopOneMoE()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        for n in (16, 16, 24):
            F.mse_loss(step(torch.randn(n, 8)), torch.randn(n, 8)).backward()
            opt.step()
            opt.zero_grad()
    check_against_dynamo(w, dynamo)
    return w


def test_a_moe_loop_failure_is_placed_at_the_users_line_never_a_dynamo_polyfill(dynamo):
    w = _train_moe(dynamo)
    failed = [b for b in w.table.breaks if "loop" in b.words]
    assert failed and all(b.where == "test_watch_blind14b.py:29" for b in failed), w.table.breaks
    assert not any("polyfills" in b.where or "polyfills" in b.words for b in w.table.breaks)


def test_a_moe_loop_failure_says_the_tensor_index_and_what_runs_eagerly(dynamo):
    w = _train_moe(dynamo)
    (row,) = [r for r in w.table if r.failed]
    (cause,) = [c for c in row.causes if c.kind == "failed"]
    assert "indexes a container with a tensor" in cause.words
    assert "inside the loop at line 28 (for e in idx.unique():)" in cause.words
    assert "it runs eagerly on every call: forward from line 28 on, the loop included" in cause.words  # at unique()
    assert cause.fix.startswith("index with a Python int, not a tensor")


def test_capture_scalar_outputs_keeps_the_cause_behind_the_loop_break(dynamo):
    torch.manual_seed(0)
    step = torch.compile(TopOneMoE(), backend=BACKEND)
    with torch._dynamo.config.patch(capture_scalar_outputs=True), tl.watch() as w:
        for n in (16, 16):
            step(torch.randn(n, 8))
    check_against_dynamo(w, dynamo)
    (brk,) = [b for b in w.table.breaks if "loop" in b.words]
    assert brk.where == "test_watch_blind14b.py:29"
    assert "indexes a container with a tensor" in brk.words and "read from the tensor's data" in brk.words
    assert "unhinted" not in brk.words and "u0" not in brk.words  # Dynamo's sympy text is said in words


class TinyGPT(nn.Module):
    def __init__(self, block_size=32, vocab=64, d=16):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block_size, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()  # noqa: RUF059 (nanoGPT unpacks both)
        assert t <= self.block_size, f"Cannot forward sequence of length {t}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        return self.head(self.wte(idx) + self.wpe(pos))


def test_a_size_bound_is_placed_at_the_assert_that_set_it(dynamo):
    model = torch.compile(TinyGPT(), backend=BACKEND)
    with tl.watch() as w:
        for t in (8, 12, 16):
            model(torch.randint(0, 64, (2, t)))
    check_against_dynamo(w, dynamo)
    causes = [c for r in w.table for c in r.causes if "idx.size()[1] <= 32" in c.fix]
    assert causes and all("(from your line 88: assert t <= self.block_size" in c.fix for c in causes)
    assert not any("line 86" in c.fix or "line 87" in c.fix for c in causes)


betas = torch.linspace(1e-4, 0.02, 12)
alphas = 1 - betas
alphas_bar = torch.cumprod(alphas, 0)


def p_sample(x, eps, t):
    a = alphas[t]
    ab = alphas_bar[t]
    mean = (x - (1 - a) / (1 - ab).sqrt() * eps) / a.sqrt()
    if t > 1:
        mean = mean + betas[t].sqrt() * torch.randn_like(x)
    return mean


def test_a_timestep_range_names_every_line_that_bounds_it(dynamo):
    sample = torch.compile(p_sample, backend=BACKEND)
    with tl.watch() as w:
        x = torch.randn(2, 4)
        for t in range(11, 0, -1):
            x = sample(x, torch.randn_like(x), t)
    check_against_dynamo(w, dynamo)
    causes = [c for r in w.table for c in r.causes]
    dynamic = [c for c in causes if "while 2 <= t <= 11 holds" in c.fix]
    assert dynamic and all("(from your line 113: if t > 1: and line 110: a = alphas[t])" in c.fix for c in dynamic)
    crossed = [c for c in causes if "crossed" in c.words]
    assert crossed and all("at test_watch_blind14b.py:110 (a = alphas[t])" in c.words for c in crossed)
    assert all("at test_watch_blind14b.py:113 (if t > 1:)" in c.words for c in crossed)
