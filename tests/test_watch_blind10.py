"""tl.watch() checked blind, tenth round: the words blind reviewers found wrong on real code, asserted
right here, each run also checked against Dynamo's records: every failed guard of the nearest graph is
said (a list that grew while its items changed size); no mark_dynamic where the code or the compile
fixes the size; DataLoader named only as one way to drop a short last batch; a torch.compiler.disable'd
call is an expected break, not a thing to remove; a flag argument's value is in the row's inputs."""

import pytest
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
    check_against_dynamo(w, dynamo, also=["size mismatch at index 0. expected 3, actual", "2 <= byte_seqs["])
    last = [c for c in w.table.rows[-1].causes if c.kind != "dynamic"]
    # told against the graph that made the items' size dynamic (the static one is superseded): both changes
    assert {c.kind for c in last} == {"length", "size_one"}, [c.words for c in last]
    assert "byte_seqs has a different length (was 2)" in [c.words for c in last]
    ones = [c.words for c in last if c.kind == "size_one"]
    assert all("dimension 0 is now 1 (the graph held is dynamic there, for sizes 2 and up)" in c for c in ones)


def doubled_sum(x):
    return (x * 2).sum()


def running_sum(x):
    out = x[0]
    for i in range(x.shape[0]):  # the size as a Python int: the loop fixes it in the graph
        out = out + x[i]
    return out


def test_under_dynamic_false_a_size_change_is_never_told_to_mark_dynamic(dynamo):
    with tl.watch() as w:
        for fn in (doubled_sum, running_sum):
            f = torch.compile(fn, backend=BACKEND, dynamic=False)
            for n in (4, 6, 7):
                f(torch.randn(n, 8))
    check_against_dynamo(w, dynamo)
    sizes = causes(w)
    assert len(sizes) == 4 and all("every size is its own graph" in c.words for c in sizes)
    for c in sizes:
        assert "torch._dynamo.mark_dynamic(" not in c.fix and c.fix.startswith(
            "pad to a few sizes, or mark the dimension dynamic where the code allows it"
        )
        assert "dynamic=None" in c.fix and "torch._dynamo.maybe_mark_dynamic(x, 0)" in c.fix
    # what the fix offers works under dynamic=False, and does not raise where a loop fixes the size
    for fn, graphs in ((doubled_sum, 1), (running_sum, 3)):
        torch._dynamo.reset()
        f = torch.compile(fn, backend=BACKEND, dynamic=False)
        with tl.watch() as fixed:
            for n in (4, 6, 7):
                x = torch.randn(n, 8)
                torch._dynamo.maybe_mark_dynamic(x, 0)
                f(x)
        assert fixed.table.total_compiles == graphs


def test_a_size_a_loop_fixes_is_said_so_and_never_told_to_mark_dynamic(dynamo):
    f = torch.compile(running_sum, backend=BACKEND)
    with tl.watch() as w:
        for n in (4, 6, 7):
            f(torch.randn(n, 8))
    check_against_dynamo(w, dynamo)
    sizes = causes(w)
    assert [c.words.split(" (")[0] for c in sizes] == ["x dimension 0 changed 4 -> 6", "x dimension 0 changed 6 -> 7"]
    # the line that fixes the size is read from the code, from the first pin on: no "one of two reasons"
    loop = running_sum.__code__.co_firstlineno + 2
    for c in sizes:
        assert "the code either" not in c.words and "every size is its own graph" in c.words
        assert f"line {loop} (for i in range(x.shape[0]):" in c.words and "as the length of a loop" in c.words
        assert "mark_dynamic(" not in c.fix and "mark_dynamic would raise here" in c.fix
        assert c.fix.startswith(f"vectorise the loop at line {loop}")
    assert not any(c.kind == "dynamic" for r in w.table for c in r.causes)  # nothing was made dynamic
    # the words are right: mark_dynamic on that size raises
    torch._dynamo.reset()
    x = torch.randn(5, 8)
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(Exception, match=r"ConstraintViolation|specialized"):
        torch.compile(running_sum, backend=BACKEND)(x)


def test_a_short_last_slice_names_dataloader_only_as_one_way_to_drop_it(dynamo):
    model = torch.nn.Linear(8, 2)
    f = torch.compile(model, backend=BACKEND)
    data = torch.randn(10, 8)
    with tl.watch() as w:
        for i in range(0, len(data), 4):  # no DataLoader: the last slice holds 2 rows
            f(data[i : i + 4])
    check_against_dynamo(w, dynamo)
    (size,) = causes(w)
    assert size.words == "input dimension 0 changed 4 -> 2"
    assert (
        "if this is the last, smaller batch: pad it to 4 or drop it (DataLoader(drop_last=True) if you use one)"
        in size.fix
    )
    assert size.fix.count("DataLoader") == 1 and "for a short last batch, DataLoader" not in size.fix


@torch.compiler.disable
def log_stats(x):
    return float(x.mean())


def scaled_step(x):
    y = x * 2
    log_stats(y)  # disabled on purpose: runs eagerly
    return y + 1


def test_a_disabled_function_is_an_expected_break_not_a_thing_to_remove(dynamo):
    f = torch.compile(scaled_step, backend=BACKEND)
    with tl.watch() as w:
        for _ in range(2):
            f(torch.randn(4))
    check_against_dynamo(w, dynamo)
    (br,) = w.table.breaks
    assert br.words == (
        "log_stats is wrapped with torch.compiler.disable: it runs eagerly and splits the graph in two there "
        "(expected: that is what disable does)"
    )
    assert br.fix.startswith("expected; keep the disabled call out of hot loops") and "accept the break" in br.fix
    assert "remove" not in br.fix.lower() and "rewrite" not in br.fix.lower()


def fake_quant(x, scale, observe: bool, num_bits: int):
    if observe:  # calibrating: the scale follows the data
        scale = x.abs().max() / (2 ** (num_bits - 1) - 1)
    top = 2 ** (num_bits - 1)
    return torch.clamp(torch.round(x / scale), -top, top - 1) * scale


def test_a_flag_argument_is_in_every_row_at_each_calls_value(dynamo):
    w = tl.watch()
    f = w(torch.compile(fake_quant, backend=BACKEND))  # wrapped: its calls are counted
    x, scale = torch.randn(8), torch.tensor(0.1)
    for observe, bits in ((True, 8), (False, 8), (True, 8), (False, 4), (False, 8), (True, 4), (True, 8)):
        f(x, scale, observe, bits)
    check_against_dynamo(w, dynamo)
    rows = {r.signature.removeprefix("x: f32[8], scale: f32[], "): (r.calls, r.compiles) for r in w.table}
    assert rows == {
        "num_bits: int 8, observe: True": (3, 1),
        "num_bits: int 8, observe: False": (2, 1),
        "num_bits: int 4, observe: False": (1, 1),
        "num_bits: int 4, observe: True": (1, 1),
    }, rows
    flagged = [c.words for c in causes(w) if c.kind == "flag"]
    assert flagged == ["the flag observe was True (each value is its own graph)"], flagged
    # (4, True) is one change from (4, False) and from (8, True): told against its own path's graph, the
    # observe=True one, where num_bits was 8 and is now made dynamic (a flag's other value is another path)
    (last,) = [r for r in w.table if r.signature.endswith("num_bits: int 4, observe: True")]
    assert last.cause.startswith("Python int num_bits changed (was 8): Dynamo made num_bits dynamic"), last.cause


def test_a_graph_compiled_for_another_change_shows_the_flag_the_call_passed(dynamo):
    f = torch.compile(fake_quant, backend=BACKEND)
    x, scale = torch.randn(8), torch.tensor(0.1)
    with tl.watch() as w:
        for observe, bits in ((True, 8), (False, 8), (True, 8), (True, 4)):  # the third reuses the first graph
            f(x, scale, observe, bits)
    check_against_dynamo(w, dynamo)
    last = w.table.rows[-1]
    assert [c.kind for c in last.causes if c.kind != "dynamic"] == ["value_dynamic"], last.causes
    assert last.signature.endswith("num_bits: int 4, observe: True"), last.signature  # not the False left before
