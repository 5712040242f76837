"""tl.watch() checked blind, rounds 65 to 67: Lookahead's step counter in AdamW's param group, read after
the training function returned, and more. Each is checked against Dynamo's own account, with the printed fix
applied where it is an action."""

import functools
import gc
import inspect
import itertools
import types

import numpy as np
import pytest
import torch
from _dynamo_oracle import watched_clean
from torch import nn

from tpu_lab.testing.dynamo_account import counting_backend


def watched(run):
    return watched_clean(run)[0]


class Lookahead(torch.optim.Optimizer):  # Smerity's sha-rnn lookahead.py, its counter in each param group
    def __init__(self, base_optimizer, alpha=0.5, k=3):
        self.optimizer = base_optimizer
        self.param_groups = self.optimizer.param_groups
        self.alpha, self.k = alpha, k
        for group in self.param_groups:
            group["step_counter"] = 0
        self.slow_weights = [[p.clone().detach() for p in group["params"]] for group in self.param_groups]
        for w in itertools.chain(*self.slow_weights):
            w.requires_grad = False
        self.defaults, self.state = base_optimizer.defaults, base_optimizer.state

    def step(self, closure=None):
        loss = self.optimizer.step()
        for group, slow_weights in zip(self.param_groups, self.slow_weights, strict=True):
            group["step_counter"] += 1
            if group["step_counter"] % self.k != 0:
                continue
            for p, q in zip(group["params"], slow_weights, strict=True):
                q.data.add_(p.data - q.data, alpha=self.alpha)
                p.data.copy_(q.data)
        return loss


def _train(steps):
    """A training function whose optimizer is freed when it returns: Dynamo then deletes the guards of every
    graph that held it, before the watch's table is read."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = Lookahead(torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-2)))
    step = torch.compile(opt.step, backend="aot_eager")
    for _ in range(steps):
        model(torch.randn(4, 4)).sum().backward()
        step()
        opt.zero_grad(set_to_none=True)


def test_a_counter_made_dynamic_in_the_last_graph_is_said_so_after_the_optimizer_is_freed():
    table = watched(lambda: (_train(5), gc.collect()))  # the optimizer's cycles freed, as a later loop frees them
    (cause,) = [c for r in table.rows for c in r.causes if "step_counter" in c.words]
    assert "Dynamo made self.param_groups[0]['step_counter'] dynamic, so later values reuse this graph" in cause.words
    assert "each new value compiles a graph" not in cause.words and cause.fix.startswith("none needed"), cause
    adam = [r for r in table.rows if r.function.startswith("step (torch/optim/adam.py")]
    assert sum(r.compiles for r in adam) == 2  # checked: values 0 to 4 compile 2 graphs, the later ones reuse


def test_contract_dynamo_deletes_a_graphs_guards_through_the_invalidation_the_watch_reads_first():
    import torch._dynamo.guards as guards

    import tpu_lab as tl

    with tl.watch():
        pass
    version = torch.__version__
    invalidate = guards.CheckFunctionManager.invalidate
    assert getattr(invalidate, "_tpu_lab", False), f"torch {version}: CheckFunctionManager.invalidate not wrapped"
    assert hasattr(guards, "DeletedGuardManagerWrapper"), f"torch {version}: no DeletedGuardManagerWrapper"


class LockedDropout(nn.Module):  # salesforce/awd-lstm-lm's locked_dropout.py, its Variable() dropped
    def forward(self, x, dropout=0.5):
        if not self.training or not dropout:
            return x
        m = x.new_empty(1, x.size(1), x.size(2)).bernoulli_(1 - dropout)
        return m / (1 - dropout) * x


def _locked_dropout(marked=False):
    net = torch.compile(LockedDropout(), backend="aot_eager")

    def run():
        x = torch.randn(5, 4, 8)
        if marked:  # the mark the size's fix would offer, applied before the first call
            torch._dynamo.maybe_mark_dynamic(x, 2)
        net(x, 0.65)  # AWD-LSTM's dropouth, then its dropouti on a wider layer
        net(torch.randn(5, 4, 12), 0.3)

    return run


def test_a_size_beside_a_baked_float_is_told_its_mark_saves_nothing_here():
    table = watched(_locked_dropout())
    (row,) = [r for r in table.rows if r.compiles and "dropout: float 0.3" in r.signature]
    (size,) = [c for c in row.causes if c.kind == "size"]
    (value,) = [c for c in row.causes if c.kind == "value"]
    assert value.count == 1 and "Python float dropout changed" in value.words  # the value counts the compile
    assert "to skip even this one" not in size.fix and "mark" not in size.fix, size.fix
    assert "needs a graph of its own anyway: a new value of dropout" in size.fix, size.fix
    marked = watched(_locked_dropout(marked=True))  # measured: the mark saves nothing for this compile
    assert marked.total_compiles == table.total_compiles == 2


class EMAModel:  # huggingface/diffusers' training_utils.py, its EMA step compiled through @torch.no_grad
    def __init__(self, parameters, decay=0.9999):
        self.shadow_params = [p.clone().detach() for p in parameters]
        self.decay, self.optimization_step = decay, 0

    @torch.no_grad()
    def step(self, parameters):
        parameters = list(parameters)
        self.optimization_step += 1
        one_minus_decay = 1 - min((1 + self.optimization_step) / (10 + self.optimization_step), self.decay)
        for s_param, param in zip(self.shadow_params, parameters, strict=True):
            s_param.sub_(one_minus_decay * (s_param - param))


def _ema(fixed=False):
    torch.manual_seed(0)
    unet = nn.Sequential(nn.Linear(4, 8), nn.SiLU(), nn.Linear(8, 4))
    ema = EMAModel(unet.parameters())
    step = torch.compile(ema.step, backend="aot_eager")

    def run():
        for _ in range(3):
            step(list(unet.parameters()) if fixed else unet.parameters())  # the printed fix: a list

    return run


def test_a_frame_given_up_after_its_break_counts_that_break_once_at_the_users_line():
    table = watched(_ema())  # the oracle: Dynamo's log less the retry it logs when it gives up on the frame
    # Dynamo logs the break, then again from torch's own wrapper as it gives up: one break, at the user's line
    source, first = inspect.getsourcelines(EMAModel.step)
    line = first + next(i for i, text in enumerate(source) if "parameters = list(parameters)" in text)
    if torch.__version__ >= "2.15":  # torch 2.13 iterates the generator instead, a break a line below, in a graph
        assert [(b.count, b.where) for b in table.breaks] == [(1, f"test_watch_blind66.py:{line}")]
        assert sum(r.failed for r in table.rows) == 1 and table.total_compiles == 0
    assert sum(b.count for b in table.breaks) == 1 and all(
        b.where.startswith("test_watch_blind66.py") for b in table.breaks
    )
    (fix,) = {b.fix for b in table.breaks}
    assert "pass a list in place of a generator (list(model.parameters()))" in fix
    fixed = watched(_ema(fixed=True))  # applied: it compiles, no break, no failure
    assert not fixed.breaks and fixed.total_compiles and not sum(r.failed for r in fixed.rows)


def penalty(net_d, real_data, fake_data, alpha):  # caogang/wgan-gp's gan_toy.py calc_gradient_penalty
    interpolates = alpha * real_data + ((1 - alpha) * fake_data)
    interpolates = torch.autograd.Variable(interpolates, requires_grad=True)
    disc_interpolates = net_d(interpolates)
    gradients = torch.autograd.grad(
        outputs=disc_interpolates, inputs=interpolates, grad_outputs=torch.ones(8), create_graph=True
    )[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean() * 0.1


def penalty_fixed(net_d, real_data, fake_data, alpha):  # the printed fix, applied
    interpolates = alpha * real_data + ((1 - alpha) * fake_data)
    interpolates = interpolates.detach().requires_grad_()
    disc_interpolates = net_d(interpolates)
    gradients = torch.autograd.grad(
        outputs=disc_interpolates, inputs=interpolates, grad_outputs=torch.ones(8), create_graph=True
    )[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean() * 0.1


def penalty_deleted(net_d, real_data, fake_data, alpha):  # the wrapper deleted, as the old fix said
    interpolates = alpha * real_data + ((1 - alpha) * fake_data)
    disc_interpolates = net_d(interpolates)
    return torch.autograd.grad(outputs=disc_interpolates, inputs=interpolates, grad_outputs=torch.ones(8))[0]


def test_a_legacy_variable_that_requires_grad_is_rewritten_as_a_new_leaf_never_deleted():
    torch.manual_seed(0)
    net_d = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1), nn.Flatten(0))
    inputs = torch.randn(8, 2), torch.randn(8, 2), torch.rand(8, 1)
    table = watched(lambda: torch.compile(penalty, backend="aot_eager")(net_d, *inputs))
    (told,) = [b for b in table.breaks if "torch.autograd.Variable" in b.words]
    assert "returns t.detach()" in told.words and "no-op" not in told.words, told.words
    fix = "write torch.autograd.Variable(interpolates, requires_grad=True) as interpolates.detach().requires_grad_()"
    assert told.fix.startswith(fix), told.fix
    fixed = watched(lambda: torch.compile(penalty_fixed, backend="aot_eager")(net_d, *inputs))
    assert not any("Variable" in b.words for b in fixed.breaks)  # applied: that break goes
    if told.fix.endswith("the break goes"):  # torch 2.15; 2.13 says it breaks at requires_grad_() instead, and does
        assert sum(b.count for b in fixed.breaks) < sum(b.count for b in table.breaks)
    else:
        assert any("requires_grad_()" in b.words for b in fixed.breaks), fixed.breaks
    got = torch.compile(penalty_fixed, backend="aot_eager")(net_d, *inputs)
    torch.testing.assert_close(got, penalty(net_d, *inputs))  # the same penalty
    with pytest.raises(RuntimeError, match="does not require grad"):  # deleting the wrapper breaks autograd.grad
        penalty_deleted(net_d, *inputs)


def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):  # timm's layers/drop.py
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class Block(nn.Module):  # timm's vision_transformer Block, its attention and MLP each one layer here
    def __init__(self, drop):
        super().__init__()
        self.attn, self.mlp = nn.Linear(4, 4), nn.Linear(4, 4)
        self.drop_path1 = DropPath(drop) if drop > 0.0 else nn.Identity()
        self.drop_path2 = DropPath(drop) if drop > 0.0 else nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.attn(x))
        return x + self.drop_path2(self.mlp(x))


def test_a_float_per_block_at_the_limit_is_never_called_a_static_int_nor_given_the_int_setting():
    torch.manual_seed(0)
    blocks = nn.Sequential(*[Block(float(d)) for d in torch.linspace(0, 0.1, 10)])  # timm's dpr rule
    for blk in blocks:
        blk.compile(backend="aot_eager")  # regional compilation

    table = watched(lambda: blocks(torch.randn(2, 4)).sum().backward())
    (limit,) = [c for r in table.rows for c in r.causes if c.kind == "limit" and c.guard]
    assert "drop_prob" in limit.words and "int attribute" not in limit.words, limit.words
    assert "allow_unspec_int_on_nn_module" not in limit.fix, limit.fix
    assert "recompile_limit above the number of Block instances" in table.to_text()


def loss_for_task(net, n_inner_iter, x_spt, y_spt):  # pytorch's maml-omniglot-transforms.py, trimmed
    params = dict(net.named_parameters())

    def compute_loss(new_params, x, y):
        return torch.nn.functional.cross_entropy(torch.func.functional_call(net, new_params, x), y)

    new_params = params
    for _ in range(n_inner_iter):
        grads = torch.func.grad(compute_loss)(new_params, x_spt, y_spt)
        new_params = {k: new_params[k] - g * 1e-1 for k, g in grads.items()}
    return compute_loss(new_params, x_spt, y_spt)


def test_a_vmapped_partial_is_named_by_its_function_and_its_inputs_by_their_parameters():
    net = nn.Linear(4, 3)
    meta_loss = torch.compile(torch.func.vmap(functools.partial(loss_for_task, net, 1)), backend="aot_eager")

    def run():
        for tasks in (4, 3):  # a last meta-batch with fewer tasks
            meta_loss(torch.randn(tasks, 5, 4), torch.randint(0, 3, (tasks, 5)))

    table = watched(run)
    names = {r.function.split(" (")[0] for r in table.rows}
    assert names == {"loss_for_task"}, names
    text = table.to_text()
    assert "x_spt, y_spt dimension 0 changed 4 -> 3" in text and "args[" not in text, text


def adapt_one_task(net, params, x_spt, y_spt, grad_of=None):  # the same file's test(): adaptation per task
    new_params = params
    for _ in range(2):
        if grad_of is None:
            spt_loss = torch.nn.functional.cross_entropy(torch.func.functional_call(net, new_params, x_spt), y_spt)
            grads = torch.autograd.grad(spt_loss, new_params.values())
        else:  # the printed fix: torch.func.grad on a function of the parameters
            grads = grad_of(new_params).values()
        new_params = {k: new_params[k] - g * 1e-1 for k, g in zip(new_params, grads, strict=True)}
    return torch.func.functional_call(net, new_params, x_spt).detach()


def test_a_gradient_only_read_is_told_to_use_torch_func_grad_which_compiles():
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    params = {k: v.detach().requires_grad_() for k, v in net.named_parameters()}
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    table = watched(lambda: torch.compile(adapt_one_task, backend="aot_eager")(net, params, x, y))
    (told,) = [b for b in table.breaks if "torch.autograd.grad" in b.words]
    assert "gradient penalty" not in told.words and "only read" in told.words, told.words
    assert told.fix.startswith("compute that gradient with torch.func.grad"), told.fix

    def loss(p):
        return torch.nn.functional.cross_entropy(torch.func.functional_call(net, p, x), y)

    def fixed_run():
        return torch.compile(adapt_one_task, backend="aot_eager")(net, params, x, y, torch.func.grad(loss))

    fixed = watched(fixed_run)  # applied: one graph, no break, no failure, the same adapted output
    assert not fixed.breaks and fixed.total_compiles == 1 and not sum(r.failed for r in fixed.rows), fixed.to_text()
    torch.testing.assert_close(fixed_run(), adapt_one_task(net, params, x, y))


def l2normalize(v, eps=1e-12):
    return v / (v.norm() + eps)


class SpectralNorm(nn.Module):  # christiancosgrove/pytorch-spectral-normalization-gan's spectral_normalization.py
    def __init__(self, module, in_place=False):
        super().__init__()
        self.module, self.in_place = module, in_place
        w = module.weight
        u = nn.Parameter(l2normalize(w.data.new(w.shape[0]).normal_(0, 1)), requires_grad=False)
        v = nn.Parameter(l2normalize(w.data.new(w.shape[1]).normal_(0, 1)), requires_grad=False)
        del module._parameters["weight"]
        module.register_parameter("weight_u", u)
        module.register_parameter("weight_v", v)
        module.register_parameter("weight_bar", nn.Parameter(w.data))

    def forward(self, x):
        u, v, w = self.module.weight_u, self.module.weight_v, self.module.weight_bar
        if self.in_place:  # the printed fix: in place under no_grad, not an assignment to .data
            with torch.no_grad():
                v.copy_(l2normalize(torch.mv(torch.t(w.data), u.data)))
                u.copy_(l2normalize(torch.mv(w.data, v.data)))
        else:
            v.data = l2normalize(torch.mv(torch.t(w.data), u.data))
            u.data = l2normalize(torch.mv(w.data, v.data))
        sigma = u.dot(w.mv(v))
        self.module.weight = w / sigma.expand_as(w)
        return self.module(x)


def test_a_data_assignment_the_backend_cannot_compile_is_named_with_its_lines_and_the_in_place_fix():
    def run(in_place):
        torch.manual_seed(0)
        net = torch.compile(SpectralNorm(nn.Linear(4, 3), in_place), backend=counting_backend)  # AOTAutograd's own

        def call():
            if in_place:
                return net(torch.randn(2, 4)).sum().backward()
            with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="set_ on a graph input"):
                net(torch.randn(2, 4))

        return call

    table = watched(run(False))
    (told,) = [c for r in table.rows for c in r.causes if c.kind == "failed"]
    source, first = inspect.getsourcelines(SpectralNorm.forward)
    lines = [first + i for i, text in enumerate(source) if ".data = " in text]
    assert f"assignment to .data (in test_watch_blind66.py: lines {lines[0]}, {lines[1]})" in told.words, told.words
    assert "cannot;" not in told.words and told.fix.startswith("update that tensor in place under torch.no_grad()")
    fixed = watched(run(True))  # applied: it compiles, nothing fails
    assert fixed.total_compiles and not sum(r.failed for r in fixed.rows), fixed.to_text()


class ContentLoss(nn.Module):  # pytorch/tutorials' neural_style_tutorial.py
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()

    def forward(self, input):
        self.loss = torch.nn.functional.mse_loss(input, self.target)
        return input


def _style_model(content_img):  # get_style_model_and_losses, one conv and its content loss
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
    model.add_module("content_loss_2", ContentLoss(model(content_img).detach()))
    return model


def _transfer(marked=False):
    def run():
        for size in (8, 12):  # a second run at another image size, its model rebuilt
            image = torch.rand(1, 3, size, size)
            model, input = _style_model(image), image.clone().requires_grad_()
            if marked:  # the printed fix, applied before each model's first call
                for dim in (2, 3):
                    torch._dynamo.maybe_mark_dynamic(input, dim)
                    torch._dynamo.maybe_mark_dynamic(model.content_loss_2.target, dim)
            torch.compile(model, backend="aot_eager")(input)

    return run


def test_a_mark_to_skip_a_recompile_names_the_tensor_the_module_keeps_which_changed_too():
    table = watched(_transfer())
    fixes = [c.fix for r in table.rows for c in r.causes if c.kind == "size" and "to skip even this one" in c.fix]
    assert fixes and all("maybe_mark_dynamic(model.content_loss_2.target, 2)" in f for f in fixes), fixes
    assert all("model being the module you compiled" in f for f in fixes), fixes
    forward = lambda t: sum(r.compiles for r in t.rows if "(backward)" not in r.function)  # noqa: E731
    assert forward(table) == 2 and forward(watched(_transfer(marked=True))) == 1  # applied: one graph


class SimCLR:  # sthalles/SimCLR's simclr.py: a trainer object per run, its info_nce_loss compiled on it
    def __init__(self, args):
        self.args = args
        self.info_nce_loss = torch.compile(self.info_nce_loss, backend="aot_eager")

    def info_nce_loss(self, features):
        logits = features @ features.T
        return logits / self.args.temperature


def test_a_number_made_dynamic_on_another_instance_gets_no_per_instance_limit_advice():
    def run():
        for temperature in (0.07, 0.5, 0.3):  # a sweep: a trainer per temperature
            SimCLR(types.SimpleNamespace(temperature=temperature)).info_nce_loss(torch.randn(4, 3))

    table = watched(run)
    told = [c for r in table.rows for c in r.causes if "temperature" in c.words]
    assert told and all("later values reuse this graph" in c.words for c in told), told
    assert "recompile_limit" not in table.to_text() and table.total_compiles == 2  # 0.3 reused the graph


def pos_embed(latent, base_size=4, patch=8):  # diffusers' PatchEmbed: its sin-cos grid rebuilt in NumPy per size
    h = latent.shape[2] // patch
    grid_h = np.arange(h, dtype=np.float32) / (h / base_size)
    return latent.mean() + torch.from_numpy(grid_h).sum()


def pos_embed_fixed(latent, base_size=4, patch=8):  # the printed fix: torch.arange in place of np.arange
    h = latent.shape[2] // patch
    grid_h = torch.arange(h, dtype=torch.float32) / (h / base_size)
    return latent.mean() + grid_h.sum()


def test_a_size_numpy_takes_as_a_number_is_held_to_its_range_and_told_to_build_the_array_with_torch():
    def run(fn):
        compiled = torch.compile(fn, backend="aot_eager")
        return lambda: [compiled(torch.randn(1, 4, size, size)) for size in (32, 48, 40, 56)]

    table = watched(run(pos_embed))
    text = table.to_text()
    assert "latent.size()[2] stays within 48 to 55" in text, text  # not "reuse" with no range: 40 and 56 compile
    assert "NumPy takes it as a Python number (np.arange)" in text and "split()" not in text, text
    assert "torch.arange in place of np.arange" in text
    assert table.total_compiles == 4 and watched(run(pos_embed_fixed)).total_compiles == 2  # applied


def test_a_batch_of_one_below_a_conv_range_is_told_as_the_0_1_rule_never_as_the_convs_bound():
    net = torch.compile(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2)), backend="aot_eager")

    def run():
        with torch.no_grad():
            for batch in (8, 5, 1):  # the short last batch, then one image
                net(torch.randn(batch, 3, 8, 8))

    table = watched(run)
    said = [c.words for r in table.rows for c in r.causes if "dimension 0 is now 1" in c.words]
    assert said and "Dynamo compiles sizes 0 and 1 as graphs of their own" in said[0], table.to_text()
    assert not any("crossed a bound" in c.words for r in table.rows for c in r.causes), table.to_text()


class CurriculumLM(nn.Module):  # Megatron-DeepSpeed's gpt_model.py: a seqlen curriculum slices the batch
    def __init__(self):
        super().__init__()
        self.emb, self.qkv = nn.Embedding(64, 8), nn.Linear(8, 24)

    def forward(self, input_ids, attention_mask, curriculum_seqlen=None):
        if curriculum_seqlen is not None and curriculum_seqlen < input_ids.size()[1]:
            input_ids = input_ids[:, :curriculum_seqlen].contiguous()
            attention_mask = attention_mask[:, :, :curriculum_seqlen, :curriculum_seqlen].contiguous()
        h = self.emb(input_ids)
        q, k, v = self.qkv(h).view(h.shape[0], h.shape[1], 3, 2, 4).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~attention_mask).sum()


def test_a_condition_every_dynamic_value_meets_is_never_told_as_a_bound():
    net = torch.compile(CurriculumLM(), backend="aot_eager")
    ids, mask = torch.randint(0, 64, (2, 32)), torch.zeros(1, 1, 32, 32, dtype=torch.bool)
    table = watched(lambda: [net(ids, mask, seqlen) for seqlen in (8, 16, 24)])  # DeepSpeed's scheduler's steps
    text = table.to_text()
    assert "curriculum_seqlen <= 31" in text, text  # the bound line 70's < sets
    assert "% (" not in text and "curriculum_seqlen*curriculum_seqlen" not in text, text  # true for every 2 and up


def get_action(states, actions, max_length=5):  # transformers' run_decision_transformer.py, its padding only
    states, actions = states[-max_length:], actions[-max_length:]
    states = torch.cat([torch.zeros(max_length - states.shape[0], 3), states], dim=0)
    actions = torch.cat([torch.zeros(max_length - actions.shape[0], 2), actions], dim=0)
    return (states.sum(1) + actions.sum(1)).cumsum(0)[-1]


def test_a_pad_to_a_maximum_length_reaching_1_is_told_as_the_0_1_rule_and_padding_outside_is_the_fix():
    def run(padded):
        act = torch.compile(get_action, backend="aot_eager")

        def episode():
            for steps in (1, 2, 4, 5):  # an episode's growing history
                states, actions = torch.randn(steps, 3), torch.randn(steps, 2)
                if padded:  # the printed fix: pad to the full length outside the compiled function
                    states = torch.cat([torch.zeros(5 - steps, 3), states])
                    actions = torch.cat([torch.zeros(5 - steps, 2), actions])
                act(states, actions)

        return episode

    table = watched(run(False))
    text = table.to_text()
    assert "5 - actions.size()[0], a size your code computes from actions (a pad to a length of 5), is now 1" in text
    assert "shares one graph" not in text and "DataLoader" not in text, text
    assert table.total_compiles == 4 and watched(run(True)).total_compiles == 1  # applied


def deepar_loss(mu, sigma, labels):  # zhykoties/TimeSeries' net.py loss_fn: a masked Gaussian likelihood
    zero_index = labels != 0
    distribution = torch.distributions.normal.Normal(mu[zero_index], sigma[zero_index])
    likelihood = distribution.log_prob(labels[zero_index])
    return -torch.mean(likelihood)


def test_a_value_carried_as_an_argument_still_to_be_used_is_named_by_it_never_by_what_the_line_assigns():
    loss = torch.compile(deepar_loss, backend="aot_eager")

    def run():
        for kept in (8, 5):  # the mask keeps 8, then 5 of the 8 steps
            labels = torch.cat([torch.rand(kept) + 1, torch.zeros(8 - kept)])
            loss(torch.randn(8), torch.rand(8) + 0.5, labels)

    table = watched(run)
    said = " ".join(c.words for r in table.rows for c in r.causes)
    assert "mu[zero_index] changed size (dimension 0: 8 -> 5)" in said, table.to_text()
    assert "distribution changed size" not in said, said  # a Normal, made after the break


@pytest.mark.slow  # three compiled BERTs
def test_a_collators_batch_that_changed_length_together_is_marked_key_by_key():
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    model = BertForMaskedLM(config).eval()
    keys = ("input_ids", "token_type_ids", "attention_mask", "labels")

    def run(marked=()):
        net = torch.compile(model, backend="aot_eager")

        def batches():  # DataCollatorForLanguageModeling pads each batch to its longest sequence
            for i, length in enumerate((14, 12)):
                batch = {k: torch.randint(0, 2, (4, length)) for k in keys}
                for k in marked if i == 0 else ():  # the printed fix, before the first call
                    torch._dynamo.maybe_mark_dynamic(batch[k], 1)
                net(**batch)

        return batches

    table = watched(run())
    fix = next(c.fix for r in table.rows for c in r.causes if c.kind == "size")
    assert all(f"torch._dynamo.maybe_mark_dynamic({k}, 1)" in fix for k in keys), fix
    forward = lambda t: sum(r.compiles for r in t.rows if "(backward)" not in r.function)  # noqa: E731
    assert forward(watched(run(keys[:1]))) == 2 and forward(watched(run(keys))) == 1  # applied: one mark saves none
