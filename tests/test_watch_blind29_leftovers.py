"""What rounds 28 and 29 left: a partial passed as an argument reads by the function it wraps, among the inputs
and in the cause; a tensor on the meta device (a dry run) is marked among the inputs; a parameter's .grad
that is None on some steps names zero_grad(set_to_none=False), and that fix gives one graph. Checked against
Dynamo's records."""

import functools

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "aot_eager"


def test_a_partial_reads_by_the_function_it_wraps(dynamo):
    @torch.compile(backend=BACKEND)
    def mlp(x, act):
        return act(x) * 2

    x = torch.randn(4, 8)
    with tl.watch() as w:
        mlp(x, functools.partial(torch.nn.functional.gelu, approximate="tanh"))
        mlp(x, functools.partial(torch.nn.functional.silu))
    check_against_dynamo(w, dynamo, also=("len(act.keywords) == 1",))  # Dynamo logs the function's guard alone
    inputs = [r.signature for r in w.table]
    assert any("act: partial(gelu)" in s for s in inputs) and any("act: partial(silu)" in s for s in inputs), inputs
    words = "; ".join(c.words for r in w.table for c in r.causes)
    assert "act wraps another function now (partial(silu))" in words, words
    assert "a different object" not in words, words


def test_a_tensor_on_the_meta_device_is_marked_among_the_inputs(dynamo):
    model = torch.nn.Linear(8, 8)
    f = torch.compile(lambda x: model(x).relu(), backend=BACKEND)
    with tl.watch() as w:
        with torch.device("meta"):
            dry = torch.nn.Linear(8, 8)
        torch.compile(lambda x: dry(x).relu(), backend=BACKEND)(torch.zeros(2, 8, device="meta"))
        f(torch.zeros(2, 8))
    check_against_dynamo(w, dynamo)
    inputs = [r.signature for r in w.table]
    assert sum("on meta" in s for s in inputs) == 1, inputs


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk, self.main, self.aux = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1), torch.nn.Linear(8, 1)

    def forward(self, x, use_aux):
        h = self.trunk(x).relu()
        return self.main(h) + (0.1 * self.aux(h) if use_aux else 0)


def train_logging_grad_norm(set_to_none):
    @torch.compile(backend=BACKEND)
    def grad_norm(params):
        return torch.stack([p.grad.norm(2) for p in params if p.grad is not None]).norm(2)

    torch.manual_seed(0)
    model = TwoHeads()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    params = list(model.parameters())
    for step in range(4):  # the auxiliary head every other step
        model(torch.randn(4, 8), use_aux=step % 2 == 0).pow(2).mean().backward()
        grad_norm(params)
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)


def test_a_grad_that_is_none_on_some_steps_names_zero_grad_set_to_none_false_which_keeps_one_graph(dynamo):
    with tl.watch() as w:
        train_logging_grad_norm(set_to_none=True)
    check_against_dynamo(w, dynamo, also=("params[5].grad",))  # Dynamo logs the head's weight alone
    (none,) = {c.fix for r in w.table for c in r.causes if c.kind == "none"}
    assert "zero_grad(set_to_none=False)" in none, none
    torch._dynamo.reset()  # the same code object: its graphs would serve the fixed run
    with tl.watch() as fixed:
        train_logging_grad_norm(set_to_none=False)
    assert sum(r.compiles for r in fixed.table) == 1, fixed.table.to_text()
