"""tl.watch() checked blind, forty-first round: real-code scenarios a reviewer wrote without reading the
watcher (a PINN's autograd.grad loss, mmcv's focal loss as an autograd.Function, ...), each checked against
Dynamo's records, with the fix as printed applied where it is one."""

import contextlib
import subprocess
import sys
import textwrap
import time

import torch
from _dynamo_oracle import check_against_dynamo
from torch.autograd.function import once_differentiable

import tpu_lab as tl

_PINN = textwrap.dedent(
    """
    import math, torch, torch.nn as nn
    import tpu_lab as tl

    class MLP(nn.Module):  # maziarraissi/PINNs' Burgers network
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(2, 20), nn.Tanh(), nn.Linear(20, 1))
        def forward(self, x, t):
            return self.net(torch.cat([x, t], dim=1))

    def pde_loss(model, x, t):  # its residual: derivatives by autograd.grad, inside the compiled loss
        u = model(x, t)
        u_t = torch.autograd.grad(u, t, torch.ones_like(u), retain_graph=True, create_graph=True)[0]
        u_x = torch.autograd.grad(u, x, torch.ones_like(u), retain_graph=True, create_graph=True)[0]
        u_xx = torch.autograd.grad(u_x, x, torch.ones_like(u_x), retain_graph=True, create_graph=True)[0]
        return ((u_t + u * u_x - 0.01 / math.pi * u_xx) ** 2).mean()

    torch.manual_seed(0)
    model = MLP()
    loss_fn = torch.compile(pde_loss, backend="aot_eager")
    with tl.watch() as w:
        try:
            x, t = torch.rand(16, 1).requires_grad_(True), torch.rand(16, 1).requires_grad_(True)
            loss_fn(model, x, t).backward()
        except RuntimeError as e:  # torch's own error on this code, with or without a watch
            print("RAISED", type(e).__name__)
    print(w.table.to_text())
    """
)


def test_a_backward_compiled_lazily_inside_a_frame_dynamo_skipped_never_deadlocks_the_watch(tmp_path):
    """AOTAutograd compiles the forward's backward lazily inside the skipped pde_loss frame, with Dynamo's frame
    hook on (torch 2.15): the watch's own callbacks must not be caught and compiled there (that re-entered
    Dynamo's callback lock and hung the run for good)."""
    script = tmp_path / "pinn.py"
    script.write_text(_PINN)
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the watched run hung: {e.stderr}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(backward)" in done.stdout and "total: " in done.stdout, done.stdout  # the table, its backward row


class FocalLoss(torch.autograd.Function):  # mmcv's SigmoidFocalLossFunction: gamma kept on ctx for backward
    @staticmethod
    def forward(ctx, input, target, gamma=2.0, alpha=0.25):
        ctx.gamma, ctx.alpha = float(gamma), float(alpha)
        ctx.save_for_backward(input, target)
        p = torch.sigmoid(input)
        t = torch.nn.functional.one_hot(target, input.size(1)).to(input.dtype)
        w = (alpha * t + (1 - alpha) * (1 - t)) * (1 - (p * t + (1 - p) * (1 - t))).pow(gamma)
        return (w * torch.nn.functional.binary_cross_entropy_with_logits(input, t, reduction="none")).sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        input, _target = ctx.saved_tensors
        return grad_output * torch.sigmoid(input) * ctx.gamma, None, None, None


def test_a_float_a_custom_function_keeps_on_ctx_is_not_told_to_become_a_tensor(dynamo):
    head = torch.nn.Linear(16, 5)
    loss = torch.compile(
        lambda feats, target, gamma: FocalLoss.apply(head(feats), target, gamma, 0.25), backend="aot_eager"
    )
    with tl.watch() as w:
        for gamma in (2.0, 1.0, 0.5):  # a focal-loss sweep
            loss(torch.randn(8, 16), torch.randint(0, 5, (8,)), gamma).backward()
    check_against_dynamo(w, dynamo)
    told = [c for r in w.table for c in r.causes if "gamma" in c.words]
    assert told, w.table.to_text()
    for (
        c
    ) in told:  # float(gamma) reads a tensor back there: "pass it as a tensor" added breaks and kept a graph per value
        assert "float(gamma)" in c.words and "line" in c.words, c.words
        assert "keep gamma to a few values" in c.fix and "pass it in as a tensor" not in c.fix, c.fix


TIMINGS: dict[str, float] = {}


@contextlib.contextmanager
def timer(name):  # fairseq's StopwatchMeter / Megatron's timers, simplified
    t0 = time.perf_counter()
    yield
    TIMINGS[name] = TIMINGS.get(name, 0.0) + time.perf_counter() - t0


class Timed(torch.nn.Module):
    def __init__(self, timed: bool = True):
        super().__init__()
        self.enc, self.dec, self.timed = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4), timed

    def forward(self, x):
        if not self.timed:  # the printed fix: the clock read outside the compiled function
            return self.dec(self.enc(x))
        with timer("encoder"):
            h = self.enc(x)
        return self.dec(h)


def test_a_break_inside_a_with_statements_context_manager_says_why_the_whole_function_runs_eagerly(dynamo):
    model = torch.compile(Timed(), backend="aot_eager")
    with tl.watch() as w, torch.no_grad():
        for _ in range(2):
            model(torch.randn(8, 16))
    check_against_dynamo(w, dynamo)
    (row,) = [r for r in w.table if r.failed]
    said = row.causes[0].words
    assert "inside the context manager line" in said and '(with timer("encoder"):)' in said, said
    assert "gave up on all of it" in said and "it runs eagerly on every call" in said, said
    fix = row.causes[0].fix
    assert "outside the compiled function" in fix, fix  # torch 2.15 names time.perf_counter(), 2.13 skips it

    torch._dynamo.reset()
    fixed_model = torch.compile(Timed(timed=False), backend="aot_eager")
    with tl.watch() as fixed, torch.no_grad():
        t0 = time.perf_counter()
        fixed_model(torch.randn(8, 16))
        TIMINGS["encoder"] = time.perf_counter() - t0
    assert fixed.table.total_compiles == 1 and not any(r.failed for r in fixed.table), fixed.table.to_text()


def test_a_backward_compiled_together_with_a_dynamic_forward_is_a_row_of_its_own(dynamo):
    """CleanRL's SAC update with a short batch: the forward graph with a dynamic batch has its backward compiled
    at once, inside the forward's compile, with no record of its own in Dynamo; every backward graph the
    backend compiled is a row, lazy or not."""
    from torch._dynamo.backends.common import aot_autograd

    compiled = {"forward": 0, "backward": 0}

    def counted(kind):
        def compiler(gm, example_inputs):
            compiled[kind] += 1
            return gm.forward

        return compiler

    backend = aot_autograd(fw_compiler=counted("forward"), bw_compiler=counted("backward"))
    actor = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    step = torch.compile(lambda obs: actor(obs).tanh().sum(), backend=backend)
    with tl.watch() as w:
        for batch in (32, 32, 20, 12):  # the last minibatches are short
            step(torch.randn(batch, 4)).backward()
    check_against_dynamo(w, dynamo)
    backward = [r for r in w.table if "(backward)" in r.function]
    assert sum(r.compiles for r in backward) == compiled["backward"] == 2, (compiled, w.table.to_text())
    said = [c.words for r in backward for c in r.causes]
    assert any("compiled together with this forward graph" in s for s in said), said
    assert any("at the first backward pass" in s for s in said), said
