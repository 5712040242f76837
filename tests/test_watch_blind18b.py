"""tl.watch() checked blind, round 18's leftovers: a size pinned once is re-told once a later graph pins it
again (its first fix, mark_dynamic, would raise where the code loops over the size), a dim made dynamic
after a failed compile is not said to be asked for, autocast settings are rows of their own, a library's
function is named by its package's path, and one value baked in again and again is said once, with its
values. Checked against Dynamo's own records too."""

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def scan(u, delta, A, B, C):  # Mamba's selective_scan_ref: a Python loop over the sequence length
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    x = u.new_zeros(u.shape[0], A.shape[0], A.shape[1])
    ys = []
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, i]))
    return torch.stack(ys, dim=2)


def _scan_inputs(length):
    return torch.randn(2, 4, length), torch.rand(2, 4, length), -torch.rand(4, 3), *torch.randn(2, 2, 3, length)


def test_a_size_pinned_once_is_retold_when_a_later_graph_pins_it_again(dynamo):
    f = torch.compile(scan, backend=BACKEND)
    with tl.watch() as w:
        for length in (8, 12, 16):
            f(*_scan_inputs(length))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sizes = [c for r in w.table for c in r.causes if c.kind == "size"]
    assert len(sizes) == 2 and all("mark_dynamic would raise here" in c.fix for c in sizes), [c.fix for c in sizes]
    # the loop that fixes the size is read from the code: both compiles name it, from the first pin on
    assert all("for i in range(u.shape[2]):) takes u.shape[2] as the length of a loop" in c.words for c in sizes)
    assert not any("mark B dim 2 dynamic together" in c.fix for c in sizes)
    assert str(w.table).count("a tensor size changed (2 compiles): vectorise the loop at line") == 1


def test_a_dim_made_dynamic_after_a_failed_compile_is_said_so_not_asked_for(dynamo):
    f = torch.compile(scan, backend=BACKEND)
    with tl.watch() as w:
        for length in (8, 12):
            args = _scan_inputs(length)
            if length == 8:  # marked where the loop fixes the size: the compile fails, the call raises
                for t in (args[0], args[1], args[3], args[4]):
                    torch._dynamo.mark_dynamic(t, 2)
            try:
                f(*args)
            except Exception as e:
                assert "ConstraintViolation" in type(e).__name__
    check_against_dynamo(w, dynamo)
    notes = [c.words for c in w.table.rows[1].causes if c.kind == "dynamic"]
    assert notes and "from this first graph" in notes[0] and "the earlier call whose compile failed" in notes[0]
    assert "torch.compile(dynamic=True) or mark_dynamic" not in str(w.table)


def test_each_autocast_setting_is_a_row_of_its_own_and_a_library_function_is_named_by_its_package(dynamo):
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU()), backend=BACKEND)
    x = torch.randn(2, 4)
    with tl.watch() as w:
        for dtype in (torch.bfloat16, torch.float16):
            with torch.autocast("cpu", dtype=dtype):
                model(x)
        model(x)
    check_against_dynamo(w, dynamo)
    assert [r.signature for r in w.table.rows] == [
        "input: f32[2, 4], autocast (cpu): bf16",
        "input: f32[2, 4], autocast (cpu): f16",
        "input: f32[2, 4]",
    ]
    assert [len(r.causes) for r in w.table.rows] == [1, 1, 1]
    assert all(r.function.startswith("Sequential.forward (torch/nn/modules/container.py:") for r in w.table.rows)


class ScheduledDropout(torch.nn.Module):  # late dropout: the trainer sets p each epoch
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.p = 0.0

    def forward(self, x):
        return F.dropout(self.fc(x), p=self.p, training=self.training)


def test_one_value_baked_in_again_and_again_is_said_once_with_its_values(dynamo):
    net = ScheduledDropout()
    f = torch.compile(net, backend=BACKEND)
    with tl.watch() as w:
        for epoch in range(5):
            net.p = 0.1 * epoch  # 0.30000000000000004 at epoch 3
            f(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    assert row.cause.startswith(
        "first compile; Python float self.p changed 4 times (was 0.0, 0.1, 0.2, 0.3): Dynamo made self.p dynamic, "
        "but torch's dropout needs it as one fixed value"
    )
    assert "0.30000000000000004" not in row.cause and row.cause.count("one fixed value") == 1
    assert "self.p == 0.30000000000000004" in row.shown_guard  # the exact value where Dynamo's guard is


def test_a_float_input_is_shown_without_its_binary_rounding(dynamo):
    f = torch.compile(lambda x, scale: x * scale, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2), 0.1 * 3)  # 0.30000000000000004
    check_against_dynamo(w, dynamo)
    assert w.table.rows[0].signature == "x: f32[2], scale: float 0.3"
