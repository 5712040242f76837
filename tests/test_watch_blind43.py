"""tl.watch() checked blind, forty-third round: a compiled generator Dynamo would not start on (no record at
all, so nothing was shown), a backend's failure inside torch.cond's backward cut to "raised:", library breaks a
setting of the user's reaches (BatchNorm's momentum=None, clip_grad_norm_'s error_if_nonfinite=True), a number
said to be compiled apart at 0 and 1. Each is checked against Dynamo's own account, with the printed fix applied."""

import logging

import pytest
import torch
from _dynamo_oracle import watched_clean

import tpu_lab as tl
from tpu_lab.compile.sources import dynamo_unconverted

watched = watched_clean


def chunk_iter(inputs, chunk_len):  # transformers' ASR pipeline chunks audio with a generator like this
    for start in range(0, inputs.shape[0], chunk_len):
        chunk = inputs[start : start + chunk_len]
        yield (chunk - chunk.mean()) / (chunk.std() + 1e-7)


def test_a_compiled_generator_dynamo_never_starts_on_is_a_failed_line_and_its_printed_fix_compiles(capfd):
    compiled = torch.compile(chunk_iter, backend="eager")
    table, account = watched(lambda: [list(compiled(torch.randn(1600), 400)) for _ in range(3)])
    assert len(account.unconverted()) == 1 and account.records == []  # Dynamo's only trace: its INFO log
    (row,) = table.rows
    assert (row.compiles, row.failed) == (0, 1)
    (cause,) = row.causes
    assert cause.words.startswith("not compiled: Dynamo gave up on chunk_iter at test_watch_blind43.py:")
    assert "Generators cannot be compiled directly with `torch.compile`; it runs eagerly on every call" in cause.words
    assert cause.fix.startswith("Call a generator from inside of a non-generator Python function and compile")
    assert table.breaks == ()  # Dynamo logs no graph break for it
    assert "WON'T CONVERT" not in capfd.readouterr().err  # heard, never printed

    @torch.compile(backend="eager")
    def features(audio):  # the fix as printed
        return list(chunk_iter(audio, 400))

    table, _ = watched(lambda: [features(torch.randn(1600)) for _ in range(3)])
    assert table.total_compiles == 1 and sum(r.failed for r in table.rows) == 0


def test_the_converters_log_prints_only_what_the_users_logging_asks_for_and_keeps_a_users_own_level(capfd):
    log = logging.getLogger(dynamo_unconverted.LOGGER)
    before = log.level
    with tl.watch():  # switched on here, and left on: toggling a logger's level per entry costs every call
        assert log.isEnabledFor(logging.INFO)
    torch._dynamo.reset()
    list(torch.compile(chunk_iter, backend="eager")(torch.randn(8), 4))  # no watch: Dynamo logs it at INFO
    assert "WON'T CONVERT" not in capfd.readouterr().err  # the user's logging (WARNING) never asked for it
    torch._logging.set_logs(dynamo=logging.INFO)  # the user asks for Dynamo's INFO: it is printed
    try:
        torch._dynamo.reset()
        list(torch.compile(chunk_iter, backend="eager")(torch.randn(8), 4))
        assert "WON'T CONVERT chunk_iter" in capfd.readouterr().err
    finally:
        torch._logging.set_logs()
    log.setLevel(logging.DEBUG)  # a level the user set on this logger itself: left alone
    try:
        with tl.watch():
            assert log.level == logging.DEBUG
        assert log.level == logging.DEBUG
    finally:
        log.setLevel(before)


def test_contract_dynamos_soft_failure_log_for_a_generator():
    """Dynamo refuses a generator before any compile starts and logs ``WON'T CONVERT <name> <file> line <n>``
    at INFO on torch._dynamo.convert_frame, its error attached; a torch that changes this fails here."""
    heard = []

    def keep(record):  # first among the logger's filters: it sees every record the logger makes
        heard.append(record)
        return True

    log = logging.getLogger(dynamo_unconverted.LOGGER)
    level = log.level
    log.filters.insert(0, keep)
    log.setLevel(logging.INFO)
    try:
        torch._dynamo.reset()
        list(torch.compile(chunk_iter, backend="eager")(torch.randn(8), 4))
    finally:
        log.removeFilter(keep)
        log.setLevel(level)
    (record,) = [r for r in heard if r.getMessage().startswith("WON'T CONVERT chunk_iter ")]
    error = record.exc_info[1]
    assert type(error).__name__ == "Unsupported" and not hasattr(error, "compile_id"), torch.__version__
    assert "Attempt to trace generator" in str(error), torch.__version__


class EarlyExit(torch.nn.Module):  # torch.cond's docs, as an early-exit head
    def __init__(self, same_shape):
        super().__init__()
        self.body = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 8 if same_shape else 4)

    def forward(self, x):
        h = self.body(x)
        return torch.cond(h.sum() > 0, lambda h: self.head(h), lambda h: h.sin(), (h,))


def test_a_backends_failure_inside_torch_conds_backward_is_said_with_its_error_and_the_fix_holds():
    model = torch.compile(EarlyExit(same_shape=False), backend="aot_eager")

    def call():
        with pytest.raises(Exception, match="invalid for input of size 16"):
            model(torch.randn(2, 8))

    table, _ = watched(call)
    (cause,) = [c for r in table.rows for c in r.causes if c.kind == "failed"]
    assert (
        "failed: the aot_eager backend raised RuntimeError: shape '[2, 4]' is invalid for input of size 16, inside "
        "torch.cond's backward (torch/_higher_order_ops/cond.py:" in cause.words
    )
    assert cause.fix.startswith("torch.cond traces the backward of both branches, which needs their outputs to match")

    fixed = torch.compile(EarlyExit(same_shape=True), backend="aot_eager")
    table, _ = watched(lambda: [fixed(torch.randn(2, 8)) for _ in range(2)])
    assert table.total_compiles == 1 and sum(r.failed for r in table.rows) == 0


def test_batchnorms_momentum_none_is_the_setting_behind_its_break_and_its_default_holds():
    def run(momentum):
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8, momentum=momentum))
        compiled = torch.compile(net, backend="eager")
        return watched(lambda: [compiled(torch.randn(6, 8)) for _ in range(3)])[0]

    table = run(None)
    (b,) = table.breaks
    assert "(inside torch/nn/modules/batchnorm.py:" in b.words
    assert "reached only where self.momentum is None holds: the module's momentum, as it was built" in b.words
    assert b.fix.startswith("momentum=0.1 (its default) avoids this branch and its break: build it with momentum=0.1")
    assert "capture_scalar_outputs" not in b.fix  # it only moved the break

    table = run(0.1)
    assert table.breaks == () and table.total_compiles == 1


def test_clip_grad_norms_error_if_nonfinite_is_named_in_the_users_call_and_its_default_holds():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    model(torch.randn(4, 8)).sum().backward()
    params = list(model.parameters())

    @torch.compile(backend="eager")
    def clip(params, max_norm):
        return torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=True)

    table, _ = watched(lambda: [clip(params, 1.0) for _ in range(2)])
    (b,) = table.breaks
    assert (
        "reached only where error_if_nonfinite holds: the argument error_if_nonfinite; your line passes "
        "error_if_nonfinite=True" in b.words
    )
    assert b.fix.startswith("error_if_nonfinite=False (its default) avoids this branch and its break")

    @torch.compile(backend="eager")
    def clip_default(params, max_norm):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    table, _ = watched(lambda: [clip_default(params, 1.0) for _ in range(2)])
    assert table.breaks == () and table.total_compiles == 1


def test_a_custom_ops_int_list_made_dynamic_is_never_said_to_compile_apart_at_0_and_1():
    @torch.library.custom_op("tpu_lab_blind43::crop", mutates_args=())
    def crop(pic: torch.Tensor, box: list[int]) -> torch.Tensor:
        left, top, right, bottom = box
        return pic[:, top:bottom, left:right].clone()

    @crop.register_fake
    def _(pic, box):
        return pic.new_empty(pic.shape[0], box[3] - box[1], box[2] - box[0])

    @torch.compile(backend="eager")
    def crop_and_norm(img, box):
        c = crop(img, box)
        return (c - c.mean()) / (c.std() + 1e-5)

    img = torch.randn(3, 32, 32)
    boxes = ([0, 0, 8, 8], [4, 4, 16, 16], [1, 1, 9, 9], [0, 0, 10, 10])
    table, _ = watched(lambda: [crop_and_norm(img, b) for b in boxes])
    assert table.total_compiles == 2  # 0 and 1 reuse the dynamic graph
    said = " ".join(c.words for r in table.rows for c in r.causes)
    assert "Dynamo made box[0]" in said and "0 or 1" not in said, said
