"""tl.watch() checked blind, thirty-sixth round: an int that indexes a ModuleList (RWKV's per-layer step,
``self.att[i]``) is said to pick a submodule fixed into the graph, with the fix that holds (pass the layer in:
one graph for every layer), never "pass it as a tensor", which made Dynamo give up on the function. Checked
against Dynamo's records."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


class RWKV(torch.nn.Module):  # BlinkDL's RWKV in 150 lines: a time-mixing step called per layer with its index
    def __init__(self, layers=6, d=8):
        super().__init__()
        self.att = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))
        self.mix = torch.nn.Parameter(torch.full((layers, d), 0.5))

    def time_mixing(self, x, state, i: int, layer=None):
        layer = self.att[i] if layer is None else layer
        state[i] = x * self.mix[i] + state[i] * (1 - self.mix[i])
        return layer(state[i])


def run(model, step, passed):
    state = torch.zeros(len(model.att), 8)
    with torch.no_grad():
        x = torch.randn(8)
        for i in range(len(model.att)):
            x = x + (step(x, state, i, model.att[i]) if passed else step(x, state, i))


def test_an_int_that_indexes_a_module_list_is_said_to_pick_a_submodule_and_the_fix_passes_the_layer_in(dynamo):
    model = RWKV()
    with tl.watch() as w:
        run(model, torch.compile(model.time_mixing, backend="eager"), passed=False)
    check_against_dynamo(w, dynamo)
    picked = [c for r in w.table for c in r.causes if "indexes a ModuleList" in c.words]
    assert picked and all("pass the submodule in from the caller" in c.fix for c in picked), w.table.to_text()
    assert not any("as a tensor" in c.fix for r in w.table for c in r.causes if c.count), w.table.to_text()
    torch._dynamo.reset()
    with tl.watch() as fixed:  # the fix as printed: the layer passed in
        run(model, torch.compile(model.time_mixing, backend="eager"), passed=True)
    assert fixed.table.total_compiles < w.table.total_compiles <= len(model.att), (
        fixed.table.to_text(),
        w.table.to_text(),
    )
