"""tl.watch() checked blind, sixteenth round: a model whose forward calls a logging helper wrapped in
torch.compiler.disable (a graph break) was told to mark its input with mark_dynamic; the part after the break
adds that input to a fresh tensor of fixed size, so the mark raised ConstraintViolationError on the first call.
Checked against Dynamo's own records too."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"
seen = []


@torch.compiler.disable
def record_activation_stats(name, t):  # wandb/tensorboard-style logging, kept out of the graph
    seen.append((name, float(t.abs().mean())))


class Block(torch.nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x):
        h = torch.nn.functional.silu(self.fc1(x))
        record_activation_stats("mlp", h)
        return x + self.fc2(h)


def test_a_function_with_a_graph_break_is_told_maybe_mark_dynamic_and_that_fix_runs(dynamo):
    block = torch.compile(Block(), backend=BACKEND)
    with tl.watch() as w:
        for batch in (8, 8, 3):  # the last, smaller batch
            block(torch.randn(batch, 8)).sum().backward()
    check_against_dynamo(w, dynamo)
    (size,) = [c for r in w.table.by_function("Block.forward (") for c in r.causes if c.kind == "size"]
    assert "torch._dynamo.maybe_mark_dynamic(x, 0), not mark_dynamic" in size.fix
    assert "torch._dynamo.mark_dynamic(" not in size.fix
    fixed = torch.compile(Block(), backend=BACKEND)
    for batch in (8, 8, 3):  # the fix as printed: it must run (mark_dynamic raised here)
        x = torch.randn(batch, 8)
        torch._dynamo.maybe_mark_dynamic(x, 0)
        fixed(x).sum().backward()
