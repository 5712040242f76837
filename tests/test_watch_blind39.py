"""tl.watch() checked blind, thirty-ninth round: real-code scenarios a reviewer wrote without reading the
watcher (transformers' Adafactor with a compiled step, CleanRL's GAE loop, SASRec's NumPy inputs, ...), each
checked against Dynamo's records, with the fix as printed applied where it is one."""

import pytest
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


def adafactor_steps(opt, model, steps):
    step = torch.compile(opt.step, backend="eager")
    for _ in range(steps):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        step()
        opt.zero_grad()


def test_a_python_int_step_count_in_a_librarys_optimizer_is_named_with_the_fix_that_works(dynamo):
    optimization = pytest.importorskip("transformers.optimization")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = optimization.Adafactor(model.parameters(), lr=None, relative_step=True, warmup_init=True)
    with tl.watch() as w:
        adafactor_steps(opt, model, 5)
    check_against_dynamo(w, dynamo, also=("['step'] ==",))
    kinds = [c.kind for r in w.table for c in r.causes if c.count]
    assert kinds.count("optimizer_step") == 3 and "length" not in kinds, w.table.to_text()
    said = next(c for r in w.table for c in r.causes if c.kind == "optimizer_step")
    assert "self.state[p]['step']" in said.words and "leave this optimizer's step() uncompiled" in said.fix
    torch._dynamo.reset()
    adam = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tl.watch() as fixed:  # the fix as printed: an optimizer that keeps its step count in a tensor
        adafactor_steps(adam, model, 5)
    assert fixed.table.total_compiles < w.table.total_compiles, (fixed.table.to_text(), w.table.to_text())


def test_the_step_count_is_the_cause_said_at_the_recompile_limit_too(dynamo):
    optimization = pytest.importorskip("transformers.optimization")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = optimization.Adafactor(model.parameters(), lr=None, relative_step=True, warmup_init=True)
    with torch._dynamo.config.patch(recompile_limit=3), tl.watch() as w:
        adafactor_steps(opt, model, 6)
    check_against_dynamo(w, dynamo, also=("['step'] ==",))
    refused = [c for r in w.table for c in r.causes if c.kind == "limit"]
    assert refused and "step count" in refused[0].words and "holds items" not in refused[0].words, w.table.to_text()


def compute_gae(rewards, values, dones, gamma=0.99, lam=0.95):  # CleanRL's ppo.py, its advantage loop
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = 0
    for t in reversed(range(num_steps)):
        nonterminal = 1.0 - dones[t + 1] if t < num_steps - 1 else 1.0
        nextvalues = values[t + 1] if t < num_steps - 1 else 0.0
        delta = rewards[t] + gamma * nextvalues * nonterminal - values[t]
        advantages[t] = last = delta + gamma * lam * nonterminal * last
    return advantages


def test_a_size_a_loop_runs_over_through_a_name_is_pinned_from_its_first_change_not_none_needed(dynamo):
    f = torch.compile(compute_gae, backend="eager")
    with tl.watch() as w:
        for n in (4, 6, 8):  # rollout lengths, as a curriculum grows them
            f(torch.randn(n, 2), torch.randn(n, 2), torch.zeros(n, 2))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sized = [c for r in w.table for c in r.causes if c.kind == "size"]
    loop = compute_gae.__code__.co_firstlineno + 4
    assert len(sized) == 2 and all(f"line {loop} (for t in reversed(range(num_steps)):)" in c.words for c in sized), (
        sized
    )
    assert all("num_steps (= rewards.shape[0]" in c.words and "none needed" not in c.fix for c in sized), sized


def test_a_numpy_input_is_never_told_to_be_marked_dynamic(dynamo):
    np = pytest.importorskip("numpy")
    emb = torch.nn.Embedding(20, 4)

    def log2feats(log_seqs):  # SASRec.pytorch's model.py: NumPy ids in, tensors built inside
        seqs = emb(torch.LongTensor(log_seqs))
        return seqs * torch.BoolTensor(log_seqs != 0).unsqueeze(-1)

    f = torch.compile(log2feats, backend="eager")
    with tl.watch() as w:
        for batch in (4, 4, 3):  # the last batch is short
            f(np.random.randint(0, 20, (batch, 6)))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sized = [c for r in w.table for c in r.causes if c.kind == "size"]
    assert sized and all("maybe_mark_dynamic(log_seqs" not in c.fix for c in sized), sized
    assert all("torch.from_numpy(log_seqs)" in c.fix for c in sized), sized
    with pytest.raises(AttributeError):  # why: the array cannot carry the mark
        torch._dynamo.maybe_mark_dynamic(np.zeros((4, 6)), 0)


def wav2vec2(layerdrop):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, conv_dim=(8, 8),
        conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
        do_stable_layer_norm=True, layerdrop=layerdrop, mask_time_prob=0.0,
    )  # fmt: skip
    return transformers.Wav2Vec2Model(config).train()


@pytest.mark.slow
def test_layerdrop_inside_a_librarys_model_is_fixed_by_its_config_setting(dynamo):
    model = wav2vec2(layerdrop=0.1)
    f = torch.compile(model, backend="eager")
    with tl.watch() as w:
        f(torch.randn(1, 400))
    check_against_dynamo(w, dynamo)
    drop = [b for b in w.table.breaks if "self.config.layerdrop" in b.words]
    assert drop and all("model.config.layerdrop = 0.0" in b.fix for b in drop), w.table.breaks
    torch._dynamo.reset()
    with tl.watch() as fixed:  # the fix as printed
        torch.compile(wav2vec2(layerdrop=0.0), backend="eager")(torch.randn(1, 400))
    assert sum(b.count for b in fixed.table.breaks) < sum(b.count for b in w.table.breaks), fixed.table.breaks


class RandomFlip(torch.nn.Module):  # torchvision's RandomHorizontalFlip: the draw tested on the line
    def __init__(self, p, branchless=False):
        super().__init__()
        self.p, self.branchless = p, branchless

    def forward(self, img):
        if self.branchless:  # the fix as printed: x = torch.where(torch.rand(()) < p, f(x), x)
            return torch.where(torch.rand(()) < self.p, img.flip(-1), img)
        if torch.rand(1) < self.p:
            return img.flip(-1)
        return img


class RandomInvert(RandomFlip):
    def forward(self, img):
        if self.branchless:
            return torch.where(torch.rand(()) < self.p, 1 - img, img)
        if torch.rand(1) < self.p:
            return 1 - img
        return img


def test_every_branch_on_a_tensor_drawn_on_its_line_gets_the_same_branchless_fix_and_it_works(dynamo):
    def run(branchless):
        torch.manual_seed(0)
        aug = torch.nn.Sequential(RandomFlip(0.5, branchless), RandomInvert(0.5, branchless))
        f = torch.compile(aug, backend="eager")
        with tl.watch() as w:
            for _ in range(3):
                f(torch.rand(2, 3, 4, 4))
        return w

    w = run(branchless=False)
    check_against_dynamo(w, dynamo)
    drawn = [b for b in w.table.breaks if "data-dependent branching" in b.words]
    assert len(drawn) == 2 and all("a random tensor drawn on the line" in b.words for b in drawn), w.table.breaks
    assert len({b.fix for b in drawn}) == 1 and "torch.where(torch.rand(()) < p" in drawn[0].fix
    torch._dynamo.reset()
    fixed = run(branchless=True)
    assert not fixed.table.breaks and fixed.table.total_compiles <= w.table.total_compiles, fixed.table.to_text()


def clf_curve(preds, target):  # torchmetrics' _binary_clf_curve: an item of a data-dependent call's result
    preds, order = torch.sort(preds, descending=True)
    distinct = torch.where(preds[1:] - preds[:-1])[0]
    idxs = torch.nn.functional.pad(distinct, [0, 1], value=target.size(0) - 1)
    return torch.cumsum(target[order], 0)[idxs]


def test_an_item_of_the_carried_result_is_named_by_the_call_it_is_an_item_of(dynamo):
    f = torch.compile(clf_curve, backend="eager")
    with tl.watch() as w:
        for n in (16, 24):
            f((torch.rand(n) * 8).round(), (torch.rand(n) < 0.5).long())
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    resumed = [r for r in w.table if "after the graph break" in r.function]
    assert resumed and all(r.signature.startswith("torch.where(preds[1:] - preds[:-1])[0]: i64[") for r in resumed), (
        w.table.to_text()
    )


def sample_euler(x, sigmas, churn=0.0, s_tmax=5.0, branchless=False):  # k-diffusion's sampler, cut down
    for i in range(len(sigmas) - 1):
        if branchless:  # the fix as printed: both branches at once
            gamma = torch.where(sigmas[i] <= s_tmax, churn, 0.0)
            x = x + torch.where(gamma > 0, torch.randn_like(x) * gamma, 0.0)
        else:
            gamma = churn if sigmas[i] <= s_tmax else 0.0
            if gamma > 0:
                x = x + torch.randn_like(x) * gamma
        x = x - (sigmas[i] - sigmas[i + 1]) * torch.tanh(x)
    return x


def test_a_branch_assigned_then_branched_on_again_is_fixed_together_with_the_second_branch(dynamo):
    f = torch.compile(sample_euler, backend="eager")
    with tl.watch() as w:
        f(torch.randn(2, 3), torch.linspace(10.0, 0.1, 5), churn=0.5)
    check_against_dynamo(w, dynamo)
    (branch,) = [b for b in w.table.breaks if "data-dependent branching" in b.words]
    again = sample_euler.__code__.co_firstlineno + 7
    assert "computed from line" not in branch.words, branch  # the tested value is the input sigmas[i]
    assert f"together with line {again} (if gamma > 0:)" in branch.fix, branch
    torch._dynamo.reset()
    with tl.watch() as fixed:
        f(torch.randn(2, 3), torch.linspace(10.0, 0.1, 5), churn=0.5, branchless=True)
    assert not fixed.table.breaks and not any(r.failed for r in fixed.table), fixed.table.to_text()


def pair_energy(pos):  # SchNet's radius graph, cut down: torch.cdist picks its algorithm by the size
    d = torch.cdist(pos, pos)
    return torch.exp(-d).sum()


def test_a_bound_torchs_own_code_sets_inside_the_users_call_is_said_as_torchs(dynamo):
    f = torch.compile(pair_energy, backend="eager")
    with tl.watch() as w:
        for n in (6, 9):
            f(torch.randn(n, 3))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    said = " ".join(f"{c.words} {c.fix}" for r in w.table for c in r.causes)
    assert "<= 25 holds (from your line" in said and "a check inside torch's cdist)" in said, w.table.to_text()


def lion_update(p, grad, exp_avg, lr):  # lucidrains' lion-pytorch update_fn, called on each parameter
    p.add_(exp_avg.clone().mul_(0.9).add(grad, alpha=0.1).sign_(), alpha=-lr)
    exp_avg.mul_(0.99).add_(grad, alpha=0.01)


def test_a_per_parameter_update_is_told_parameter_shapes_are_static_not_once_per_rank(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    state = {p: torch.zeros_like(p) for p in model.parameters()}
    model(torch.randn(3, 4)).sum().backward()
    f = torch.compile(lion_update, backend="eager")
    with tl.watch() as w, torch.no_grad():
        for p in model.parameters():
            f(p, p.grad, state[p], 1e-3)
    check_against_dynamo(w, dynamo, also=("size mismatch", "rank mismatch"))
    told = [c for r in w.table for c in r.causes if c.count and c.kind in ("rank", "parameter_shape")]
    assert told and all("Dynamo keeps a parameter's shape static" in c.fix for c in told), w.table.to_text()
    assert "force_parameter_static_shapes = False" in told[0].fix and "once per rank" not in told[0].fix
    sized = [c for r in w.table for c in r.causes if c.kind == "size" and not c.count]
    assert all("needs a graph of its own anyway" in c.fix for c in sized), sized  # grad follows the parameter


def crop_params(img, scale=(0.3, 1.0)):  # torchvision's RandomResizedCrop.get_params: a retry loop on .item()
    height, width = img.shape[-2:]
    for _ in range(10):
        target_area = height * width * torch.empty(1).uniform_(scale[0], scale[1]).item()
        w = round(target_area**0.5)
        if 0 < w <= width:
            return w
    return width


def test_a_number_read_back_in_a_retry_loop_that_feeds_its_branch_is_told_to_run_outside(dynamo):
    def crop(img, w=None):
        w = crop_params(img) if w is None else w  # the fix as printed: the draw outside, its number passed in
        return torch.nn.functional.interpolate(img[..., :w, :w], size=(8, 8), mode="bilinear")

    f = torch.compile(crop, backend="eager")
    with tl.watch() as w:
        for _ in range(2):
            f(torch.rand(1, 3, 16, 16))
    check_against_dynamo(w, dynamo)
    read = [b for b in w.table.breaks if "Tensor.item()" in b.words]
    assert read and all(b.fix.startswith("the value decides Python control flow") for b in read), w.table.breaks
    assert not any("capture_scalar_outputs = True" in b.fix for b in read)
    torch._dynamo.reset()
    with tl.watch() as fixed:
        for _ in range(2):
            f(torch.rand(1, 3, 16, 16), crop_params(torch.rand(1, 3, 16, 16)))
    assert not fixed.table.breaks, fixed.table.to_text()


def attend(queries, keys, values):  # a self-attention module's own arguments: no KV cache anywhere
    return torch.softmax(queries @ keys.transpose(-1, -2), -1) @ values


def test_plain_keys_and_values_arguments_are_never_called_a_kv_cache(dynamo):
    f = torch.compile(attend, backend="eager")
    with tl.watch() as w:
        for n in (6, 9):
            x = torch.randn(1, 2, n, 4)
            f(x, x, x)
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    assert "cache" not in w.table.to_text().lower(), w.table.to_text()
