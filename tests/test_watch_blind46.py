"""tl.watch() checked blind, forty-sixth round (and what the forty-fifth left): a per-image list whose length
follows the batch (torchvision's ``image_sizes``), torch's own ``swa_update`` called per parameter, and a
library function compiled directly that Dynamo gives up on. Each is checked against Dynamo's own account, with
the printed fixes applied."""

import torch
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


def anchors(images, image_sizes):  # torchvision's AnchorGenerator: a per-image list beside the batch
    return images.sum() + sum(h * w for h, w in image_sizes)


def _batch(n):
    return torch.randn(n, 3, 8, 8), [(8, 8)] * n


def test_a_list_with_one_item_per_sample_is_the_batch_change_and_a_mark_is_said_to_save_nothing():
    f = torch.compile(anchors, backend="eager")
    table = watched(lambda: [f(*_batch(n)) for n in (2, 3, 4)])
    cause = next(c for r in table.rows for c in r.causes if "one item per sample" in c.words)
    assert cause.words.startswith("images dimension 0 changed 2 -> 3, and image_sizes with it (one item per sample")
    assert "a mark on the batch dimension saves nothing" in cause.fix and "drop_last=True" in cause.fix
    assert not any(c.kind == "size" for r in table.rows for c in r.causes)  # never a mark offered for it
    assert table.total_compiles == 3

    def marked():  # what the old fix offered: the mark saves nothing, as the words say
        for n in (2, 3, 4):
            images, sizes = _batch(n)
            torch._dynamo.maybe_mark_dynamic(images, 0)
            f(images, sizes)

    torch._dynamo.reset()
    assert watched(marked).total_compiles == 3

    def as_tensor():  # the fix as printed: the values as one tensor, sizes then share a graph
        g = torch.compile(lambda images, sizes: images.sum() + sizes.prod(1).sum(), backend="eager")
        for n in (2, 3, 4):
            images, sizes = _batch(n)
            g(images, torch.tensor(sizes))

    assert watched(as_tensor).total_compiles == 2


def test_torchs_own_per_parameter_update_is_never_told_to_reshape_and_its_direct_compile_is_told_to_drop():
    from torch.optim.swa_utils import AveragedModel

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    swa = AveragedModel(model)
    update = torch.compile(swa.update_parameters, backend="eager")  # the SWA docs' loop, its update compiled
    table = watched(lambda: [update(model) for _ in range(3)])
    ranks = [c for r in table.rows for c in r.causes if c.kind == "rank"]
    assert ranks and all(
        c.fix.startswith("none needed: torch's code passes it tensors of more than one rank") for c in ranks
    )
    (row,) = [r for r in table.rows if r.failed and r.function.startswith("update_parameters")]
    (failed,) = [c for c in row.causes if c.kind == "failed"]
    assert failed.fix.startswith(
        "none that makes it compile: update_parameters is torch's code, which Dynamo gives up on"
    )


def test_a_rank_change_in_a_library_module_the_user_calls_is_still_the_users_input():
    f = torch.compile(torch.nn.Linear(4, 4), backend="eager")  # torch's forward, called by the user
    table = watched(lambda: [f(torch.randn(2, 4)), f(torch.randn(2, 3, 4))])
    (cause,) = [c for r in table.rows for c in r.causes if c.kind == "rank"]
    assert cause.fix == "expected once per rank; reshape inputs to one rank if this keeps changing"


def test_the_value_a_chained_comparison_carries_over_its_break_is_its_middle_operand_never_the_assigned_name():
    @torch.compile(backend="eager")
    def euler_step(x, sigmas, i, s_tmin=0.05, s_tmax=50.0):  # k-diffusion's sample_euler, one step
        gamma = 0.5 if s_tmin <= sigmas[i] <= s_tmax else 0.0
        return x * (gamma + 1)

    table = watched(lambda: euler_step(torch.randn(4), torch.linspace(10, 0.1, 6), 0))
    (resumed,) = [r for r in table.rows if "resuming inside line" in r.function and "sigmas[i]" in r.signature]
    assert "gamma" not in resumed.signature, resumed.signature


def ctc(log_probs, labels, input_lengths, target_lengths):  # wav2vec2's CTC loss: padded labels flattened
    targets = labels.masked_select(labels >= 0)
    return torch.nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths)


def _ctc_inputs():
    log_probs = torch.randn(12, 2, 5).log_softmax(2)
    labels = torch.tensor([[1, 2, 3, -100], [2, 2, -100, -100]])
    return log_probs, labels, torch.tensor([12, 10]), torch.tensor([3, 2])


def test_the_capture_setting_for_a_masked_select_warns_that_an_op_it_feeds_may_break_in_its_place():
    table = watched(lambda: torch.compile(ctc, backend="eager")(*_ctc_inputs()))
    (b,) = [b for b in table.breaks if "masked_select" in b.words]
    assert "F.ctc_loss, say) breaks the graph there in its place" in b.fix

    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):  # the setting, applied
        moved = watched(lambda: torch.compile(ctc, backend="eager")(*_ctc_inputs()))
    assert not any("masked_select" in b.words for b in moved.breaks)
    assert any("ctc_loss" in b.words for b in moved.breaks), moved.to_text()


def test_one_condition_that_dynamo_guards_both_ways_is_said_once():
    from tpu_lab.compile.causes.guard_places import held

    both = held(["L['input_values'].size()[1] >= 60", "60 <= L['input_values'].size()[1]"], ())
    assert {w for w, _ in both["input_values dim 1"]} == {"input_values.size()[1] >= 60"}  # told once (_said)


def test_a_numpy_scalar_in_place_of_a_python_float_is_a_type_change_and_float_of_it_holds_one_graph():
    import numpy as np

    f = torch.compile(lambda x, temp: x / temp, backend="eager")  # Gumbel-softmax's temp from np.maximum
    x = torch.randn(4)
    table = watched(lambda: [f(x, 1.0), f(x, np.maximum(0.5, np.float64(1.0)))])
    (cause,) = [c for r in table.rows for c in r.causes if c.kind == "type"]
    assert cause.words.startswith("temp is now a NumPy float64 (the same value), was the Python float 1.0")
    assert cause.fix.startswith("pass a Python number: float(...) around the NumPy value where it is made")
    torch._dynamo.reset()
    assert watched(lambda: [f(x, 1.0), f(x, float(np.maximum(0.5, np.float64(1.0))))]).total_compiles == 1


def test_a_bound_another_on_the_same_size_implies_is_left_out():
    from tpu_lab.compile.causes.guard_places import held

    size = "L['masked_kspace'].size()[1]"
    kept = held([f"{size} >= 2", f"{size} >= 1", f"{size} >= 31", f"{size} <= 90", f"{size} < 60"], ())
    assert [w for w, _ in kept["masked_kspace dim 1"]] == [
        "masked_kspace.size()[1] >= 31",
        "masked_kspace.size()[1] < 60",
    ]


class BinarizeLinear(torch.nn.Linear):  # BinaryNet.pytorch's binarized_modules.py, trimmed
    def forward(self, input):
        if not hasattr(self.weight, "org"):
            self.weight.org = self.weight.data.clone()
        return torch.nn.functional.linear(input, self.weight.org.sign())


def test_an_attribute_the_first_call_sets_is_said_gained_and_setting_it_before_the_first_call_holds():
    layer = BinarizeLinear(8, 4)
    f = torch.compile(layer, backend="eager")
    table = watched(lambda: [f(torch.randn(2, 8)) for _ in range(3)])
    (cause,) = [c for r in table.rows for c in r.causes if c.kind == "attribute"]
    assert cause.words.startswith("self.weight gained the attribute org: the graph was compiled while it did not exist")
    assert "set self.weight.org before the first compiled call" in cause.fix
    assert table.total_compiles == 2

    fresh = BinarizeLinear(8, 4)
    fresh.weight.org = fresh.weight.data.clone()  # the fix, as printed
    g = torch.compile(fresh, backend="eager")
    assert watched(lambda: [g(torch.randn(2, 8)) for _ in range(3)]).total_compiles == 1


def test_a_parameter_then_a_plain_tensor_is_fixed_by_a_view_that_keeps_the_gradient_path():
    net = torch.nn.Linear(4, 2)  # MAML's Learner: the net's own weights, then fast weights from a step
    f = torch.compile(lambda x, w, b: torch.nn.functional.linear(x, w, b), backend="eager")
    x = torch.randn(3, 4)

    def inner_step(weights):
        grads = torch.autograd.grad(f(x, *weights).sum(), weights, create_graph=True)
        return [p - 0.1 * g for p, g in zip(weights, grads, strict=True)]

    table = watched(lambda: f(x, *inner_step(list(net.parameters()))))
    (cause, *_) = [c for r in table.rows for c in r.causes if c.kind == "tensor_type"]
    assert cause.fix.startswith("pass the same kind each time: p.view_as(p) for a plain tensor that keeps its")

    torch._dynamo.reset()
    net.zero_grad()
    fixed = watched(lambda: f(x, *inner_step([p.view_as(p) for p in net.parameters()])).sum().backward())
    assert fixed.total_compiles == 1 and net.weight.grad is not None  # one kind, and the meta-gradient flows


INFERENCE_FORWARD = """
import json, torch, tpu_lab as tl
class CachedLM(torch.nn.Module):  # LLaMA-1's Transformer: a KV cache written in place, forward in inference mode
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.cache = torch.zeros(2, 8, 4)
    def step(self, x, pos):
        self.cache[:, pos : pos + x.shape[1]] = self.lin(x)
        return self.cache[:, : pos + x.shape[1]].sum()
    @torch.inference_mode()
    def forward(self, x, pos):
        return self.step(x, pos)
plain = CachedLM()  # made first: the failed compile leaves torch's dispatcher broken in this process
step = torch.compile(plain.step, backend="aot_eager")
with tl.watch() as fixed, torch.inference_mode():  # the fix: no decorator, the mode entered outside
    step(torch.randn(2, 3, 4), 0)
model = CachedLM()
model.forward = torch.compile(model.forward, backend="aot_eager")
with tl.watch() as w:
    try:
        model(torch.randn(2, 3, 4), 0)
    except Exception as e:
        raised = str(e)[:2000]
(row,) = w.table.rows
fix = [c.fix for c in row.causes if c.kind == "failed"]
print(json.dumps([row.function, fix, raised, w.table.to_text(), fixed.table.total_compiles]))
"""


def test_a_forward_in_inference_mode_the_backend_cannot_trace_is_named_by_its_decorator_and_the_fix_holds():
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # a process of its own: torch's failure
    out = subprocess.run(  # here leaves its dispatcher broken for the rest of the process
        [sys.executable, "-c", INFERENCE_FORWARD],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": root},
    )
    function, fix, raised, text, fixed = json.loads(out.stdout.strip().splitlines()[-1])
    assert "version_counter" in raised and "wrap_inline" not in text
    assert function.startswith("CachedLM.forward via @torch.inference_mode"), function
    assert fix and fix[0].startswith("compile the function without its @torch.inference_mode() decorator and call it")
    assert fixed == 1


class DropPathNet(torch.nn.Module):  # DARTS' NetworkCIFAR: model.drop_path_prob set each epoch
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.drop_path_prob = 0.0

    def forward(self, x):
        h, drop_prob = self.lin(x), self.drop_path_prob
        if self.training and drop_prob > 0.0:  # DARTS' Cell._compute, then utils.drop_path
            keep_prob = 1.0 - drop_prob
            h = h / keep_prob * torch.empty(x.size(0), 1).bernoulli_(keep_prob)
        return h


class FlaggedDropPathNet(DropPathNet):  # the fix as printed: a Python flag for the branch, the value a tensor
    def forward(self, x):
        h = self.lin(x)
        if self.training and self.drop_path_on:
            keep_prob = 1.0 - self.drop_path_prob
            h = h / keep_prob * torch.empty(x.size(0), 1).bernoulli_(keep_prob)
        return h


def test_a_number_a_branch_compares_too_is_told_to_keep_a_flag_for_the_branch_and_the_fix_holds():
    model = DropPathNet()
    f = torch.compile(model, backend="eager")

    def epochs():
        for epoch in range(5):
            model.drop_path_prob = 0.2 * epoch / 5
            f(torch.randn(4, 4))

    table = watched(epochs)
    derived = [c for r in table.rows for c in r.causes if c.kind == "derived"]
    assert derived and all("but your code also branches on it (self.drop_path_prob > 0.0" in c.fix for c in derived)
    assert "keep a Python flag for the branch" in derived[0].fix and table.total_compiles == 5

    fixed_model = FlaggedDropPathNet()
    g = torch.compile(fixed_model, backend="eager")

    def fixed_epochs():
        for epoch in range(5):
            p = 0.2 * epoch / 5
            fixed_model.drop_path_on, fixed_model.drop_path_prob = p > 0, torch.tensor(p)
            g(torch.randn(4, 4))

    fixed = watched(fixed_epochs)
    assert fixed.total_compiles == 2 and not fixed.breaks, fixed.to_text()  # the flag's two values, no break


def test_a_size_the_users_if_compares_through_a_name_is_never_told_mark_unbacked_even_at_size_1():
    @torch.compile(backend="eager")
    def forward(tokens, start_pos: int):  # LLaMA-1's Transformer.forward: a prompt, then one token at a time
        _bsz, seqlen = tokens.shape
        h = tokens.float() * 2
        if seqlen > 1:
            h = h + torch.triu(torch.ones(seqlen, seqlen), diagonal=start_pos + 1).sum()
        return h[:, -1]

    table = watched(lambda: [forward(torch.ones(2, 6), 0), forward(torch.ones(2, 1), 6)])
    sizes = [c for r in table.rows for c in r.causes if c.kind == "size"]
    assert sizes and not any("mark_unbacked(" in c.fix for c in sizes), [c.fix for c in sizes]
    assert all("mark_unbacked is no way out here: your code compares that size" in c.fix for c in sizes)


def test_a_numpy_dropout_rate_a_schedule_sets_is_named_at_torchs_read_back_and_float_of_it_removes_the_break():
    import numpy as np

    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1))  # Early Dropout's update_dropout
    f = torch.compile(net, backend="eager")
    schedule = np.linspace(0.1, 0.0, 3)

    def train(rate=lambda r: r):
        for r in schedule:
            net[1].p = rate(r)
            f(torch.randn(2, 4))

    table = watched(train)
    (b,) = [b for b in table.breaks if "read back as a Python number" in b.words]
    assert "the number is self[1].p (an np.float64), a NumPy scalar set on the module" in b.words, b.words
    assert b.fix.startswith("set it as a Python number where your code sets it (module.p = float(value)")
    torch._dynamo.reset()
    assert watched(lambda: train(float)).breaks == ()  # the fix as printed


def test_a_slice_of_a_larger_tensor_whose_size_changed_is_said_so_never_a_layout_change_and_contiguous_holds():
    f = torch.compile(lambda group_idx: group_idx * 2, backend="eager", dynamic=False)
    table = watched(lambda: [f(torch.arange(2 * 3 * n).view(2, 3, n)[:, :, :4]) for n in (256, 384)])
    (cause,) = [c for r in table.rows for c in r.causes if c.kind == "stride"]
    assert "while its own sizes stayed: it is a view (a slice) of a larger tensor whose size changed" in cause.words
    assert cause.fix.startswith(".contiguous() where group_idx is made (after the slice)")
    torch._dynamo.reset()
    fixed = watched(lambda: [f(torch.arange(2 * 3 * n).view(2, 3, n)[:, :, :4].contiguous()) for n in (256, 384)])
    assert fixed.total_compiles == 1  # the fix as printed


def test_a_size_marked_unbacked_is_shown_and_said_as_the_users_mark():
    f = torch.compile(lambda tokens: tokens * 2, backend="eager")
    tokens = torch.ones(2, 6)
    torch._dynamo.decorators.mark_unbacked(tokens, 1)
    table = watched(lambda: f(tokens))
    (row,) = table.rows
    assert "mark_unbacked[1]" in row.signature and "as your code marked them (mark_unbacked)" in row.cause
