"""tl.watch() checked blind, rounds 69 to 71: loralib's MergedLinear, whose boolean-mask assignment the
backend cannot compile, and more. Each is checked against Dynamo's own account, with the printed fix
applied where it is an action."""

from pathlib import Path

import numpy as np
import pytest
import torch
from _dynamo_oracle import watched_clean
from torch import nn

from tpu_lab.testing.dynamo_account import DynamoAccount, counting_backend


def watched(run):
    return watched_clean(run)[0]


class MergedLinear(nn.Linear):  # microsoft/LoRA loralib/layers.py: q and v adapted in a fused qkv projection
    def __init__(self, width=8, r=2):
        super().__init__(width, width * 3)
        self.lora_A = nn.Parameter(torch.randn(r * 2, width) * 0.1)
        self.lora_B = nn.Parameter(torch.randn(width * 2, r) * 0.1)
        self.lora_ind = torch.zeros(width * 3, dtype=torch.bool).view(3, -1)
        self.lora_ind[[True, False, True], :] = True
        self.lora_ind = self.lora_ind.view(-1)

    def zero_pad(self, x):
        result = x.new_zeros((*x.shape[:-1], self.out_features)).view(-1, self.out_features)
        result[:, self.lora_ind] = x.reshape(-1, self.out_features // 3 * 2)
        return result.view((*x.shape[:-1], self.out_features))

    def forward(self, x):
        after_a = x @ self.lora_A.t()
        after_b = nn.functional.conv1d(after_a.transpose(-2, -1), self.lora_B.unsqueeze(-1), groups=2)
        return super().forward(x) + self.zero_pad(after_b.transpose(-2, -1))


def _lora(steps, capture=False):
    torch.manual_seed(0)
    layer = MergedLinear()
    compiled = torch.compile(layer, backend=counting_backend)
    losses = []
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=capture):
        for _ in range(steps):
            loss = compiled(torch.randn(2, 5, 8)).square().mean()
            loss.backward()
            losses.append(loss.item())
    return losses


def test_a_backend_failure_names_the_boolean_mask_line_and_its_break_is_no_break_gone_past():
    line = next(
        i for i, t in enumerate(Path(__file__).read_text().splitlines(), 1) if "result[:, self.lora_ind] =" in t
    )
    table = watched(lambda: _lora(2))
    failed = [c for r in table.rows for c in r.causes if c.kind == "failed"]
    placed = f"a boolean-mask assignment at test_watch_blind70.py:{line}"
    assert failed and all(placed in c.words for c in failed), f"torch {torch.__version__}: no gm in Dynamo's frames?"
    assert all("capture_dynamic_output_shape_ops = True" in c.fix for c in failed), failed
    assert table.breaks and all("none needed" not in b.fix for b in table.breaks), table.breaks
    assert all(f"test_watch_blind70.py:{line}" in b.words for b in table.breaks), table.breaks
    torch._dynamo.reset()
    with DynamoAccount() as account:  # the fix applied: every graph compiles, no failure, the same losses
        fixed = _lora(2, capture=True)
    assert not account.failed() and account.graphs["forward"] == 1 and account.graphs["backward"] == 1, account.graphs
    assert fixed == pytest.approx(_lora_eager(2))


def _lora_eager(steps):
    torch.manual_seed(0)
    layer = MergedLinear()
    out = []
    for _ in range(steps):
        loss = layer(torch.randn(2, 5, 8)).square().mean()
        loss.backward()
        out.append(loss.item())
    return out


SKIP = {41, 42, 43}  # ColBERT's punctuation ids (colbert/modeling/colbert.py builds them from the tokenizer)


class ColBERTMask(nn.Module):  # stanford-futuredata/ColBERT colbert/modeling/colbert.py: doc() and mask()
    def __init__(self, tensor_ops=False):
        super().__init__()
        self.linear = nn.Linear(4, 4, bias=False)
        self.embed = nn.Embedding(50, 4)
        self.tensor_ops = tensor_ops
        self.skiplist = {w: True for w in SKIP}

    def mask(self, input_ids):
        mask = [[(x not in self.skiplist) and (x != 0) for x in d] for d in input_ids.cpu().tolist()]
        return mask

    def forward(self, input_ids):
        d = self.linear(self.embed(input_ids))
        if self.tensor_ops:  # the fix the watch prints: the same mask, from the tensor with tensor ops
            mask = ((input_ids != 0) & ~torch.isin(input_ids, torch.tensor(sorted(SKIP)))).unsqueeze(2).float()
        else:
            mask = torch.tensor(self.mask(input_ids)).unsqueeze(2).float()
        return nn.functional.normalize(d * mask, p=2, dim=2)


def _colbert(batches, tensor_ops=False):
    torch.manual_seed(0)
    model = ColBERTMask(tensor_ops)
    compiled = torch.compile(model, backend=counting_backend)
    g = torch.Generator().manual_seed(1)
    return [compiled(torch.randint(0, 50, (2, 6), generator=g)) for _ in range(batches)]


def test_a_list_of_bools_from_tolist_is_said_as_data_baked_in_and_tensor_ops_keep_one_graph():
    table = watched(lambda: _colbert(3))
    said = [c for r in table.rows for c in r.causes if "items of self.mask(input_ids) changed" in c.words]
    assert len(said) == 2, table  # the second and third batches
    for items in said:
        assert items.kind == "value" and "each is a Python bool baked into the graph" in items.words, items
        assert "compute them from that tensor with tensor ops" in items.fix, items
    (tolist,) = [b for b in table.breaks if "(.tolist())" in b.words]
    assert "capture_scalar_outputs only moves the break" in tolist.fix, tolist  # the values decide `and`, `in`
    assert not [c for r in table.rows for c in r.causes if c.kind == "flag"], "each item told as a flag"
    torch._dynamo.reset()
    with DynamoAccount() as account:  # the fix applied: one graph for every batch, the same outputs
        fixed = _colbert(3, tensor_ops=True)
    assert len(account.compiled()) == 1 and not account.failed(), account.compiled()
    torch._dynamo.reset()
    for a, b in zip(fixed, _colbert(3), strict=True):
        torch.testing.assert_close(a, b)


def test_two_list_comprehensions_on_one_line_that_fail_once_each_are_not_said_to_be_retried():
    table = watched(lambda: _colbert(3))  # the outer and the inner comprehension: two code objects, one line
    (row,) = [r for r in table.rows if r.function.startswith("<listcomp>")]
    (failed,) = row.causes
    assert row.failed == 2 and failed.count == 2 and "tries to compile it again" not in failed.words, row


class ComputeLoss:  # ultralytics/yolov5 utils/loss.py: a callable object, compiled whole
    def __init__(self):
        self.gain = torch.ones(6)

    def __call__(self, p, targets):
        t = targets * self.gain
        if self.broken:  # build_targets' loop, which Dynamo cannot trace, in the original
            torch._dynamo.graph_break()
        return p.square().mean() + t[:, 2:].abs().mean()


def _losses(counts, mark=False, broken=True):
    compute = ComputeLoss()
    compute.broken = broken
    loss_fn = torch.compile(compute, backend=counting_backend)
    out = []
    for n in counts:
        targets = torch.arange(n * 6.0).view(n, 6)
        if mark:
            torch._dynamo.maybe_mark_dynamic(targets, 0)
        out.append(loss_fn(torch.ones(2, 3), targets))
    return out


def test_a_callable_objects_wrapper_row_names_its_inputs_and_itself_as_torch_compiles_wrapper():
    alone = {r.function.split(" (")[0] for r in watched(lambda: _losses([5, 8], broken=False)).rows}
    assert alone == {"ComputeLoss.__call__"}, alone  # Dynamo traces __call__ inside its wrapper: one frame
    table = watched(lambda: _losses([5, 8, 7]))
    names = {r.function for r in table.rows}
    assert any(n.startswith("ComputeLoss.__call__ via torch.compile's wrapper (") for n in names), names
    assert any(n.startswith("ComputeLoss.__call__ (") for n in names), names  # its own frame, named by its class
    said = [c for r in table.rows for c in r.causes if c.kind == "size"]
    assert said and all("args[" not in c.words + c.fix for c in said), said
    assert any("maybe_mark_dynamic(targets, 0)" in c.fix for c in said), said
    torch._dynamo.reset()
    with DynamoAccount() as plain:
        _losses([5, 8, 7])
    torch._dynamo.reset()
    with DynamoAccount() as marked:  # the fix applied: every size in the first graph of each frame
        _losses([5, 8, 7], mark=True)
    assert len(marked.compiled()) < len(plain.compiled()), (marked.compiled(), plain.compiled())


def greedy_assignment(cost):  # scipy's linear_sum_assignment as DETR forks without scipy write it
    cost = np.array(cost, dtype=np.float64, copy=True)
    rows, cols = [], []
    for _ in range(min(cost.shape)):
        i, j = np.unravel_index(np.argmin(cost), cost.shape)
        rows.append(i)
        cols.append(j)
        cost[i, :], cost[:, j] = np.inf, np.inf
    return np.array(rows), np.array(cols)


class HungarianMatcher(nn.Module):  # facebookresearch/detr models/matcher.py, shrunk
    @torch.no_grad()
    def forward(self, outputs, targets):
        c = torch.cdist(outputs, torch.cat([t["boxes"] for t in targets]).unsqueeze(0), p=1).cpu()
        sizes = [len(t["boxes"]) for t in targets]
        indices = [greedy_assignment(part[0]) for i, part in enumerate(c.split(sizes, -1))]
        return [(torch.as_tensor(i), torch.as_tensor(j)) for i, j in indices]


def _match(counts):
    matcher = torch.compile(HungarianMatcher(), backend=counting_backend)
    g = torch.Generator().manual_seed(0)
    return [
        matcher(torch.rand(1, 6, 4, generator=g), [{"boxes": torch.rand(n, 4, generator=g)} for n in ns])
        for ns in counts
    ]


def test_a_break_inside_a_comprehension_dynamo_cannot_resume_in_is_the_cause_and_counted_once_each():
    numpy_line = next(i for i, t in enumerate(Path(__file__).read_text().splitlines(), 1) if "np.unravel_index(" in t)
    table = watched(lambda: _match([[3, 2], [4, 1]]))  # the oracle checks every break Dynamo logged is counted
    (forward,) = [
        c for r in table.rows for c in r.causes if c.kind == "failed" and "HungarianMatcher.forward" in c.words
    ]
    assert "NumPy's unravel_index" in forward.words and f"test_watch_blind70.py:{numpy_line}" in forward.words
    assert "it would have to rebuild the iterator that line walks" in forward.words, forward
    assert "generator with variable mutations" not in forward.words + forward.fix, forward
    assert "@torch.compiler.disable" in forward.fix, forward
    names = {r.function.split(" (")[0] for r in table.rows}
    assert "HungarianMatcher.forward via torch.compile's wrapper" in names and not any(
        "wrap_inline" in n for n in names
    )


def test_a_per_sample_list_of_dicts_is_never_told_to_become_one_tensor():
    from tpu_lab.compile.causes.cause import Cause
    from tpu_lab.compile.causes.joined import per_sample_list

    batch = Cause("size", "x dimension 0 changed 2 -> 3", "tensor 'x' size mismatch at index 0. expected 2, actual 3")
    listed = Cause("length", "targets has a different length (was 2)", "len(targets) == 2")
    for now, tensor in (("list len=3 of dicts", False), ("list len=3 of numbers", True)):
        (joined,) = per_sample_list([batch, listed], {"targets": now, "x": "f32[3, 4]"})
        assert ("torch.tensor(targets)" in joined.fix) is tensor, (now, joined.fix)


class Mel(nn.Module):  # pytorch/audio transforms.MelSpectrogram, shrunk: its own break inside
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, waveform):
        spec = self.proj(waveform.unfold(-1, 4, 2))
        torch._dynamo.graph_break()  # torch.jit.isinstance in torchaudio's amplitude_to_DB
        return spec.square()


class LogMel(nn.Module):
    def __init__(self):
        super().__init__()
        self.mel = Mel()

    def forward(self, wav):
        return self.mel(wav).clamp(min=1e-5).log()


def _log_mel(lengths, mark=False):
    model = torch.compile(LogMel(), backend=counting_backend)
    for n in lengths:
        clip = torch.ones(2, n)
        if mark:
            torch._dynamo.maybe_mark_dynamic(clip, 1)
        model(clip)


def test_a_tensor_passed_on_unchanged_is_marked_by_the_callers_name_and_the_mark_reaches_the_inner_frame():
    table = watched(lambda: _log_mel([16, 20, 24]))
    said = [c for r in table.rows if r.function.startswith("Mel.forward") for c in r.causes if c.kind == "size"]
    assert said and all("nothing to mark" not in c.fix for c in said), said
    assert any("maybe_mark_dynamic(clip, 1)" in c.fix and "your code holds in _log_mel" in c.fix for c in said), said
    torch._dynamo.reset()
    with DynamoAccount() as plain:
        _log_mel([16, 20, 24])
    torch._dynamo.reset()
    with DynamoAccount() as marked:  # the fix applied: the caller's clip marked, every frame it reaches shares
        _log_mel([16, 20, 24], mark=True)
    assert len(marked.compiled()) < len(plain.compiled()), (len(marked.compiled()), len(plain.compiled()))


def dpo_metrics(policy, chosen, rejected, beta=0.1):  # eric-mitchell/direct-preference-optimization trainers.py
    metrics = {}
    chosen_rewards = beta * policy(chosen).sum(-1)
    rejected_rewards = beta * policy(rejected).sum(-1)
    losses = -nn.functional.logsigmoid(chosen_rewards - rejected_rewards)
    metrics["rewards_train/chosen"] = chosen_rewards.detach().cpu().numpy().tolist()
    metrics["rewards_train/rejected"] = rejected_rewards.detach().cpu().numpy().tolist()
    metrics["loss/train"] = losses.detach().cpu().numpy().tolist()
    return losses.mean(), metrics


def _dpo(steps):
    torch.manual_seed(0)
    policy = nn.Linear(4, 3)
    step = torch.compile(dpo_metrics, backend=counting_backend)
    return [step(policy, torch.randn(2, 4), torch.randn(2, 4))[0] for _ in range(steps)]


def test_logged_floats_carried_over_a_break_are_said_made_dynamic_never_baked_each_value_a_graph():
    table = watched(lambda: _dpo(4))
    said = [c for r in table.rows for c in r.causes]
    assert not [c for c in said if "each new value compiles a graph of its own" in c.words], said
    assert not [c for c in said if c.kind == "derived"], said  # metrics['loss/train'][0] is a dict's item, not math
    dynamic = [c for c in said if "Python float" in c.words]
    assert dynamic and all(c.kind == "value_dynamic" for c in dynamic), dynamic
    (rewards,) = [b for b in table.breaks if "s05" not in b.words and "chosen_rewards" in b.fix]
    assert "call .detach().cpu().numpy().tolist() outside" in rewards.fix, rewards.fix
    resumed = [r for r in table.rows if "after the graph break" in r.function]
    assert max(r.compiles for r in resumed) <= 2, resumed  # Dynamo's account: later values reuse the second graph


class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(8, 8)

    def forward(self, x):
        return nn.functional.silu(self.w1(x))


class MoE(nn.Module):  # deepseek-ai/DeepSeek-V3 inference/model.py MoE.forward, shrunk
    def __init__(self, experts=4):
        super().__init__()
        self.gate = nn.Linear(8, experts)
        self.experts = nn.ModuleList(Expert() for _ in range(experts))

    def forward(self, x):
        weights, indices = self.gate(x).softmax(-1).topk(2, dim=-1)
        y = torch.zeros_like(x)
        counts = torch.bincount(indices.flatten(), minlength=len(self.experts)).tolist()
        for i in range(len(self.experts)):
            if counts[i] == 0:
                continue
            idx, top = torch.where(indices == i)
            y[idx] += self.experts[i](x[idx]) * weights[idx, top, None]
        return y


def test_counts_read_back_then_branched_on_get_the_control_flow_fix_and_routed_rows_no_last_batch_advice():
    torch.manual_seed(0)
    moe = torch.compile(MoE().eval(), backend=counting_backend)
    with torch.no_grad():
        table = watched(lambda: [moe(torch.randn(n, 8)) for n in (14, 14, 6)])
    (tolist,) = [b for b in table.breaks if "(.tolist())" in b.words]
    assert "capture_scalar_outputs only moves the break" in tolist.fix, tolist  # `if counts[i] == 0` tests them
    fixes = [c.fix for r in table.rows if r.function.startswith("Expert.forward") for c in r.causes if c.kind == "size"]
    assert fixes and not [f for f in fixes if "last, smaller batch" in f], fixes  # an expert's rows, no batch


def l1_boxes(src, target):  # facebookresearch/detr models/detr.py SetCriterion.loss_boxes, shrunk
    return nn.functional.l1_loss(src, target, reduction="none").sum()


def test_a_size_of_one_refused_at_the_limit_is_not_expected_once_and_unbacked_marks_together_are_warned():
    step = torch.compile(l1_boxes, backend=counting_backend, recompile_limit=2)
    table = watched(lambda: [step(torch.ones(n, 4), torch.ones(n, 4)) for n in (3, 4, 1)])
    (limit,) = [c for r in table.rows for c in r.causes if c.kind == "limit" and c.guard]
    assert limit.fix.startswith("the recompile limit (2) is spent, so these inputs run uncompiled"), limit.fix
    assert "expected once" not in limit.fix, limit.fix
    assert "compares that size to a number or another size" in limit.fix, limit.fix  # l1_loss compares src, target


def test_mark_unbacked_offered_on_several_tensors_at_once_warns_that_comparing_them_breaks_the_graph():
    from tpu_lab.compile.causes.guard_words import parse, words
    from tpu_lab.compile.causes.joined import merged

    said = [
        (n, words(f, inputs={n: "i64[1]"}))
        for n in ("indices", "boxes")
        for f in parse([f"0/1: tensor 'L['{n}']' size mismatch at index 0. expected 3, actual 1"])
    ]
    (joined,) = merged(said)
    assert "mark_unbacked(indices, 0)" in joined.fix, joined.fix
    assert "marked unbacked each, sizes the code then compares or broadcasts together break" in joined.fix, joined


class DiscreteVAE(nn.Module):  # lucidrains/DALLE-pytorch dalle_pytorch.py: forward(..., return_logits, temp=None)
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 6)
        self.temperature = 0.9

    def forward(self, img, return_logits=False, temp=None):
        logits = self.encoder(img)
        if return_logits:
            return logits  # get_codebook_indices: the codebook ids, before any gumbel step
        temp = self.temperature if temp is None else temp
        return nn.functional.gumbel_softmax(logits, tau=temp, dim=1).sum()


def test_an_evaluation_call_that_differs_in_several_ways_is_not_told_a_value_for_none_keeps_one_graph():
    vae = torch.compile(DiscreteVAE(), backend=counting_backend)

    def run():
        vae(torch.randn(3, 4), temp=1.0).backward()
        with torch.no_grad():
            vae(torch.randn(3, 4), return_logits=True)

    said = [c for r in watched(run).rows for c in r.causes if c.kind in ("none", "type")]
    assert said and all("to keep one graph" not in c.fix for c in said), said
    assert any("saves nothing here: this compile needs a graph of its own anyway" in c.fix for c in said), said


def test_a_size_relation_set_by_a_line_with_no_branch_is_not_told_to_become_torch_cond():
    from tpu_lab.compile.causes.guard_words import parse, words

    here = Path(__file__)
    for code, cond in (("attn_score = AC + BD", False), ("if klen > qlen:", True)):
        guard = f"0/0: (6 + L['mems'].size()[0]) == L['r'].size()[0]  # {code}  # {here}:12 in forward"
        (said,) = [words(f) for f in parse([guard])]
        assert said.kind == "specialised" and ("torch.cond" in said.fix) is cond, (code, said.fix)


def test_a_global_registry_keyed_by_type_is_expected_once_never_a_cache_per_size():
    from tpu_lab.compile.causes.guard_words import parse, words

    guard = "0/1: not ___dict_contains(<class 'torch.nn.parameter.Parameter'>, G['einops']._backends._type2backend)"
    (said,) = [words(f) for f in parse([guard])]
    assert "a registry keyed by type" in said.words and "per new size" not in said.words, said
    assert said.fix.startswith("expected once per type"), said.fix


def cfg_step(latents, guidance_scale):  # diffusers' classifier-free guidance: on while guidance_scale > 1
    x = torch.cat([latents] * 2) if guidance_scale > 1.0 else latents
    return x.sum() * guidance_scale


def test_a_float_bound_is_said_as_the_guard_holds_it_never_as_an_int_bound():
    step = torch.compile(cfg_step, backend=counting_backend)
    table = watched(lambda: [step(torch.ones(2, 3), s) for s in (7.5, 5.0)])
    said = [c for r in table.rows for c in r.causes if "guidance_scale dynamic" in c.words]
    assert said and all("guidance_scale > 1.0 holds" in c.words for c in said), said
    assert not [c for c in said if ">= 2" in c.words + c.fix], said
    with DynamoAccount() as later:  # 1.5 passes `> 1.0`: the graph is reused, as said
        step(torch.ones(2, 3), 1.5)
    assert not later.compiled(), later.compiled()


def beam_step(scores, beams, width=2):  # a hand-written beam search's bookkeeping (length-penalised sort)
    candidates = []
    for k in range(len(beams)):
        for j in range(width):
            candidates.append((beams[k] + [j], scores[k, j].item()))
    return sorted(candidates, key=lambda c: c[1] / len(c[0]) ** 0.6, reverse=True)[:width]


def test_values_read_back_that_a_sort_orders_get_the_control_flow_fix_never_capture_scalar_outputs():
    step = torch.compile(beam_step, backend=counting_backend)
    table = watched(lambda: step(torch.rand(2, 2), [[0], [1]]))
    said = [b.fix for b in table.breaks] + [c.fix for r in table.rows for c in r.causes if c.kind == "failed"]
    assert said and all("capture_scalar_outputs only moves the break" in f for f in said), said


def fcos_targets(gt_labels, points):  # open-mmlab mmdetection fcos_head.py _get_target_single, shrunk
    num_gts = gt_labels.size(0)
    if num_gts == 0:
        return points.new_zeros(points.size(0))
    return points.sum(-1) + gt_labels.float().mean()


def test_a_size_the_code_compares_through_a_name_is_never_offered_mark_unbacked():
    step = torch.compile(fcos_targets, backend=counting_backend)
    table = watched(lambda: [step(torch.ones(n), torch.ones(5, 2)) for n in (3, 5, 0)])
    fixes = [c.fix for r in table.rows for c in r.causes if c.kind == "size_one"]
    assert fixes and all("mark_unbacked(" not in f and "your code compares that size" in f for f in fixes), fixes


def fcos_decode(scores, img_shape):  # mmdetection's _get_bboxes_single: the image size's ints beside the sizes
    return (scores * scores.new_tensor(img_shape[:2])).clamp(max=img_shape[1]).sum()


def test_a_size_beside_a_numbers_first_change_is_told_its_mark_saves_nothing_in_that_compile():
    step = torch.compile(fcos_decode, backend=counting_backend)
    table = watched(lambda: [step(torch.ones(n, 2), [32, 8 * n, 3]) for n in (4, 6, 8)])
    sizes = [c for r in table.rows for c in r.causes if c.kind == "size" and "dimension 0 changed 4 -> 6" in c.words]
    assert sizes and all("this compile needs a graph of its own anyway" in c.fix for c in sizes), sizes


class Up(nn.Module):  # milesial/Pytorch-UNet unet/unet_parts.py Up.forward: pad amounts built as tensors
    def __init__(self, as_ints=False):
        super().__init__()
        self.up = nn.ConvTranspose2d(2, 2, kernel_size=2, stride=2)
        self.as_ints = as_ints

    def forward(self, x1, x2):
        x1 = self.up(x1)
        if self.as_ints:  # the printed fix: Python ints, which Dynamo keeps as symbolic sizes
            diffY = x2.size()[2] - x1.size()[2]
            diffX = x2.size()[3] - x1.size()[3]
        else:
            diffY = torch.tensor([x2.size()[2] - x1.size()[2]])
            diffX = torch.tensor([x2.size()[3] - x1.size()[3]])
        x1 = nn.functional.pad(x1, [diffX // 2, diffX - diffX // 2,
                                    diffY // 2, diffY - diffY // 2])  # fmt: skip
        return torch.cat([x2, x1], dim=1)


def _unet(as_ints=False):
    up = torch.compile(Up(as_ints), backend=counting_backend)
    torch.manual_seed(0)
    return [up(torch.randn(1, 2, h // 2, w // 2), torch.randn(1, 2, h, w)) for h, w in ((9, 12), (11, 14))]


def test_pad_amounts_built_as_tensors_from_sizes_are_told_to_stay_ints_which_removes_the_break():
    table = watched(_unet)
    said = [b for b in table.breaks if "read back as a Python number" in b.words]
    assert said and all("diffY and diffX are tensors your code builds from sizes" in b.fix for b in said), said
    assert all("keep them Python ints (diffY = x2.size()[2] - x1.size()[2]" in b.fix for b in said), said
    every = " ".join(c.fix for r in table.rows for c in r.causes) + " ".join(b.fix for b in table.breaks)
    assert "___stack0" not in every and "torch_dynamo_resume" not in every, every
    torch._dynamo.reset()
    with DynamoAccount() as fixed:  # the fix applied: no break, and the same outputs
        out = _unet(as_ints=True)
    assert not fixed.graph_breaks() and not fixed.failed(), fixed.graph_breaks()
    torch._dynamo.reset()
    for a, b in zip(out, _unet(), strict=True):
        torch.testing.assert_close(a, b)


class GBN(nn.Module):  # dreamquark-ai/tabnet tab_network.py GBN: ghost batch norm over np.ceil(...) chunks
    def __init__(self, virtual_batch_size=8):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.virtual_batch_size = virtual_batch_size

    def forward(self, x):
        chunks = x.chunk(int(np.ceil(x.shape[0] / self.virtual_batch_size)), 0)
        return torch.cat([self.bn(x_) for x_ in chunks], dim=0)


def test_a_count_numpy_computes_from_a_size_is_never_told_torch_ceil_nor_that_later_sizes_reuse_the_graph():
    gbn = torch.compile(GBN(), backend=counting_backend)
    table = watched(lambda: [gbn(torch.randn(n, 4)) for n in (32, 20, 12)])
    said = [c for r in table.rows for c in r.causes if c.kind in ("size", "size_value")]
    assert said and not [c for c in said if "torch.ceil" in c.fix], said  # torch.ceil(float) raises TypeError
    sizes = [c for c in said if c.kind == "size"]
    assert sizes and all("later sizes reuse this graph" not in c.fix for c in sizes), sizes


def test_a_modules_container_filled_at_the_first_call_is_expected_once_not_a_graph_per_length():
    from tpu_lab.compile.causes.guard_words import parse, words

    # lucidrains/reformer-pytorch: LSHAttention._cache, filled by cache_method_decorator at the first call
    (f,) = parse(["0/0: not L['self']._cache"])
    filled = words(f, inputs={"self": "LSHAttention (train)"})
    assert "holds items now" in filled.words, filled
    assert filled.fix.startswith("expected once: the first call fills it"), filled.fix
    assert "torch.compiler.disable" not in filled.fix, filled.fix  # a helper there breaks the graph each call
