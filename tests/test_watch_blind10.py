"""tl.watch() checked blind, tenth round: the words blind reviewers found wrong on real code, asserted
right here, each run also checked against Dynamo's records: every failed guard of the nearest graph is
said (a list that grew while its items changed size); no mark_dynamic where the code or the compile
fixes the size; DataLoader named only as one way to drop a short last batch; a torch.compiler.disable'd
call is an expected break, not a thing to remove; a flag argument's value is in the row's inputs."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def causes(w):
    return [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")]


def total_bytes(byte_seqs):
    return sum(s.float().sum() for s in byte_seqs)


def test_a_list_that_grew_while_its_items_changed_size_says_both(dynamo):
    f = torch.compile(total_bytes, backend=BACKEND)
    with tl.watch() as w:
        f([torch.ones(3), torch.ones(3)])
        f([torch.ones(5), torch.ones(5), torch.ones(5)])
    # Dynamo logs the length; its guards on the items still there fail too (found on its own guard tree)
    check_against_dynamo(w, dynamo, also=["size mismatch at index 0. expected 3, actual 5"])
    last = {c.kind: c for c in w.table.rows[-1].causes}
    assert last["length"].words == "byte_seqs has a different length (was 2)"
    assert last["size"].words == "byte_seqs[0], byte_seqs[1] dimension 0 changed 3 -> 5"


def test_a_list_that_only_grew_by_one_item_says_the_length_alone(dynamo):
    f = torch.compile(total_bytes, backend=BACKEND)
    a, b = torch.ones(3), torch.ones(4)
    with tl.watch() as w:
        f([a, b])
        f([a, b, torch.ones(2)])  # the items compiled for are still there, in their places
        f([torch.ones(5), a, b, b])  # and moved along by one: their sizes follow from the move
    check_against_dynamo(w, dynamo)
    assert [c.kind for c in causes(w)] == ["length", "length"], [c.words for c in causes(w)]


def test_a_list_that_grew_to_size_one_items_against_a_dynamic_graph_says_both(dynamo):
    f = torch.compile(total_bytes, backend=BACKEND)
    with tl.watch() as w:
        for n, size in ((2, 3), (2, 5), (3, 1)):  # the second makes the items' size dynamic
            f([torch.ones(size) for _ in range(n)])
    check_against_dynamo(w, dynamo, also=["size mismatch at index 0. expected 3, actual"])
    last = [c for c in w.table.rows[-1].causes if c.kind != "dynamic"]
    assert {c.kind for c in last} >= {"length"} and len(last) == 2, [c.words for c in last]
    assert "byte_seqs has a different length (was 2)" in [c.words for c in last]
    assert any("byte_seqs[0], byte_seqs[1]" in c.words for c in last), [c.words for c in last]
