"""tl.watch() checked blind, twenty-second round: a number read from tensor data that Dynamo traces as a
symbol, where real code needs a real one (AutoClip's np.percentile over .item() norms under fullgraph,
wav2vec2's SpecAugment rounding inside transformers' try/finally decorator), is said in words, not as
Dynamo's sympy dump; a UserError Dynamo falls back on is not said to raise; a decorator's wrapper Dynamo
gave up on is named as the wrapper. Checked against Dynamo's records."""

import functools

import numpy as np
import pytest
import torch
from _dynamo_oracle import check_against_dynamo
from test_watch_blind21 import sinkhorn

import tpu_lab as tl

BACKEND = "eager"
SYMPY = ("zuf0", "TruncToInt", "FloatPow", "guard_or_false", "TORCHDYNAMO_", "docs.google", "_numpy")


def _grad_norm(model):  # AutoClip's _get_grad_norm: a Python float from .item() per parameter
    total = 0
    for p in model.parameters():
        total += p.grad.norm(2).item() ** 2
    return total**0.5


def autoclip(model, history, percentile=10):
    history.append(_grad_norm(model))
    clip_value = np.percentile(history, percentile)
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip_value)


def test_numpy_on_numbers_read_from_tensors_under_fullgraph_is_said_in_words_with_torchs_own_op(dynamo):
    model, history = torch.nn.Linear(8, 2), []
    f = torch.compile(autoclip, backend=BACKEND, fullgraph=True)
    with tl.watch() as w:
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
            with pytest.raises(torch._dynamo.exc.Unsupported):
                f(model, history)
            model.zero_grad()
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    (cause,) = row.causes
    assert "np.percentile needs real numbers, but it gets values read from tensor data" in cause.words
    assert "cannot turn them into a NumPy array" in cause.words and "the call raised" in cause.words
    assert "torch.quantile" in cause.fix and "call np.percentile outside it" in cause.fix
    assert "set_stance" not in cause.fix
    assert not [s for s in SYMPY if s in str(w.table)], str(w.table)


def span_count(length, prob):  # wav2vec2's _compute_mask_indices: probabilistic rounding with numpy
    epsilon = np.random.rand(1).item()
    count = int(prob * length / 2 + epsilon)
    if count * 2 > length:
        count = length // 2
    return count


def collecting(fn):  # transformers' output-capturing decorator: a try/finally around forward
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        collected = []
        try:
            return fn(*args, **kwargs)
        finally:
            collected.clear()

    return wrapper


class Masker(torch.nn.Module):
    @collecting
    def forward(self, x):
        return x[:, : span_count(x.shape[1], 0.3)] * 2


def test_a_branch_on_a_captured_number_falls_back_without_raising_and_is_said_in_words(dynamo):
    f = torch.compile(Masker(), backend=BACKEND)
    with torch._dynamo.config.patch(capture_scalar_outputs=True), tl.watch() as w:
        for _ in range(2):
            assert f(torch.randn(2, 10)).shape[0] == 2  # it ran: Dynamo fell back, nothing raised
    check_against_dynamo(w, dynamo)
    failed = [r for r in w.table.rows if r.failed]
    wrapper = next(r for r in failed if "via @collecting" in r.function)
    assert wrapper.raised == 0
    (cause,) = wrapper.causes
    assert "Dynamo gave up on the @collecting wrapper of Masker.forward at" in cause.words
    assert "this branch depends on a number read from tensor data" in cause.words, cause.words
    assert "raised" not in cause.words and "runs eagerly on every call" in cause.words
    assert any(r.function.startswith("Masker.forward (") and r.compiles for r in w.table.rows)  # compiled itself
    said = [b.words for b in w.table.breaks if "Could not guard" not in b.words]
    assert len(said) == len(w.table.breaks) and any("this branch depends on a number" in s for s in said)
    assert not [s for s in SYMPY if s in str(w.table)], str(w.table)


class MultiCrop(torch.nn.Module):  # DINO's MultiCropWrapper: crops grouped by size, a loop over a tensor
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1))

    def forward(self, crops):
        idx_crops = torch.cumsum(torch.tensor([2, 4]), 0)
        start, out = 0, []
        for end in idx_crops:
            out.append(self.backbone(torch.cat(crops[start:end])))
            start = end
        return torch.cat(out)


def _crops():
    return [torch.randn(1, 3, 8, 8)] * 2 + [torch.randn(1, 3, 6, 6)] * 4


def test_a_break_dynamo_cannot_resume_from_is_named_with_its_reason_and_line(dynamo):
    f = torch.compile(MultiCrop(), backend=BACKEND)
    with tl.watch() as w:
        for _ in range(2):
            f(_crops())
    check_against_dynamo(w, dynamo)
    first = MultiCrop.forward.__code__.co_firstlineno
    (cut,) = [b for b in w.table.breaks if "cannot resume" in b.words]
    assert "`Tensor.item()`" in cut.words and "stopped tracing at this instruction" not in cut.words
    assert f"it compiles the function up to line {first + 3} and the rest runs eagerly" in cut.words
    assert cut.where.endswith(f":{first + 4}"), cut  # the torch.cat line, not the loop's
    assert cut.fix.startswith("an element of a tensor is used here where Python needs an int"), cut


def test_hearing_such_a_break_prints_nothing_the_user_did_not_ask_for(capfd):
    torch._logging.set_logs()  # TORCH_LOGS as a user starts: graph breaks not logged
    torch._dynamo.reset()
    f = torch.compile(MultiCrop(), backend=BACKEND)
    with tl.watch() as w:
        f(_crops())
    assert any("`Tensor.item()`" in b.words for b in w.table.breaks)
    assert "Graph break" not in capfd.readouterr().err


class EarlyExit(torch.nn.Module):  # DeeBERT's early exit: stop at the first confident layer
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.exits = torch.nn.ModuleList(torch.nn.Linear(8, 3) for _ in range(3))

    def forward(self, x):
        for layer, exit_head in zip(self.layers, self.exits, strict=True):
            x = torch.tanh(layer(x))
            logits = exit_head(x)
            p = logits.softmax(-1)
            if -(p * p.log()).sum(-1).mean() < 1.0:
                return logits
        return logits


def test_a_frame_given_up_after_a_break_it_cannot_resume_from_is_told_by_that_break(dynamo):
    f = torch.compile(EarlyExit().eval(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for i in range(2):
            f(torch.randn(1, 8) * (i + 1))
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    (cause,) = row.causes
    first = EarlyExit.forward.__code__.co_firstlineno
    assert "data-dependent branching: an if/while on a tensor's value, and it cannot resume after that break" in (
        cause.words
    )
    assert (
        f"inside the loop at line {first + 1} (for layer, exit_head in zip(self.layers, self.exits, strict=True):)"
        in cause.words
    )
    assert "DictValuesIterator" not in str(w.table) and "return statement" not in cause.fix
    assert "torch.cond" in cause.fix


class MaskedEncoder(torch.nn.Module):  # MAE's random_masking: the kept length from a float ratio
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 8)

    def forward(self, patches, mask_ratio=0.75):
        x = self.proj(patches)
        n, length, d = x.shape
        len_keep = int(length * (1 - mask_ratio))
        ids_keep = torch.argsort(torch.rand(n, length), dim=1)[:, :len_keep]
        return torch.gather(x, 1, ids_keep.unsqueeze(-1).repeat(1, 1, d)).mean(1)


def test_a_float_ratio_crossing_a_condition_under_math_trunc_is_told_as_a_crossed_condition(dynamo):
    f = torch.compile(MaskedEncoder(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for ratio in (0.75, 0.5, 0.9):  # 16 * 0.1 keeps 1: a length Dynamo compiles apart
            f(torch.randn(2, 16, 6), mask_ratio=ratio)
    check_against_dynamo(w, dynamo)
    last = w.table.rows[-1].causes
    assert not [c for c in last if "not translated" in c.words], last
    assert any("mask_ratio crossed" in c.words and "math.trunc(" in c.words for c in last), last


class GCN(torch.nn.Module):  # pygcn: torch.sparse.mm with a sparse COO adjacency
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(4, 8)

    def forward(self, x, adj):
        return torch.relu(torch.sparse.mm(adj, self.w1(x)))


def test_a_sparse_input_is_shown_sparse_and_told_to_keep_the_sparse_op_out(dynamo):
    idx = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    adj = torch.sparse_coo_tensor(idx, torch.rand(4), (5, 5)).coalesce()
    f = torch.compile(GCN(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(5, 4), adj)
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    assert "adj: f32[5, 5] sparse_coo" in row.signature
    fixes = [row.causes[0].fix, *(b.fix for b in w.table.breaks)]
    assert all("keep the sparse op out of the compiled function" in f for f in fixes), fixes
    assert not any("fullgraph=False" in f for f in fixes)


def class_weights(logits, labels):  # class-balanced cross-entropy from the batch's label counts
    classes, counts = torch.unique(labels, return_counts=True)
    weight = torch.zeros(logits.shape[-1]).index_put((classes,), 1.0 / counts.float())
    return torch.nn.functional.cross_entropy(logits, labels, weight=weight)


def test_a_data_dependent_shape_op_is_named_as_the_torch_function_the_user_called(dynamo):
    f = torch.compile(class_weights, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(8, 4), torch.randint(0, 4, (8,)))
    check_against_dynamo(w, dynamo)
    (b,) = w.table.breaks
    assert b.words.startswith("`torch.unique` (aten._unique2.default): its output's shape depends on the tensor's data")


def sinkhorn_knopp(a, b, cost, reg=0.1, iters=20, tol=1e-6):  # POT's Sinkhorn with an early stop
    kernel = torch.exp(-cost / reg)
    u = torch.ones_like(a) / a.shape[0]
    v = torch.ones_like(b) / b.shape[0]
    for _ in range(iters):
        v = b / (kernel.T @ u)
        u = a / (kernel @ v)
        err = torch.norm((u[:, None] * kernel * v[None, :]).sum(0) - b)
        if err < tol:
            break
    return u[:, None] * kernel * v[None, :]


def test_a_branch_value_is_traced_to_the_line_that_assigns_it_not_the_chains_first(dynamo):
    f = torch.compile(sinkhorn_knopp, backend=BACKEND)
    with tl.watch() as w:
        f(torch.full((5,), 0.2), torch.full((4,), 0.25), torch.rand(5, 4))
    check_against_dynamo(w, dynamo)
    line = sinkhorn_knopp.__code__.co_firstlineno + 7
    said = [b.words for b in w.table.breaks if "data-dependent branching" in b.words]
    assert said and all(f"computed from line {line}: err = torch.norm(" in s for s in said), said


def test_a_library_frame_with_no_tensor_work_is_not_told_to_change_its_inputs(dynamo):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(x, y, micro_step):  # gradient accumulation inside the compiled step
        loss = torch.nn.functional.mse_loss(model(x), y) / 2
        loss.backward()
        if (micro_step + 1) % 2 == 0:
            opt.step()
            opt.zero_grad()
        return loss

    f = torch.compile(train_step, backend=BACKEND)
    with tl.watch() as w:
        for i in range(4):
            f(torch.randn(3, 4), torch.randn(3, 1), i)
    check_against_dynamo(w, dynamo)
    torch_rows = [r for r in w.table.rows if "(torch/optim/" in r.function and r.failed]
    assert torch_rows, [r.function for r in w.table.rows]
    for r in torch_rows:
        assert all(c.fix.startswith("none needed: torch's own code") for c in r.causes if c.kind == "failed")


def test_a_list_growing_at_every_compile_is_said_once_with_its_lengths(dynamo):
    model, recent = torch.nn.Linear(4, 1), []

    def scaled_loss(x, y):  # a loss-spike guard closing over the loop's list of recent losses
        loss = ((model(x) - y) ** 2).mean()
        if len(recent) > 0:
            loss = loss / (1.0 + sum(recent) / len(recent))
        return loss

    f = torch.compile(scaled_loss, backend=BACKEND)
    with tl.watch() as w:
        for _ in range(5):
            recent.append(f(torch.randn(3, 4), torch.randn(3, 1)).detach())
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    assert row.cause.count("grows at every compile") == 1, row.cause
    assert "recent grows at every compile (was 1, 2, 3): each new length compiles a graph of its own" in row.cause


@torch.library.custom_op("tpu_lab_tests::np_softclip", mutates_args=())
def np_softclip(x: torch.Tensor) -> torch.Tensor:  # a NumPy kernel wrapped as a custom op, no fake impl
    return torch.from_numpy(np.tanh(x.detach().numpy()) * 3.0)


def test_a_custom_op_without_a_fake_implementation_is_told_to_register_one(dynamo):
    f = torch.compile(lambda x: np_softclip(x * 2).sum(-1), backend=BACKEND)
    with tl.watch() as w, pytest.raises(torch._dynamo.exc.TorchRuntimeError):
        f(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    (cause,) = row.causes
    assert "@np_softclip.register_fake" in cause.fix and "torch.empty_like" in cause.fix
    assert "custom_ops.py" not in cause.words and "library code" not in cause.words


def test_a_tensor_loop_count_is_told_range_needs_an_int_and_guards_read_in_the_users_names(dynamo):
    f = torch.compile(sinkhorn, backend=BACKEND)  # SuperGlue's loop, its count passed as a tensor
    with tl.watch() as w:
        for iters in (1, 2):
            f(torch.randn(1, 3, 4), torch.full((1, 3), -1.1), torch.full((1, 4), -1.4), torch.tensor(iters))
    check_against_dynamo(w, dynamo)
    # torch 2.15 reads the count back with .item(); 2.13 refuses range() on a tensor: the same fix either way
    told = [b for b in w.table.breaks if b.fix.startswith("range() needs a Python int: pass the count as an int")]
    assert len(told) == 1, w.table.breaks
    assert "___stack" not in str(w.table) and "range(iters).stop == 1" in str(w.table)


class FadeIn(torch.nn.Module):  # ProGAN's fade-in: alpha from a step counter kept on the module
    def __init__(self):
        super().__init__()
        self.step, self.lin = 0, torch.nn.Linear(4, 4)

    def forward(self, x):
        self.step += 1
        return self.lin(x) * min(1.0, self.step / 8)


def test_calls_past_the_limit_that_dynamo_no_longer_sees_are_a_lower_bound(dynamo):
    f = torch.compile(FadeIn(), backend=BACKEND)
    with torch._dynamo.config.patch(recompile_limit=2), tl.watch() as w:
        for _ in range(5):
            f(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    text = str(w.table)
    limited = [r for r in w.table.rows if r.uncompiled]
    assert limited and all(r.calls is None for r in limited)  # not a function the watch wraps: calls not counted
    assert f"({limited[0].uncompiled}+ ran uncompiled)" in text
    assert f"at least {sum(r.uncompiled for r in limited)} call(s) ran uncompiled" in text
