"""tl.watch() checked blind, rounds 57 to 59's fixes: a ParameterList that grows (Progressive Prompts), MONAI's
window count, model soups' list of state dicts, DINO's multi-line call, a TTA wrapper's transforms, FlexAttention
raising while traced, pytorch-forecasting's quantiles, TorchScript, orthogonal parametrizations, nanoGPT's generate,
CleanRL's NumPy sizes, SGNS built without weights, TRL's NumPy KL coefficient and torch.while_loop. Each is checked
against Dynamo's own account, with the printed fix applied where it is an action."""

import math
import re

import numpy as np
import pytest
import torch
from _dynamo_oracle import watched_clean
from torch import nn

_OLD_DYNAMO = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15)


def watched(run):
    return watched_clean(run)[0]


class Prompted(nn.Module):  # Progressive Prompts, trimmed: one soft prompt appended per task
    def __init__(self):
        super().__init__()
        self.prompts = nn.ParameterList()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.cat([*list(self.prompts)[::-1], x], 0)).sum()


class Preallocated(nn.Module):  # the printed fix, applied: every prompt up front, the unused ones weighed by zero
    def __init__(self, tasks):
        super().__init__()
        self.prompts = nn.Parameter(torch.randn(tasks, 2, 4))
        self.head = nn.Linear(4, 2)

    def forward(self, x, in_use):
        return self.head(torch.cat([(self.prompts * in_use[:, None, None]).flatten(0, 1), x], 0)).sum()


def test_a_parameter_list_that_grows_is_told_as_its_length_and_the_printed_fix_keeps_one_graph():
    model, x = Prompted(), torch.randn(3, 4)
    f = torch.compile(model, backend="aot_eager")

    def tasks():
        for _ in range(3):
            model.prompts.append(nn.Parameter(torch.randn(2, 4)))
            f(x).backward()

    table = watched(tasks)
    said = " ".join(c.words for r in table.rows for c in r.causes)
    assert "the length of self.prompts (an nn.ParameterList) changed" in said, said
    assert "_size" not in said and "int attribute" not in said, said
    fixes = " ".join(c.fix for r in table.rows for c in r.causes)
    assert "allow_unspec_int_on_nn_module" not in fixes and "weigh the ones not yet in use by zero" in fixes, fixes
    torch._dynamo.reset()
    g = torch.compile(Preallocated(3), backend="aot_eager")

    def masked():
        for n in range(1, 4):
            g(x, (torch.arange(3) < n).float()).backward()

    assert sum(r.compiles for r in watched(masked).rows if "backward" not in r.function) == 1


def scan_interval(size, roi, overlap):  # MONAI's _get_scan_interval, trimmed
    return max(int(roi * (1 - overlap)), 1)


def windows(x, roi=4, overlap=0.25):  # MONAI's sliding_window_inference over depth, trimmed
    depth = x.shape[2]
    step = scan_interval(depth, roi, overlap)
    n = math.ceil(max(depth - roi, 0) / step) + 1
    return sum(x[:, :, min(k * step, depth - roi) : min(k * step, depth - roi) + roi].sum() for k in range(n))


def test_a_window_count_computed_from_a_size_is_held_to_one_value_and_no_mark_is_offered():
    f = torch.compile(windows, backend="aot_eager")
    table = watched(lambda: [f(torch.randn(1, 1, d, 2)) for d in (12, 10)] + [f(torch.randn(1, 1, 10, 2), overlap=0.5)])
    size = [c for r in table.rows for c in r.causes if c.kind == "size"]
    assert size and all("stays 3" in c.words + c.fix and "marking it dynamic would not widen" in c.fix for c in size)
    assert not any("mark the dimension dynamic before the first call" in c.fix for c in size), [c.fix for c in size]
    value = [c for r in table.rows for c in r.causes if "overlap" in c.words]
    assert value and all("int(roi * (1 - overlap))" in c.fix and "as a tensor" not in c.fix for c in value)
    torch._dynamo.reset()  # what the tool said, checked: marked before the first call, 10 still compiles again

    def marked():
        x = torch.randn(1, 1, 12, 2)
        torch._dynamo.maybe_mark_dynamic(x, 2)
        f(x), f(torch.randn(1, 1, 10, 2))

    assert sum(r.compiles for r in watched(marked).rows) == 2


def average(state_dicts):  # model soups' uniform average of a list of state dicts
    return {k: sum(sd[k] for sd in state_dicts) / len(state_dicts) for k in state_dicts[0]}


def test_a_list_of_state_dicts_that_changes_length_is_no_list_of_names_picking_a_code_path():
    f = torch.compile(average, backend="aot_eager")
    sd = {"w": torch.randn(3), "b": torch.randn(1)}
    table = watched(lambda: [f([sd, sd]), f([sd, sd, sd])])
    row = table.rows[-1]
    assert "list len=3 of dicts" in row.signature, row.signature
    fixes = " ".join(c.fix for c in row.causes)
    assert "names, numbers, flags" not in fixes and "the same length" in fixes, fixes


class MultiCrop(nn.Module):  # DINO's MultiCropWrapper: the crop groups' bounds from a call spread over lines
    def forward(self, x):
        bounds = torch.cumsum(
            torch.unique_consecutive(
                torch.tensor([c.shape[-1] for c in x]),
                return_counts=True,
            )[1],
            0,
        )
        return bounds.float().sum() + sum(c.sum() for c in x)


def test_a_value_carried_over_a_break_on_a_call_spread_over_lines_is_named_by_that_call():
    f = torch.compile(MultiCrop(), backend="aot_eager")
    table = watched(lambda: f([torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 2)]))
    resumed = [r for r in table.rows if "after the graph break" in r.function]
    assert resumed and "torch.unique_consecutive(...)[1]" in resumed[0].signature, [r.signature for r in resumed]
    assert "carried value" not in resumed[0].signature


class TTA(nn.Module):  # ttach's SegmentationTTAWrapper, trimmed: a loop over the transforms it holds
    def __init__(self, model, flips):
        super().__init__()
        self.model, self.flips = model, flips

    def forward(self, image):
        out = 0
        for dims in self.flips:
            out = out + self.model(image.flip(dims) if dims else image)
        return out / len(self.flips)


def test_a_loop_over_a_list_a_module_holds_is_told_as_a_configuration_and_compiling_the_model_alone_shares_one_graph():
    net, x = nn.Linear(4, 4), torch.randn(2, 4)
    tta = TTA(net, [(), (1,), (0,)])
    f = torch.compile(tta, backend="aot_eager")

    def switched():
        f(x)
        tta.flips = [(), (1,)]  # a cheaper TTA at deployment
        f(x)

    table = watched(switched)
    fixes = [c.fix for r in table.rows for c in r.causes if c.kind == "length"]
    assert fixes and all("is unrolled into the graph" in x and "compiler.disable" not in x for x in fixes), fixes
    torch._dynamo.reset()
    tta.model, tta.flips = torch.compile(net, backend="aot_eager"), [(), (1,), (0,)]  # the printed fix, applied

    def model_alone():
        tta(x)
        tta.flips = [(), (1,)]
        tta(x)

    assert sum(r.compiles for r in watched(model_alone).rows) == 1


def test_a_call_that_raises_while_traced_is_told_by_its_exception_and_a_reset_lets_it_compile_again():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q, kv):
        return q >= kv

    class Attn(nn.Module):  # the FlexAttention blog's block, trimmed: no backward on CPU, so training raises
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(8, 24)

        def forward(self, x, mask):
            q, k, v = self.qkv(x).view(1, 32, 3, 1, 8).permute(2, 0, 3, 1, 4)
            return flex_attention(q, k, v, block_mask=mask)

    mask = create_block_mask(causal, B=None, H=None, Q_LEN=32, KV_LEN=32, device="cpu")
    f, x = torch.compile(Attn(), backend="aot_eager"), torch.randn(1, 32, 8)

    def train_then_infer():
        try:
            f(x, mask).sum().backward()
        except NotImplementedError:
            pass
        with torch.no_grad():
            f(x, mask)

    table = watched(train_then_infer)
    (forward,) = [r for r in table.rows if r.function.startswith("forward (")]
    assert forward.failed and not forward.compiles
    said = " ".join(c.words + " " + c.fix for c in forward.causes)
    assert "raised NotImplementedError(" in said and "torch._dynamo.reset()" in said, said
    every = [c for r in table.rows for c in r.causes]
    assert not any("a graph break comes before any work" in c.words for c in every), [c.words for c in every]
    assert not any("mark_dynamic(args[" in c.fix for c in every), [c.fix for c in every]
    torch._dynamo.reset()  # the printed fix, applied: no backward on CPU, then a reset

    def infer():
        with torch.no_grad():
            f(x, mask)

    again = watched(infer)
    (forward,) = [r for r in again.rows if r.function.startswith("forward (")]
    assert forward.compiles >= 1 and not forward.failed


class QuantileLoss(nn.Module):  # pytorch-forecasting's QuantileLoss: the quantiles a list attribute
    def __init__(self, quantiles):
        super().__init__()
        self.quantiles = quantiles

    def forward(self, y_pred, target):
        losses = []
        for i, q in enumerate(self.quantiles):
            errors = target - y_pred[..., i]
            losses.append(torch.max((q - 1) * errors, q * errors).unsqueeze(-1))
        return torch.cat(losses, dim=-1).mean()


class TensorQuantileLoss(nn.Module):  # the printed fix, applied: one tensor, every quantile at once
    def forward(self, y_pred, target, q):
        errors = target[..., None] - y_pred
        return torch.max((q - 1) * errors, q * errors).mean()


def test_a_list_of_numbers_a_loop_walks_on_a_module_is_told_to_become_one_tensor_and_that_saves_compiles():
    crit, y = QuantileLoss([0.1, 0.5, 0.9]), torch.randn(4)
    f = torch.compile(crit, backend="aot_eager")
    sweep = ([0.1, 0.5, 0.9], [0.05, 0.1, 0.5, 0.9, 0.95], [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99])

    def swept():
        for qs in sweep:
            crit.quantiles = qs
            f(torch.randn(4, len(qs)), y)

    table = watched(swept)
    fixes = [c.fix for r in table.rows for c in r.causes if c.kind == "length"]
    assert fixes and all("torch.tensor(self.quantiles)" in x for x in fixes), fixes
    torch._dynamo.reset()
    g = torch.compile(TensorQuantileLoss(), backend="aot_eager")
    fixed = watched(lambda: [g(torch.randn(4, len(qs)), y, torch.tensor(qs)) for qs in sweep])
    assert sum(r.compiles for r in fixed.rows) < sum(r.compiles for r in table.rows)


class PerceptualLoss(nn.Module):  # torch-fidelity's and LPIPS' frozen feature extractor, shipped as TorchScript
    def __init__(self, extractor):
        super().__init__()
        self.extractor = extractor

    def forward(self, fake, real):
        return (self.extractor(fake) - self.extractor(real)).pow(2).mean()


def test_a_torchscript_module_called_in_compiled_code_is_named_so_and_the_plain_module_removes_the_breaks():
    trunk = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    fake, real = torch.randn(1, 3, 8, 8, requires_grad=True), torch.randn(1, 3, 8, 8)
    f = torch.compile(PerceptualLoss(torch.jit.trace(trunk, real)), backend="aot_eager")
    table = watched(lambda: f(fake, real).backward())
    assert table.breaks and all("self.extractor is a TorchScript module" in b.words for b in table.breaks)
    assert all("use the plain nn.Module" in b.fix for b in table.breaks), [b.fix for b in table.breaks]
    torch._dynamo.reset()
    g = torch.compile(PerceptualLoss(trunk), backend="aot_eager")  # the printed fix, applied
    assert not watched(lambda: g(fake, real).backward()).breaks


def run_cell(cell, x):
    return cell(x).sum()


def test_each_parametrized_model_is_told_as_a_class_of_its_own_and_reusing_one_model_keeps_one_graph():
    from torch.nn.utils.parametrizations import orthogonal

    f, x = torch.compile(run_cell, backend="aot_eager"), torch.randn(2, 4)
    a, b = orthogonal(nn.Linear(4, 4)), orthogonal(nn.Linear(4, 4))  # the same settings: nothing replaced
    table = watched(lambda: [f(a, x), f(b, x)])
    said = [c for r in table.rows for c in r.causes if c.kind == "type"]
    assert said and all("gives every module it parametrizes a class of its own" in c.words for c in said), said
    assert not any("replaced" in c.words for c in said)
    torch._dynamo.reset()

    def reused():  # the printed fix, applied: one model, the other's weights loaded into it
        f(a, x)
        a.load_state_dict(b.state_dict())
        f(a, x)

    assert sum(r.compiles for r in watched(reused).rows) == 1


class TinyLM(nn.Module):  # nanoGPT's generate, trimmed: the whole decoding loop compiled
    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(16, 8), nn.Linear(8, 16)

    def forward(self, idx):
        return self.head(self.emb(idx))

    def generate(self, idx, max_new_tokens, top_k=None):
        for _ in range(max_new_tokens):
            logits = self(idx[:, -4:])[:, -1, :]
            if top_k is not None:
                logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[:, [-1]], -float("inf"))
            idx = torch.cat((idx, logits.argmax(-1, keepdim=True)), dim=1)
        return idx


def test_a_loop_count_passed_by_keyword_is_told_as_the_unrolled_loop_and_compiling_the_body_saves_compiles():
    model, idx = TinyLM().eval(), torch.zeros(1, 4, dtype=torch.long)
    gen = torch.compile(model.generate, backend="aot_eager")
    counts = (2, 3, 4)
    with torch.no_grad():
        table = watched(lambda: [gen(idx, max_new_tokens=n, top_k=5) for n in counts] + [gen(idx, 2)])
    said = [c for r in table.rows for c in r.causes if "max_new_tokens" in c.words]
    assert said and all("which Dynamo unrolls into the graph" in c.words or c.count == 0 for c in said[1:]), said
    assert all("pass it in as a tensor" not in c.fix for c in said), [c.fix for c in said]
    nones = [c for r in table.rows for c in r.causes if "is now None" in c.words]
    assert nones and all("a number saves a compile only where it is the very value" in c.fix for c in nones)
    torch._dynamo.reset()
    compiled = TinyLM().eval()
    compiled.forward = torch.compile(compiled.forward, backend="aot_eager")  # the printed fix: the body alone
    with torch.no_grad():
        fixed = watched(lambda: [compiled.generate(idx, max_new_tokens=n, top_k=5) for n in counts])
    assert sum(r.compiles for r in fixed.rows) < sum(r.compiles for r in table.rows)


SIZES = np.array([4, 3, 5])  # CleanRL's action_space.nvec: a module-level NumPy constant


def split_heads(logits):  # CleanRL's Agent.get_action, trimmed: logits split by the NumPy sizes
    return [part.softmax(-1) for part in torch.split(logits, SIZES.tolist(), dim=1)]


SIZE_LIST = SIZES.tolist()  # the printed fix, applied: the list made once, at module level


def split_heads_fixed(logits):
    return [part.softmax(-1) for part in torch.split(logits, SIZE_LIST, dim=1)]


def test_a_module_level_numpy_array_read_back_is_named_and_making_the_list_once_removes_the_break():
    logits = torch.randn(2, 12)
    table = watched(lambda: torch.compile(split_heads, backend="aot_eager")(logits))
    read = [b for b in table.breaks if "SIZES" in b.words]
    assert read and all("SIZES is a NumPy array" in b.words and "sizes_list = SIZES.tolist()" in b.fix for b in read)
    assert not any("capture_scalar_outputs" in b.fix for b in read)
    torch._dynamo.reset()
    assert not watched(lambda: torch.compile(split_heads_fixed, backend="aot_eager")(logits)).breaks


class SGNS(nn.Module):  # pytorch-sgns: negatives drawn by weights, or uniformly where none are given
    def __init__(self, weights=None):
        super().__init__()
        self.emb, self.weights = nn.Embedding(20, 4), weights

    def forward(self, words):
        if self.weights is not None:
            negatives = torch.multinomial(self.weights, words.numel(), replacement=True)
        else:
            negatives = torch.randint(0, 20, (words.numel(),))
        return (self.emb(words) * self.emb(negatives).view_as(self.emb(words))).sum()


def test_another_instance_built_with_none_is_told_as_its_configuration_never_as_something_set_between_calls():
    words = torch.randint(0, 20, (6,))
    weighted, uniform = (torch.compile(m, backend="aot_eager") for m in (SGNS(torch.rand(20)), SGNS()))
    table = watched(lambda: [weighted(words), uniform(words)])
    nones = [c for r in table.rows for c in r.causes if c.kind == "none"]
    assert nones and all("was built so" in c.fix and "to None between calls" not in c.fix for c in nones), nones
    assert not any("update_bn" in c.fix for c in nones)


def test_a_numpy_scalar_whose_value_moved_too_is_told_that_float_saves_nothing_and_a_tensor_keeps_one_graph():
    scale = torch.compile(lambda x, coef: x * coef, backend="aot_eager")  # TRL's adaptive KL coefficient
    x = torch.randn(4)
    table = watched(lambda: [scale(x, 0.2), scale(x, np.float64(0.2) * 0.99992)])
    (cause,) = [c for r in table.rows for c in r.causes if c.kind == "type"]
    assert "saves no compile here, as the value changed too" in cause.fix, cause.fix
    torch._dynamo.reset()
    floats = watched(lambda: [scale(x, 0.2), scale(x, float(np.float64(0.2) * 0.99992))])
    assert floats.total_compiles == 2  # what the words say: float() alone saves nothing
    torch._dynamo.reset()
    tensors = watched(lambda: [scale(x, torch.tensor(0.2)), scale(x, torch.tensor(float(np.float64(0.2) * 0.99992)))])
    assert tensors.total_compiles == 1


def newton_sqrt(a, tol):  # torch.while_loop as its docstring shows it: a Newton iteration to a tolerance
    def cond_fn(it, x):
        return ((x * x - a).abs().max() > tol) & (it < 50)

    def body_fn(it, x):
        return it + 1, 0.5 * (x + a / x)

    return torch.while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), a.clone()))[1]


@pytest.mark.skipif(_OLD_DYNAMO, reason="torch 2.13's while_loop captures a float Dynamo made dynamic")
def test_a_float_made_dynamic_that_a_while_loop_cannot_capture_is_told_so_and_a_tensor_tolerance_compiles():
    f, a = torch.compile(newton_sqrt, backend="aot_eager"), torch.rand(4, 4) + 1

    def tolerances(tols):
        for tol in tols:
            try:
                f(a, tol)
            except Exception:  # the compile fails, and the call raises
                pass

    table = watched(lambda: tolerances([1e-4, 1e-6]))
    failed = [c for r in table.rows for c in r.causes if "SymFloat" in c.words]
    assert failed and all("pass that float as a 0-d tensor" in c.fix for c in failed), table.to_text()
    torch._dynamo.reset()
    fixed = watched(lambda: tolerances([torch.tensor(1e-4), torch.tensor(1e-6)]))
    assert not any(r.failed for r in fixed.rows) and fixed.total_compiles == 1


def test_a_condition_with_the_same_offset_on_both_sides_is_said_without_it():
    from tpu_lab.compile.watching.reuse_bounds import _plain

    said = _plain("6 + mems[0].size()[0] <= 6 + mems[2].size()[0]", "mems[0] dim 0")  # Transformer-XL's mems
    assert said == "mems[0].size()[0] <= mems[2].size()[0]"
    assert _plain("3*max_num_nodes != 3", "max_num_nodes") == "max_num_nodes != 1"  # PyG's to_dense_batch
    assert _plain("3*x <= 7", "x") == "3*x <= 7"  # no exact division: said as it is


def periods_of(x, k=2):  # TimesNet's FFT_for_Period, trimmed: periods read from the data with .numpy()
    amplitude = torch.fft.rfft(x, dim=1).abs().mean(0).mean(-1)
    amplitude[0] = 0
    return x.shape[1] // torch.topk(amplitude, k)[1].numpy()


def times_block(x, k=2):  # TimesBlock.forward, trimmed: each period pads and folds the series
    out, period_list = 0, periods_of(x, k)
    for i in range(k):
        period = period_list[i]
        length = x.shape[1]
        if length % period != 0:
            length = (length // period + 1) * period
        folded = torch.cat([x, x.new_zeros(x.shape[0], length - x.shape[1], x.shape[2])], 1)
        out = out + folded.reshape(x.shape[0], length // period, period, x.shape[2]).mean()
    return out


def fold(x, period: int):  # the printed fix, applied: the period a Python int, the per-size work compiled
    length = -(-x.shape[1] // period) * period
    folded = torch.cat([x, x.new_zeros(x.shape[0], length - x.shape[1], x.shape[2])], 1)
    return folded.reshape(x.shape[0], length // period, period, x.shape[2]).mean()


def test_a_branch_on_a_value_that_also_sets_a_size_is_told_no_tensor_form_holds_it_and_ints_outside_compile():
    x = torch.sin(torch.arange(24.0) / 2).reshape(1, 24, 1).repeat(2, 1, 3)
    table = watched(lambda: torch.compile(times_block, backend="aot_eager")(x))
    sized = [b for b in table.breaks if "sets a tensor's size" in b.fix]
    assert sized and all("no mask, torch.where or torch.cond holds it" in b.fix for b in sized), table.to_text()
    torch._dynamo.reset()
    g = torch.compile(fold, backend="aot_eager")
    fixed = watched(lambda: [g(x, int(p)) for p in periods_of(x).tolist()])
    assert not fixed.breaks and not any(r.failed for r in fixed.rows)


class Temperature:  # transformers' logits warpers, trimmed: objects the sampling step runs in turn
    def __init__(self, t):
        self.t = t

    def __call__(self, scores):
        return scores / self.t


class TopK:
    def __init__(self, k):
        self.k = k

    def __call__(self, scores):
        return scores.masked_fill(scores < scores.topk(self.k).values[:, -1:], -float("inf"))


def sample_step(scores, processors):
    for p in processors:
        scores = p(scores)
    return scores.softmax(-1)


def test_a_list_of_objects_the_code_runs_is_a_configuration_and_a_changed_class_is_named_by_index():
    f, scores = torch.compile(sample_step, backend="aot_eager"), torch.randn(2, 8)
    table = watched(lambda: [f(scores, [Temperature(0.7)]), f(scores, [Temperature(0.7), TopK(3)])])
    fixes = [c.fix for r in table.rows for c in r.causes if c.kind == "length"]
    assert fixes and all("the list holds objects the code runs in turn" in x for x in fixes), fixes
    assert not any("stacked tensor" in x for x in fixes)
    torch._dynamo.reset()
    swapped = watched(lambda: [f(scores, [Temperature(0.7), TopK(3)]), f(scores, [Temperature(0.7), Temperature(2.0)])])
    said = " ".join(c.words for r in swapped.rows for c in r.causes)
    assert "processors[1] is now a Temperature, was a TopK" in said, said


class CountingSGD(torch.optim.Optimizer):  # LAMB's step, trimmed: a Python int step count it only increments
    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                state["step"] += 1
                p.add_(p.grad, alpha=-group["lr"])


def test_a_step_count_an_optimizer_only_counts_is_told_to_reuse_the_graph_never_a_graph_per_step():
    w = nn.Parameter(torch.randn(3))
    opt = CountingSGD([w])
    step = torch.compile(opt.step, backend="aot_eager")

    def train():
        for _ in range(8):
            w.grad = torch.ones(3)
            step()

    table = watched(train)
    counted = [c for r in table.rows for c in r.causes if c.kind == "optimizer_step"]
    assert counted and all("later steps reuse this graph" in c.words for c in counted), table.to_text()
    assert sum(r.compiles for r in table.rows) < 8  # what the words say: not a graph per step


def r1_penalty(discriminator, real):  # stylegan2-pytorch's d_r1_loss
    (grad,) = torch.autograd.grad(discriminator(real).sum(), real, create_graph=True)
    return grad.pow(2).flatten(1).sum(1).mean()


def test_autograd_grad_in_compiled_code_is_told_to_stay_out_never_the_setting_that_makes_the_compile_fail():
    d = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    real = torch.randn(3, 4, requires_grad=True)
    table = watched(lambda: torch.compile(r1_penalty, backend="aot_eager")(d, real))
    grads = [b for b in table.breaks if "torch.autograd.grad" in b.words]
    assert grads and all("outside the compiled code" in b.fix for b in grads), table.to_text()
    assert not any(re.search(r"(?<!not )torch\._dynamo\.config\.trace_autograd_ops = True", b.fix) for b in grads)
    torch._dynamo.reset()
    compiled_d = torch.compile(d, backend="aot_eager")  # the printed fix, applied: the penalty uncompiled

    def penalty_outside():
        compiled_d(real.detach()).mean().backward()  # the main loss, compiled
        r1_penalty(d, real).backward()  # the penalty, with the uncompiled model

    fixed = watched(penalty_outside)
    assert not fixed.breaks and not any(r.failed for r in fixed.rows)


class GrowingRope(nn.Module):  # transformers' LlamaRotaryEmbedding (v4.36): the cos/sin cache regrown in forward
    def __init__(self, dim=4, cached=8):
        super().__init__()
        self.dim = dim
        self._set_cos_sin_cache(cached)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        freqs = torch.outer(torch.arange(seq_len).float(), torch.ones(self.dim))
        self.register_buffer("cos_cached", freqs.cos(), persistent=False)

    def forward(self, x):
        if x.shape[1] > self.max_seq_len_cached:
            self._set_cos_sin_cache(x.shape[1])
        return x * self.cos_cached[: x.shape[1]]


def test_a_cache_and_its_length_a_method_of_forward_rewrites_are_one_cause_and_building_it_once_saves_compiles():
    lengths = (6, 12, 16, 10)
    rope = GrowingRope()
    f = torch.compile(rope, backend="aot_eager")
    table = watched(lambda: [f(torch.randn(1, n, 4)) for n in lengths])
    said = [c for r in table.rows for c in r.causes if c.kind == "rewritten"]
    assert said and all("_set_cos_sin_cache" in c.words and "max_seq_len_cached" in c.words for c in said), said
    assert not any("allow_unspec_int_on_nn_module" in c.fix for r in table.rows for c in r.causes)
    torch._dynamo.reset()
    built = GrowingRope(cached=max(lengths))  # the printed fix, applied: the cache built once at its largest size
    g = torch.compile(built, backend="aot_eager")
    assert watched(lambda: [g(torch.randn(1, n, 4)) for n in lengths]).total_compiles < table.total_compiles


def test_a_long_expression_of_sizes_is_named_by_the_sizes_it_reads_never_quoted_whole():
    from tpu_lab.compile.causes.cause import held_expr

    swin = "(4*((((L['x'].size()[2] // 4) + ((4 + (-1)*((L['x'].size()[2] // 4) % 4)) % 4)) // 4)))" * 3
    said = held_expr(swin)  # Swin's padding arithmetic, as Dynamo writes it
    assert said == "an expression of x.size()[2] too long to quote here", said
    assert held_expr("L['x'].size()[2] // 4") == "x.size()[2] // 4"


@pytest.mark.slow
def test_a_setting_switched_on_a_library_model_is_never_told_to_vanish_with_a_graph_break_fix():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32, embd_pdrop=0.0)
    model = GPT2LMHeadModel(config).train()  # transformers' docs: gradient_checkpointing_enable() between runs
    f = torch.compile(model, backend="aot_eager")

    def step():
        ids = torch.randint(0, 64, (2, 8))
        f(input_ids=ids, labels=ids).loss.backward()

    def toggled():
        step()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        step()

    table, account = watched_clean(toggled)
    for place in ("modeling_utils.py:", "generic.py:"):  # each break on the library line Dynamo logged it at
        logged = sum(
            f"/transformers/{'utils/' if 'generic' in place else ''}{place}" in m for m in account.graph_breaks()
        )
        shown = sum(b.count for b in table.breaks if place in b.where)
        assert shown == logged, (place, shown, logged, table.to_text())
    flags = [c for r in table.rows for c in r.causes if c.kind == "flag" and "gradient_checkpointing" in c.words]
    assert flags and not any("fixing that graph break" in c.fix for c in flags), table.to_text()
    every = " ".join(c.fix for r in table.rows for c in r.causes)
    assert "GPT2LMHeadModel.forward is transformers code that GPT2LMHeadModel.forward" not in every
    assert "cannot resume, where Dynamo cannot resume" not in table.to_text()


class StepSize(nn.Module):  # LSQ's quantizer: a [1] placeholder scale, replaced by a 0-d Parameter on init_from
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.ones(1))

    def init_from(self, x):
        self.s = nn.Parameter(x.abs().mean() * 2)

    def forward(self, x):
        return torch.round(x / self.s).clamp(-8, 7) * self.s


def test_a_parameter_replaced_at_another_rank_is_told_to_be_made_at_its_final_rank_and_that_keeps_one_graph():
    q, x = StepSize(), torch.randn(4)
    f = torch.compile(q, backend="aot_eager")

    def replaced():
        f(x)
        q.init_from(x)
        f(x)

    table = watched(replaced)
    ranks = [c for r in table.rows for c in r.causes if c.kind == "rank"]
    assert ranks and all("create it at its final rank" in c.fix for c in ranks), table.to_text()
    assert not any("force_parameter_static_shapes = False lets" in c.fix for c in ranks)
    torch._dynamo.reset()
    final = StepSize()
    final.s = nn.Parameter(torch.ones(()))  # the printed fix, applied: made at its final rank
    g = torch.compile(final, backend="aot_eager")

    def at_final_rank():
        g(x)
        final.s.data.copy_(x.abs().mean() * 2)
        g(x)

    assert watched(at_final_rank).total_compiles == 1


def test_a_closure_variable_inside_a_librarys_arguments_is_named_by_dynamos_hint():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def sliding(window_size):  # attention-gym's generate_sliding_window: the window held in a closure
        def mask_mod(b, h, q, kv):
            return (q >= kv) & (q - kv <= window_size)

        return mask_mod

    q = torch.randn(1, 1, 32, 8)
    f = torch.compile(flex_attention, backend="aot_eager")

    def windows():
        with torch.no_grad():
            for w in (4, 8):
                f(q, q, q, block_mask=create_block_mask(sliding(w), None, None, 32, 32, device="cpu"))

    said = " ".join(c.words for r in watched(windows).rows for c in r.causes)
    assert "the closure variable window_size" in said and "__closure__" not in said, said


def advantages(rewards, values, args):  # CleanRL's GAE: a loop over reversed(range(args.num_steps))
    adv, last = torch.zeros_like(rewards), 0
    for t in reversed(range(args.num_steps)):
        last = rewards[t] - values[t] + args.gamma * (values[t] + last)
        adv[t] = last
    return adv


def test_a_loop_count_read_off_an_args_namespace_in_reversed_range_is_the_unrolled_loop_never_a_tensor():
    from types import SimpleNamespace

    f = torch.compile(advantages, backend="aot_eager")
    runs = [(n, torch.randn(8), torch.randn(8)) for n in (4, 6, 8)]
    table = watched(lambda: [f(r, v, SimpleNamespace(num_steps=n, gamma=0.99)) for n, r, v in runs])
    said = [c for r in table.rows for c in r.causes if "num_steps" in c.words]
    assert said and not any("as a tensor" in c.fix for c in said), [c.fix for c in said]
    assert any("compile only the loop's body" in c.fix for c in said), [c.fix for c in said]


def clamped(xyz, box_min, box_max):  # a point-in-box check before clamping, as NeRF samplers write it
    for _ in range(2):
        if torch.all(xyz <= box_max):
            break
        xyz = torch.max(torch.min(xyz, box_max), box_min)
    return xyz


def test_a_branch_on_a_tensor_with_no_number_read_back_is_never_told_about_capture_scalar_outputs():
    xyz, lo, hi = torch.randn(5, 3) * 2, -torch.ones(3), torch.ones(3)
    table = watched(lambda: torch.compile(clamped, backend="aot_eager")(xyz, lo, hi))
    branches = [b for b in table.breaks if "branching" in b.words]
    assert branches and not any("capture_scalar_outputs" in b.fix for b in branches), [b.fix for b in branches]
