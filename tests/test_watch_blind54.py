"""tl.watch() checked blind, fifty-fourth round: a number whose value and type changed at once (torchvision's
focal loss with alpha=-1), a target encoder deep-copied lazily inside forward behind a caching decorator
(BYOL), a dict of a few parameters passed to functional_call (ANIL), and the conditions a dynamic graph holds
that every size meets. Each is checked against Dynamo's own account, with the printed fixes applied."""

import copy
import functools

import torch
import torch.nn.functional as F
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


def focal(inputs, targets, alpha: float = 0.25):  # torchvision.ops.sigmoid_focal_loss, trimmed
    loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    return loss.mean()


def test_a_number_whose_value_changed_with_its_type_is_told_by_its_value_never_as_a_type_change():
    f = torch.compile(focal, backend="aot_eager")
    x, t = torch.randn(8, 3), (torch.rand(8, 3) > 0.5).float()
    said = [c for r in watched(lambda: [f(x, t), f(x, t, alpha=-1)]).rows for c in r.causes]
    assert said[1:] and all(c.kind != "type" and "each type is its own graph" not in c.words for c in said), said
    assert any("alpha" in c.words and "if alpha >= 0:" in c.words for c in said[1:]), said


def singleton(cache_key):  # lucidrains/byol-pytorch's caching decorator
    def inner_fn(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            instance = getattr(self, cache_key)
            if instance is not None:
                return instance
            instance = fn(self, *args, **kwargs)
            setattr(self, cache_key, instance)
            return instance

        return wrapper

    return inner_fn


class BYOL(torch.nn.Module):  # the target encoder made lazily inside forward, as byol-pytorch does
    def __init__(self):
        super().__init__()
        self.online = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        self.target_encoder = None

    @singleton("target_encoder")
    def _get_target_encoder(self):
        return copy.deepcopy(self.online)

    def forward(self, x):
        with torch.no_grad():
            target = self._get_target_encoder()(x)
        return (self.online(x) - target).pow(2).mean()


def test_a_deepcopy_inside_forward_is_told_to_move_out_never_to_reuse_an_instance_of_its_classes():
    f = torch.compile(BYOL(), backend="aot_eager")
    table = watched(lambda: [f(torch.randn(4, 8)).backward() for _ in range(2)])
    rows = {r.function.split(" (")[0] for r in table.rows}
    assert "BYOL._get_target_encoder via @singleton" in rows and "BYOL.forward via @singleton" not in rows, rows
    newobj = [c for r in table.rows if r.function.startswith("__newobj__") for c in r.causes if c.count]
    assert newobj and all(c.fix.startswith("nothing of yours to change here") for c in newobj if c.guard), newobj
    assert any("is another class now" in c.words for c in newobj), newobj
    said = [c.words for r in table.rows for c in r.causes] + [b.words for b in table.breaks]
    assert not any("not translated" in w or "passed in)" in w for w in said), said
    copied = [b for b in table.breaks if "copy.py" in b.words]
    assert copied and all("call copy.deepcopy(...) outside the compiled function" in b.fix for b in copied), copied
    torch._dynamo.reset()
    ready = BYOL()
    ready._get_target_encoder()  # the fix, applied: the copy made before compiling
    g = torch.compile(ready, backend="aot_eager")
    fixed = watched(lambda: [g(torch.randn(4, 8)).backward() for _ in range(2)])
    assert not fixed.breaks and fixed.total_compiles < table.total_compiles


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x).relu())


@torch.compile(backend="aot_eager")
def task_loss(model, params, x):  # the torch.func docs' functional_call, compiled
    return torch.func.functional_call(model, params, (x,)).sum()


def test_the_copies_told_for_functional_call_are_of_the_dict_passed_not_of_every_parameter():
    model = Net()

    def adapt():  # ANIL: the inner loop adapts the head only
        params = {n: p for n, p in model.named_parameters() if n.startswith("head.")}
        for _ in range(2):
            grads = torch.autograd.grad(task_loss(model, params, torch.randn(3, 4)), list(params.values()))
            params = {n: p - 0.1 * g for (n, p), g in zip(params.items(), grads, strict=True)}

    said = [c for r in watched(adapt).rows for c in r.causes if c.kind == "aliasing"]
    assert said and all("{k: v.clone() for k, v in params.items()} where you build params" in c.fix for c in said)


def fir(u, k):  # an FFT convolution (S4D's kernel applied by rfft), trimmed
    n = u.shape[-1]
    return torch.fft.irfft(torch.fft.rfft(u, n=2 * n) * torch.fft.rfft(k, n=2 * n), n=2 * n)[..., :n]


def test_conditions_every_size_meets_are_not_told_and_offsets_are_folded():
    f = torch.compile(fir, backend="aot_eager")
    table = watched(lambda: [f(torch.randn(2, L), torch.randn(L)) for L in (16, 24, 40)])
    told = " ".join(c.fix for r in table.rows for c in r.causes)
    assert "reuse this graph while" in told, told
    assert ">= 0 hold" not in told and not any(f" - 1 {op} " in told for op in ("!=", "==")), told


def random_masking(x, mask_ratio):  # MAE's random masking (facebookresearch/mae models_mae.py), trimmed
    n, length, d = x.shape
    len_keep = int(length * (1 - mask_ratio))
    ids_keep = torch.argsort(torch.rand(n, length), dim=1)[:, :len_keep]
    return torch.gather(x, 1, ids_keep.unsqueeze(-1).repeat(1, 1, d))


def masking_kept(x, len_keep):  # the printed fix, applied: the kept count computed outside, passed as an int
    n, length, d = x.shape
    ids_keep = torch.argsort(torch.rand(n, length), dim=1)[:, :len_keep]
    return torch.gather(x, 1, ids_keep.unsqueeze(-1).repeat(1, 1, d))


def test_a_ratio_made_into_a_slice_length_is_told_to_pass_that_length_as_an_int_which_keeps_fewer_graphs():
    ratios, x = (0.75, 0.5, 0.6, 0.7, 0.4), torch.randn(2, 16, 4)
    f = torch.compile(random_masking, backend="aot_eager")
    table = watched(lambda: [f(x, r) for r in ratios])
    told = [c for r in table.rows for c in r.causes if c.count and "mask_ratio" in c.words]
    assert told and all(
        "compute len_keep outside the compiled function and pass it in as a Python int" in c.fix for c in told
    )
    assert not any("pass it in as a tensor" in c.fix for c in told), told
    torch._dynamo.reset()
    g = torch.compile(masking_kept, backend="aot_eager")
    kept = watched(lambda: [g(x, int(16 * (1 - r))) for r in ratios])
    assert kept.total_compiles < table.total_compiles, (kept.total_compiles, table.total_compiles)


class AverageMeter:  # pytorch/examples imagenet/main.py, trimmed
    def __init__(self):
        self.sum, self.count = 0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n


def test_a_bound_method_carried_over_a_break_names_its_object_never_the_value_beside_it():
    losses = AverageMeter()

    @torch.compile(backend="aot_eager")
    def val_step(x):
        loss = x.pow(2).mean()
        losses.update(loss.item(), x.size(0))  # the .item() break leaves losses.update on the stack
        return loss * x.size(0)

    table = watched(lambda: [val_step(torch.randn(4, 3)) for _ in range(3)])
    said = " ".join(c.words for r in table.rows for c in r.causes)
    assert "losses.sum" in said and "__self__" not in said and "loss.item()." not in said, said


def routing(u):  # a CapsNet's dynamic routing, as old tutorials write it: logits in a legacy Variable
    logits = torch.autograd.Variable(torch.zeros(*u.size()[:2]))
    return (logits.softmax(1)[..., None] * u).sum(1)


def test_a_legacy_variable_wrapper_is_named_and_told_to_be_deleted_which_removes_the_break():
    table = watched(lambda: torch.compile(routing, backend="aot_eager")(torch.randn(4, 3, 2)))
    told = [b for b in table.breaks if "torch.autograd.Variable" in b.words]
    assert told and all(b.fix.startswith("delete the Variable(...) wrapper") for b in told), table.breaks
    assert not any("_LegacyVariableBase" in b.words for b in table.breaks)
    torch._dynamo.reset()
    without = torch.compile(
        lambda u: (torch.zeros(*u.size()[:2]).softmax(1)[..., None] * u).sum(1), backend="aot_eager"
    )
    assert not watched(lambda: without(torch.randn(4, 3, 2))).breaks


class ActNorm(torch.nn.Module):  # a normalizing flow's ActNorm (Glow): data-dependent init on the first batch
    def __init__(self):
        super().__init__()
        self.s, self.t = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(2))
        self.data_dep_init_done = False

    def forward(self, x):
        if not self.data_dep_init_done:
            self.s.data, self.t.data = 1 / (x.std(0) + 1e-6), -x.mean(0) / (x.std(0) + 1e-6)
            self.data_dep_init_done = True
        return x * self.s + self.t


def test_an_init_flag_the_forward_sets_is_told_so_and_running_the_first_batch_uncompiled_saves_compiles():
    def train(model, first_uncompiled):
        if first_uncompiled:  # the printed fix, applied
            model(torch.randn(16, 2))
        f = torch.compile(model, backend="aot_eager")
        for _ in range(3):
            f(torch.randn(16, 2)).sum().backward()

    table = watched(lambda: train(ActNorm(), False))
    told = [c for r in table.rows for c in r.causes if c.kind == "flag"]
    assert told and all("ActNorm.forward" in c.words and "sets it itself" in c.words for c in told), told
    assert all("run one batch through the uncompiled model before compiling" in c.fix for c in told), told
    torch._dynamo.reset()
    assert watched(lambda: train(ActNorm(), True)).total_compiles < table.total_compiles


def test_two_models_of_different_depth_through_one_compiled_function_are_two_configurations_not_layers():
    from transformers import GPT2Config, GPT2LMHeadModel

    def tiny(n_layer):
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=16, n_embd=8, n_layer=n_layer, n_head=2)).eval()

    draft, target = tiny(1), tiny(2)  # speculative decoding's draft and target models

    @torch.compile(backend="aot_eager")
    def logits_of(model, ids):
        return model(ids).logits[:, -1]

    ids = torch.randint(0, 32, (1, 5))
    with torch.no_grad():
        table = watched(lambda: [logits_of(draft, ids), logits_of(target, ids)])
    fixes = [c.fix for r in table.rows for c in r.causes if c.count and c.kind == "value"]
    assert fixes and any(f.startswith("expected once per configuration: each") for f in fixes), fixes
    assert not any("a layer compiled on its own" in f for f in fixes), fixes


class Block(torch.nn.Module):  # a transformer block on nn.MultiheadAttention with a padding mask
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, attn_mask, key_padding_mask):
        return self.attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False)[0]


def test_a_break_at_a_library_warning_quotes_it_and_doing_what_it_says_removes_the_break():
    x, pad = torch.randn(2, 5, 8), torch.zeros(2, 5, dtype=torch.bool)
    causal = torch.triu(torch.full((5, 5), float("-inf")), 1)  # a float mask beside a bool padding mask
    f = torch.compile(Block().eval(), backend="aot_eager")
    with torch.no_grad():
        table = watched(lambda: f(x, causal, pad))
    warned = [b for b in table.breaks if "warn" in b.words]
    assert warned and all("Use same type for both instead." in b.fix for b in warned), [b.fix for b in table.breaks]
    torch._dynamo.reset()
    g = torch.compile(Block().eval(), backend="aot_eager")
    with torch.no_grad():  # the fix, applied: both masks float
        fixed = watched(lambda: g(x, causal, torch.zeros(2, 5)))
    assert not any("warn" in b.words for b in fixed.breaks), [b.words for b in fixed.breaks]


def test_a_number_stored_on_an_object_is_told_to_stay_out_of_compiled_state_never_math_exp():
    meter = AverageMeter()

    @torch.compile(backend="aot_eager")
    def step(x):
        loss = x.pow(2).mean()
        meter.update(loss.item())
        return loss * 2

    table = watched(lambda: [step(torch.randn(4)) for _ in range(3)])
    fixes = [c.fix for r in table.rows for c in r.causes if c.count and c.kind == "value"]
    assert fixes and all(
        "a number kept on an object the compiled code updates" in f and "math.exp" not in f for f in fixes
    ), fixes
