"""Several inputs changing at once: Dynamo logs only the first guard that failed per graph, the watch
names every one. The oracle for each extra guard is Dynamo itself: the same code with one change at a
time, each logged by TORCH_LOGS=recompiles. Also: a compiled module's inputs under forward()'s names,
an int that became a float, and automatic dynamic shapes turned off through the config."""

import pytest
import torch
from _dynamo_oracle import DynamoLog, check_against_dynamo, only_causes

import tpu_lab as tl

BACKEND = "eager"


def mixed(x, y, n):
    return x * y.sum() + n


def dynamo_alone(dynamo_factory, first, changed):
    """Dynamo's own guard text when only ``changed`` differs from ``first`` (a fresh compile each)."""
    log = dynamo_factory()
    f = torch.compile(mixed, backend=BACKEND)
    f(*first)
    f(*changed)
    (message,) = log.recompile_reasons()
    line = next(x.strip()[2:] for x in message.splitlines() if x.strip().startswith("- "))
    return line.split(": ", 1)[1].split("  #")[0].strip()


@pytest.fixture
def fresh_log(dynamo):
    """A new Dynamo log per call, after a reset (the ``dynamo`` fixture's handler stays installed)."""

    def make() -> DynamoLog:
        from torch._dynamo.utils import get_compilation_metrics

        torch._dynamo.reset()
        dynamo.clear()
        found = list(get_compilation_metrics())
        dynamo.first = found[-1] if found else None
        return dynamo

    return make


def test_a_size_a_dtype_and_an_int_changing_at_once_are_all_named(dynamo, fresh_log):
    first = (torch.ones(2, 3), torch.ones(3), 1)
    both = (torch.ones(4, 3), torch.ones(3, dtype=torch.float64), 2)
    alone = [
        dynamo_alone(fresh_log, first, (both[0], first[1], first[2])),
        dynamo_alone(fresh_log, first, (first[0], both[1], first[2])),
        dynamo_alone(fresh_log, first, (first[0], first[1], both[2])),
    ]
    fresh_log()
    f = torch.compile(mixed, backend=BACKEND)
    with tl.watch() as w:
        f(*first)
        f(*both)
    check_against_dynamo(w, dynamo, also=alone)
    words = {c.kind: c.words for c in only_causes(w, "mixed")}
    assert words["size"] == "x dimension 0 changed 2 -> 4"
    assert words["dtype"] == "y dtype changed Float -> Double"
    assert words["value_dynamic"].startswith("Python int n changed (was 1): Dynamo made n dynamic")
    assert "(+2 more)" in w.table.to_text()  # the text table says more guards failed than it shows


def batch_step(batch):
    return (batch["input_ids"].float() * batch["attention_mask"]).sum()


def test_a_longer_tokenized_batch_names_input_ids_and_attention_mask_as_one_change(dynamo):
    # a tokenizer's batch dict: a longer prompt changes both tensors' length the same way
    f = torch.compile(batch_step, backend=BACKEND)
    with tl.watch() as w:
        f({"input_ids": torch.ones(1, 5, dtype=torch.long), "attention_mask": torch.ones(1, 5)})
        f({"input_ids": torch.ones(1, 9, dtype=torch.long), "attention_mask": torch.ones(1, 9)})
    check_against_dynamo(w, dynamo, also=["tensor 'batch['attention_mask']' size mismatch at index 1"])
    (cause,) = only_causes(w, "batch_step")
    assert cause.kind == "size" and len(cause.guard.splitlines()) == 2
    assert cause.words.startswith("sequence length changed 5 -> 9") or cause.words == (
        "batch['input_ids'], batch['attention_mask'] dimension 1 changed 5 -> 9"
    )


def test_nothing_unchanged_is_named_when_one_of_several_inputs_changes(dynamo):
    f = torch.compile(mixed, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 3), torch.ones(3), 1)
        f(torch.ones(2, 3), torch.ones(3, dtype=torch.float64), 1)
    check_against_dynamo(w, dynamo)  # no extra guard allowed
    (cause,) = only_causes(w, "mixed")
    assert cause.words == "y dtype changed Float -> Double"


def test_grad_mode_and_a_smaller_batch_are_both_named(dynamo):
    # the graph's global-state guard fails first (Dynamo stops there); the input's size failed too
    f = torch.compile(mixed, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 3), torch.ones(3), 1)
        with torch.no_grad():
            f(torch.ones(4, 3), torch.ones(3), 1)
    check_against_dynamo(w, dynamo, also=["tensor 'x' size mismatch at index 0. expected 2, actual 4"])
    state, size = only_causes(w, "mixed")
    assert state.kind == "global_state" and "grad" in state.words
    assert size.words == "x dimension 0 changed 2 -> 4"


def test_a_compiled_module_names_its_input_as_forward_does(dynamo):
    f = torch.compile(torch.nn.Linear(3, 1), backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 3))
        f(torch.ones(5, 3))
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "Linear.forward")
    assert cause.words == "input dimension 0 changed 2 -> 5"
    assert "torch._dynamo.maybe_mark_dynamic(input, 0)" in cause.fix and "args[" not in cause.fix
    assert [r.signature for r in w.table] == ["input: f32[2, 3]", "input: f32[5, 3]"]


def scaled(x, k):
    return x * k


def test_an_int_that_becomes_a_float_of_the_same_value_is_a_type_change(dynamo):
    f = torch.compile(scaled, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2), 2)
        f(torch.ones(2), 2.0)
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "scaled")
    assert cause.kind == "type" and cause.words.startswith("k is now a float, was the int 2")
    assert "same type" in cause.fix
    torch._dynamo.reset()
    with tl.watch() as fixed:  # the fix as printed: one type, one graph
        f(torch.ones(2), 2.0)
        f(torch.ones(2), 2.0)
    assert fixed.table.total_compiles == 1


def test_an_int_that_becomes_another_float_is_the_new_value_never_a_type_change(dynamo):
    f = torch.compile(scaled, backend=BACKEND)
    with tl.watch() as w:
        for k in (2, 2.5, 3.7):
            f(torch.ones(2), k)
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "scaled")  # 2.0 in place of 2 would recompile at 2.5 all the same
    assert cause.kind == "value_dynamic" and "k changed (was 2, now the float 2.5)" in cause.words
    assert "later values reuse this graph" in cause.words and w.table.total_compiles == 2


def test_automatic_dynamic_off_through_the_config_is_not_called_dynamic_false(dynamo):
    f = torch.compile(scaled, backend=BACKEND)
    with tl.watch() as w, torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        for n in (2, 3, 4):
            f(torch.ones(n), 2)
    check_against_dynamo(w, dynamo)
    words = [c.words for c in only_causes(w, "scaled")]
    assert len(words) == 2 and all("torch._dynamo.config.automatic_dynamic_shapes = False" in s for s in words)
    assert not any("compiled with dynamic=False" in s for s in words)
