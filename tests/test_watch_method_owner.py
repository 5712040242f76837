"""A method's instance is found by what it is, never by the name ``self``: a forward written ``def forward(s,
x)`` (Karpathy-style code, and the round-27 reviewer's) is named after its class, and a change on another
instance's own attribute says so, exactly as the same code written with ``self`` does. Checked against
Dynamo's records."""

import pytest
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

SOURCE = """
class Block(torch.nn.Module):
    def __init__({me}, scale):
        super().__init__()
        {me}.lin, {me}.scale = torch.nn.Linear(4, 4), scale

    def forward({me}, x):
        return {me}.lin(x) * {me}.scale
"""


def _block(me: str) -> type:
    scope = {"torch": torch}
    exec(compile(SOURCE.format(me=me), f"<block_{me}>", "exec"), scope)
    return scope["Block"]


@pytest.mark.parametrize("me", ["self", "s"])
def test_a_forward_that_calls_its_module_s_reads_as_the_same_forward_written_with_self(me, dynamo):
    block = _block(me)
    blocks = [torch.compile(block(0.5 + i), backend="eager") for i in range(3)]  # one compiled per depth
    with tl.watch() as w, torch.no_grad():
        for b in blocks:
            b(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    assert row.function.startswith("Block.forward"), row.function  # was "forward" for s
    (cause,) = [c for c in row.causes if c.kind != "first"]
    assert cause.words == (  # the note was missing for s
        f"Python float {me}.scale changed (was 0.5): Dynamo made {me}.scale dynamic, so later values reuse this "
        "graph (another instance of Block than the one the graph was compiled for: instances share the compiled "
        "code's graphs)"
    ), cause.words
    # made dynamic: the third block reuses the graph, so no per-instance advice on the recompile limit
    assert "recompile_limit" not in cause.fix and row.compiles == 2, (cause.fix, row.compiles)
