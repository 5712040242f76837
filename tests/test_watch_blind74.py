"""tl.watch() checked blind, rounds 73 to 75: a graph left empty by a break met again inside a call, and
more. Each is checked against Dynamo's own account, with the printed fix applied where it is an action."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _dynamo_oracle import watched_clean
from torch import nn

from tpu_lab.compile.watching.empty_graphs import NO_OPS
from tpu_lab.testing.dynamo_account import DynamoAccount, counting_backend

_OLD_DYNAMO = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15)


class Up(nn.Module):  # milesial/Pytorch-UNet unet/unet_parts.py: pad amounts built as tensors, read by F.pad
    def __init__(self, width, out=None):
        super().__init__()
        self.conv = nn.Conv2d(width * 2, out or width, 3, padding=1)

    def forward(self, x1, x2):
        x1 = F.interpolate(x1, scale_factor=2.0)
        diff_y = torch.tensor([x2.size()[2] - x1.size()[2]])
        diff_x = torch.tensor([x2.size()[3] - x1.size()[3]])
        x1 = F.pad(x1, [diff_x // 2, diff_x - diff_x // 2, diff_y // 2, diff_y - diff_y // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class TwoUps(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1, self.up2 = Up(4), Up(4)
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x, skip1, skip2):
        x = self.up1(x, skip1)
        x = self.up2(x, skip2)
        return self.out(x)


def test_a_graph_emptied_by_a_break_met_again_inside_a_call_is_never_said_to_have_no_break():
    # the second Up's break is the first one's place again: Dynamo logs it by that place alone, so the part of
    # forward between the two calls (an empty graph: it calls up2 at once) was told "with no graph break"
    torch.manual_seed(0)
    net = torch.compile(TwoUps(), backend=counting_backend)

    def run():
        inputs = torch.randn(1, 4, 7, 9), torch.randn(1, 4, 15, 18), torch.randn(1, 4, 17, 19)
        for t in inputs:  # sizes as a second image would make them: the pad amounts are then read back
            torch._dynamo.maybe_mark_dynamic(t, (2, 3))
        with torch.no_grad():
            net(*inputs)

    table, _ = watched_clean(run)
    said = [c.words for r in table.rows for c in r.causes]
    assert table.graph_breaks, table.to_text()
    assert [r for r in table.rows if r.function.startswith("forward after the graph break") and r.compiles]
    assert not [w for w in said if NO_OPS in w], table.to_text()


class UNet(nn.Module):  # the same repository's unet_model.py, shrunk: two Up blocks of other widths share one code
    def __init__(self):
        super().__init__()
        self.inc = nn.Conv2d(3, 4, 3, padding=1)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(4, 8, 3, padding=1))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1))
        self.up1, self.up2 = Up(8, 4), Up(4)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x = self.up1(x3, x2)
        return self.up2(x, x1)


def test_a_recompile_is_told_against_its_own_instances_graph_not_one_another_instance_made_dynamic():
    # image 3's up1 part fails the graph image 2 compiled for up1 on its sizes only, and up2's (dynamic) graph on
    # up2's parameter shapes: it is told by its own sizes, never by another instance's parameters
    torch.manual_seed(0)
    net = torch.compile(UNet(), backend=counting_backend)

    def run():
        with torch.no_grad():
            for h, w in ((32, 32), (30, 37), (33, 45)):
                net(torch.randn(1, 3, h, w))

    table, _ = watched_clean(run)
    resumed = [r for r in table.rows if r.function.startswith("forward after the graph break")]
    said = [c.words for r in resumed for c in r.causes if c.count]
    assert said and not [w for w in said if "another instance of Up" in w and "dimension 2 changed" not in w], (
        table.to_text()
    )
    assert [w for w in said if w.startswith("x2, x1 dimension 2 changed 15 -> 16")], table.to_text()


def _grid(t, step_size):  # rtqichen/torchdiffeq solvers.py: the fixed-step grid of an ODE solver
    start_time, end_time = t[0], t[-1]
    niters = torch.ceil((end_time - start_time) / step_size + 1).item()
    t_infer = torch.arange(0, niters, dtype=t.dtype, device=t.device) * step_size + start_time
    if t_infer[-1] > t[-1]:
        t_infer[-1] = t[-1]
    return t_infer


def test_a_break_dynamo_meets_again_after_restarting_its_analysis_is_one_break():
    # the dynamic recompile of the part after .item() breaks at the branch, then Dynamo restarts that attempt
    # (its pass turning Python floats into tensors) and records the same break again: one break, not two
    grid = torch.compile(_grid, backend=counting_backend)

    def run():
        for t_end, n in ((1.0, 3), (1.5, 4)):
            grid(torch.linspace(0.0, t_end, n), 0.25)

    table, _ = watched_clean(run)
    branch = [b for b in table.breaks if "data-dependent branching" in b.words]
    assert sum(b.count for b in branch) == 2, table.to_text()


def _pad_to_square(img, pad_value):  # eriklindernoren/PyTorch-YOLOv3 pytorchyolo/utils/datasets.py
    _, h, w = img.shape
    dim_diff = np.abs(h - w)
    pad1, pad2 = dim_diff // 2, dim_diff - dim_diff // 2
    pad = (0, 0, pad1, pad2) if h <= w else (pad1, pad2, 0, 0)
    return F.pad(img, pad, "constant", value=pad_value)


def _pad_to_square_fixed(img, pad_value):  # the printed fix applied
    _, h, w = img.shape
    dim_diff = abs(h - w)
    pad1, pad2 = dim_diff // 2, dim_diff - dim_diff // 2
    pad = (0, 0, pad1, pad2) if h <= w else (pad1, pad2, 0, 0)
    return F.pad(img, pad, "constant", value=pad_value)


def _letterbox(pad=_pad_to_square):
    return lambda img: F.interpolate(pad(img, 0).unsqueeze(0), size=16, mode="nearest").squeeze(0)


_IMAGES = [(20, 30), (30, 20), (24, 36), (40, 18)]


def test_a_numpy_call_on_sizes_is_named_as_holding_their_relation_and_pythons_own_twin_keeps_one_graph():
    torch.manual_seed(0)
    images = [torch.rand(3, h, w) for h, w in _IMAGES]
    compiled = torch.compile(_letterbox(), backend=counting_backend)
    table, _ = watched_clean(lambda: [compiled(i) for i in images])
    said = [c for r in table.rows for c in r.causes if "np.abs" in c.words]
    assert said and all("use Python's abs(h - w) in place of np.abs(h - w)" in c.fix for c in said), table.to_text()
    assert not [c for r in table.rows for c in r.causes if "memory layout changed" in c.words], table.to_text()

    torch._dynamo.reset()
    fixed = torch.compile(_letterbox(_pad_to_square_fixed), backend=counting_backend)
    with DynamoAccount() as account:
        outputs = [fixed(i) for i in images]
    assert len(account.compiled()) < table.total_compiles
    assert all(torch.equal(a, b) for a, b in zip(outputs, [_letterbox()(i) for i in images], strict=True))


def _deform_attn(value, value_spatial_shapes, sampling_locations, attention_weights):
    # fundamentalvision/Deformable-DETR models/ops/functions/ms_deform_attn_func.py (ms_deform_attn_core_pytorch)
    N_, _S, M_, D_ = value.shape
    _, Lq_, M_, L_, P_, _ = sampling_locations.shape
    value_list = value.split([H_ * W_ for H_, W_ in value_spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for lid_, (H_, W_) in enumerate(value_spatial_shapes):
        value_l_ = value_list[lid_].flatten(2).transpose(1, 2).reshape(N_ * M_, D_, H_, W_)
        sampling_grid_l_ = sampling_grids[:, :, :, lid_].transpose(1, 2).flatten(0, 1)
        sampling_value_list.append(F.grid_sample(value_l_, sampling_grid_l_, align_corners=False))
    attention_weights = attention_weights.transpose(1, 2).reshape(N_ * M_, 1, Lq_, L_ * P_)
    output = (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights).sum(-1).view(N_, M_ * D_, Lq_)
    return output.transpose(1, 2).contiguous()


def _deform_inputs(shapes):
    torch.manual_seed(0)
    sizes = torch.tensor(shapes)
    value = torch.randn(1, int(sizes.prod(1).sum()), 2, 4)
    return value, sizes, torch.rand(1, 3, 2, len(shapes), 2, 2), torch.rand(1, 3, 2, len(shapes), 2).softmax(-1)


def test_values_read_back_as_split_sizes_are_told_to_be_python_ints_never_capture_scalar_outputs():
    # capture_scalar_outputs (Dynamo's own hint) made the compiled backward raise there in round 74
    calls = [_deform_inputs(s) for s in ([[4, 4], [2, 2]], [[6, 4], [3, 2]])]
    compiled = torch.compile(_deform_attn, backend=counting_backend)
    table, _ = watched_clean(lambda: [compiled(*c) for c in calls])
    (split,) = [b for b in table.breaks if "value_list = value.split(" in b.fix]
    assert "capture_scalar_outputs" not in split.fix and "as Python ints (.tolist())" in split.fix, table.to_text()

    torch._dynamo.reset()  # the fix applied: the sizes as Python ints, read once outside
    with DynamoAccount() as account:
        outputs = [compiled(v, s.tolist(), loc, w) for v, s, loc, w in calls]
    assert not account.graph_breaks()
    assert all(torch.allclose(a, _deform_attn(*c)) for a, c in zip(outputs, calls, strict=True))


class _Scaled(nn.Linear):  # cloneofsimo/lora lora_diffusion/lora.py: LoraInjectedLinear's float scale
    def __init__(self):
        super().__init__(4, 4)
        self.scale = 1.0

    def forward(self, x):
        return super().forward(x) * self.scale


def test_every_guard_merged_into_one_cause_is_shown_by_the_users_names():
    # tune_lora_scale sets every injected layer's scale: eight guards in one cause, each shown as self[...]
    layers = nn.Sequential(_Scaled(), nn.ReLU(), _Scaled())
    model = torch.compile(layers, backend=counting_backend)

    def run():
        for scale in (0.0, 0.5):
            for i in (0, 2):
                layers[i].scale = scale
            model(torch.randn(2, 4))

    table, _ = watched_clean(run)
    shown = [g for r in table.rows for g in r.shown_guard.splitlines()]
    assert len([g for g in shown if "scale" in g]) == 2 and not [g for g in shown if "fn[" in g], shown


class _Filter:  # KalmanNet filters/Linear_KF.py: a plain object whose batched state is an attribute
    def __init__(self, batch):
        self.m1x_0 = torch.zeros(batch, 2, 1)
        self.F = torch.eye(2)

    def step(self, y):
        self.m1x_0 = self.F @ self.m1x_0 + y
        return self.m1x_0


def test_a_mark_on_a_plain_objects_tensor_names_that_object_never_a_module():
    def run():
        for batch in (4, 3):
            kf = _Filter(batch)
            torch.compile(kf.step, backend=counting_backend)(torch.randn(batch, 2, 1))

    table, _ = watched_clean(run)
    fixes = [c.fix for r in table.rows for c in r.causes if "maybe_mark_dynamic(" in c.fix]
    assert fixes and all("module" not in f and "obj being the _Filter whose method you compiled" in f for f in fixes), (
        table.to_text()
    )


class _Decoder(nn.Module):  # itsmesauravk/Neural-Machine-Translation... langconv_api/app/models/decoder.py
    def __init__(self, vocab=13, width=8):
        super().__init__()
        self.embedding = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.fc_out = nn.Linear(width, vocab)

    def forward(self, input, hidden):
        output, hidden = self.rnn(self.embedding(input.unsqueeze(1)), hidden)
        return self.fc_out(output.squeeze(1)), hidden


class _Seq2Seq(nn.Module):  # the same repository's seq2seq.py: teacher forcing feeds a column of trg, or top1
    def __init__(self, contiguous=False, branchless=False):
        super().__init__()
        self.decoder, self.contiguous, self.branchless = _Decoder(), contiguous, branchless

    def forward(self, trg, teacher_forcing_ratio=0.5):
        hidden = torch.zeros(1, trg.shape[0], 8)
        input = trg[:, 0].contiguous() if self.contiguous else trg[:, 0]
        for t in range(1, trg.shape[1]):
            output, hidden = self.decoder(input, hidden)
            if self.branchless:  # the printed fix applied: the draw stays a tensor, torch.where picks
                input = torch.where(torch.rand(1) < teacher_forcing_ratio, trg[:, t], output.argmax(1))
                continue
            teacher_force = torch.rand(1).item() < teacher_forcing_ratio
            column = trg[:, t].contiguous() if self.contiguous else trg[:, t]
            input = column if teacher_force else output.argmax(1)
        return output


def _translate(model):
    torch.manual_seed(0)
    compiled = torch.compile(model, backend=counting_backend)
    outputs = [compiled(torch.randint(1, 13, (2, n))) for n in (4, 4, 5)]  # training, teacher forcing half the time
    with torch.no_grad():  # then evaluation: each step feeds the argmax back
        return [o.detach() for o in outputs] + [compiled(torch.randint(1, 13, (2, 4)), 0)]


@pytest.mark.skipif(_OLD_DYNAMO, reason="torch 2.13's Dynamo gives up on a whole frame around a GRU: no graph of it")
def test_a_strided_column_then_a_tensor_of_its_own_is_told_as_a_view_and_contiguous_removes_the_compiles():
    table, _ = watched_clean(lambda: _translate(_Seq2Seq()))
    said = [c for r in table.rows for c in r.causes]
    assert not [c for c in said if "an input is now of another type" in c.words], table.to_text()
    assert [c for c in said if ".contiguous() where" in c.fix], table.to_text()

    torch._dynamo.reset()
    with DynamoAccount() as fixed:
        _translate(_Seq2Seq(contiguous=True))
    assert len(fixed.compiled()) < table.total_compiles


class _Encoder(nn.Module):  # the same repository's encoder.py: the GRU breaks the graph, so this is a frame apart
    def __init__(self):
        super().__init__()
        self.embedding, self.rnn = nn.Embedding(13, 8), nn.GRU(8, 8, batch_first=True)

    def forward(self, src):
        return self.rnn(self.embedding(src))[1]


class _Translator(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.out = _Encoder(), nn.Linear(8, 13)

    def forward(self, src):
        return self.out(self.encoder(src))


def _encode(mark=False):
    torch.manual_seed(0)
    model = _Translator()
    compiled = torch.compile(model, backend=counting_backend)
    for n in (5, 6):  # training: the batches are held by name here
        src = torch.randint(1, 13, (2, n))
        if mark:
            torch._dynamo.maybe_mark_dynamic(src, 1)
        compiled(src)
    model.eval()
    with torch.no_grad():
        compiled(torch.randint(1, 13, (2, 5)))  # evaluation's batch is made in the call: nobody holds it


@pytest.mark.skipif(_OLD_DYNAMO, reason="torch 2.13's Dynamo gives up on a whole frame around a GRU: no graph of it")
def test_a_mark_offered_on_the_callers_tensor_holds_when_a_later_compile_got_a_tensor_nobody_holds():
    table, _ = watched_clean(_encode)
    fixes = [c.fix for r in table.rows if r.function.startswith("_Encoder.forward") for c in r.causes]
    assert [f for f in fixes if "torch._dynamo.maybe_mark_dynamic(src, 1)): the same tensor" in f], table.to_text()
    assert not [f for f in fixes if "nothing to mark" in f], table.to_text()

    torch._dynamo.reset()
    with DynamoAccount() as fixed:
        _encode(mark=True)
    encoder = [
        r
        for r in fixed.compiled()
        if r.co_name == "forward" and r.co_firstlineno == _Encoder.forward.__code__.co_firstlineno
    ]
    assert len(encoder) < sum(r.compiles for r in table.rows if r.function.startswith("_Encoder.forward ("))


@pytest.mark.slow
def test_a_number_read_back_that_a_conditional_expression_tests_gets_the_control_flow_fix():
    # with allow_rnn the teacher-forcing draw is the first break, inside the loop: the frame is given up
    with torch._dynamo.config.patch(allow_rnn=True):
        table, _ = watched_clean(lambda: _translate(_Seq2Seq()))
        drawn = [b for b in table.breaks if "Tensor.item()" in b.words]
        assert drawn and all("the value decides Python control flow" in b.fix for b in drawn), table.to_text()
        assert not [c for r in table.rows for c in r.causes if "capture_scalar_outputs = True" in c.fix]
        torch._dynamo.reset()
        with DynamoAccount() as fixed:
            _translate(_Seq2Seq(branchless=True))
    assert not fixed.graph_breaks() and not fixed.failed()


def _soft_update_batch(batch):  # pranz24/pytorch-soft-actor-critic sac.py: the replay batch made a tensor
    state_batch = torch.FloatTensor(batch)
    return state_batch * 2


def _soft_update_batch_fixed(batch):  # the printed fix applied
    state_batch = torch.tensor(batch, dtype=torch.float32)
    return state_batch * 2


def test_a_legacy_typed_constructor_refusing_numpy_data_under_compile_is_told_with_a_constructor_that_works():
    batch = np.random.default_rng(0).random((4, 3))  # float64, as a replay buffer's np.stack gives

    def run():
        with pytest.raises(Exception, match="TensorOptions"):
            torch.compile(_soft_update_batch, backend=counting_backend)(batch)

    table, _ = watched_clean(run)
    (failed,) = [c for r in table.rows for c in r.causes if c.kind == "failed"]
    assert "torch.FloatTensor(...) gets float64 data here" in failed.words, table.to_text()
    assert failed.fix.startswith("build it with torch.tensor(data, dtype=torch.float32)"), failed.fix
    torch._dynamo.reset()
    fixed = torch.compile(_soft_update_batch_fixed, backend=counting_backend)(batch)
    assert torch.equal(fixed, _soft_update_batch(batch))


@pytest.mark.slow
def test_the_steps_of_two_optimizers_are_a_graph_each_never_told_to_reuse_one_instance():
    # pranz24/pytorch-soft-actor-critic sac.py: the critic's and the policy's optimizers stepped in one update
    critic, policy = nn.Linear(3, 1), nn.Linear(3, 2)
    optims = torch.optim.SGD(critic.parameters(), lr=0.1), torch.optim.SGD(policy.parameters(), lr=0.1)

    def update(model, optim, x):
        model(x).square().mean().backward()
        optim.step()
        optim.zero_grad()

    compiled = torch.compile(update, backend=counting_backend)
    table, _ = watched_clean(
        lambda: [compiled(m, o, torch.randn(4, 3)) for m, o in zip((critic, policy), optims, strict=True)]
    )
    said = [c for r in table.rows for c in r.causes if c.kind == "identity"]
    assert said and not [c for c in said if "reuse one instance" in c.fix], table.to_text()
    assert [c for c in said if c.fix.startswith("expected once per optimizer")], table.to_text()


def _label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index=None):
    # nicola-decao/pytorch-lightning-transformers-seq2seq src/utils.py (fairseq's formula)
    target = target.unsqueeze(-1)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
    if ignore_index is not None:
        pad_mask = target.eq(ignore_index)
        nll_loss.masked_fill_(pad_mask, 0.0)
        smooth_loss.masked_fill_(pad_mask, 0.0)
    eps_i = epsilon / (lprobs.size(-1) - 1)
    return ((1.0 - epsilon - eps_i) * nll_loss.sum() + eps_i * smooth_loss.sum()).item()


def _smoothed_losses(mark):
    torch.manual_seed(0)
    loss_fn = torch.compile(_label_smoothed_nll_loss, backend=counting_backend)
    out = []
    for i, kw in enumerate([dict(ignore_index=1), dict(ignore_index=1), dict(), dict(), dict(ignore_index=1)]):
        lprobs, target = torch.randn(2, 5 + i % 2, 7).log_softmax(-1), torch.randint(0, 7, (2, 5 + i % 2))
        if mark == "every" or (mark == "first" and i == 0):
            torch._dynamo.maybe_mark_dynamic(lprobs, 1)
            torch._dynamo.maybe_mark_dynamic(target, 1)
        out.append(loss_fn(lprobs, target, 0.1, **kw))
    return out


def test_a_mark_is_said_on_every_calls_input_where_the_function_compiles_a_graph_for_another_case_later():
    # the graph for ignore_index=None is compiled at a later call: a mark on the first call's tensors misses it
    table, _ = watched_clean(lambda: _smoothed_losses(None))
    marks = [c.fix for r in table.rows for c in r.causes if "maybe_mark_dynamic(lprobs, 1)" in c.fix]
    assert marks and all("on every call's input, before the call" in f for f in marks), table.to_text()

    torch._dynamo.reset()  # sizes alone: a mark on the first call's tensors is enough, and said so
    compiled = torch.compile(_label_smoothed_nll_loss, backend=counting_backend)
    sizes, _ = watched_clean(
        lambda: [compiled(torch.randn(2, n, 7).log_softmax(-1), torch.randint(0, 7, (2, n)), 0.1) for n in (5, 6)]
    )
    marks = [c.fix for r in sizes.rows for c in r.causes if "maybe_mark_dynamic(lprobs, 1)" in c.fix]
    assert marks and all("mark the dimension dynamic before the first call (" in f for f in marks), sizes.to_text()

    counts = {}
    for mark in ("first", "every"):
        torch._dynamo.reset()
        with DynamoAccount() as account:
            _smoothed_losses(mark)
        counts[mark] = len(account.compiled())
    assert counts["every"] < counts["first"], counts


class _SwitchFeedForward(nn.Module):  # labmlai/annotated_deep_learning_paper_implementations transformers/switch
    def __init__(self, n_experts=4, d_model=8):
        super().__init__()
        self.capacity_factor, self.n_experts = 1.0, n_experts
        self.experts = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(n_experts)])
        self.switch = nn.Linear(d_model, n_experts)

    def forward(self, x):
        seq_len, batch_size, d_model = x.shape
        x = x.view(-1, d_model)
        route_prob_max, routes = torch.max(self.switch(x).softmax(-1), dim=-1)
        indexes_list = [torch.eq(routes, i).nonzero(as_tuple=True)[0] for i in range(self.n_experts)]
        final_output = x.new_zeros(x.shape)
        capacity = int(self.capacity_factor * len(x) / self.n_experts)
        dropped = []
        for i in range(self.n_experts):
            if len(indexes_list[i]) <= capacity:
                continue
            dropped.append(indexes_list[i][capacity:])
            indexes_list[i] = indexes_list[i][:capacity]
        for i in range(self.n_experts):
            final_output[indexes_list[i], :] = self.experts[i](x[indexes_list[i], :])
        if dropped:
            dropped = torch.cat(dropped)
            final_output[dropped, :] = x[dropped, :]
        return (final_output * route_prob_max.view(-1, 1)).view(seq_len, batch_size, d_model)


@pytest.mark.slow
def test_a_long_condition_on_a_carried_lists_item_names_that_item_never_break_of_the_words():
    torch.manual_seed(0)
    compiled = torch.compile(_SwitchFeedForward(), backend=counting_backend)

    def run():
        with torch.no_grad():
            for step, seq_len in enumerate((6, 6, 10, 6)):
                torch.manual_seed(100 + step)
                compiled(torch.randn(seq_len, 2, 8))

    table, _ = watched_clean(run)
    said = " ".join(c.words for r in table.rows for c in r.causes)
    assert "too long to quote here" in said and "break[" not in said, table.to_text()


def test_only_a_value_read_back_among_a_sizing_calls_arguments_is_a_size_and_only_a_numpy_call_on_names_a_relation():
    from tpu_lab.compile.causes.numpy_sizes import numpy_relation_words
    from tpu_lab.compile.causes.shape_ops import sized_here

    assert sized_here("value_list = value.split([H_ * W_ for H_, W_ in value_spatial_shapes], dim=1)")
    assert sized_here("y = x.view(n.item(), -1)")
    assert not sized_here("running += F.cross_entropy(out.view(-1, V), y.view(-1)).item()")  # bookkeeping
    assert not sized_here("area = h * w * torch.empty(1).uniform_(0.3, 1.0).item()")
    relation = "L['x'].size()[1] == 10 + L['x'].size()[2]"
    assert numpy_relation_words(relation, " by your code at f.py:3", "d = np.abs(h - w)", "").fix.startswith(
        "use Python's abs(h - w) in place of np.abs(h - w)"
    )
    assert numpy_relation_words(relation, "", "y = x[:, : z.size(1)] * np.float32(0.5)", "") is None
