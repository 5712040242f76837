"""tl.watch() checked blind, rounds 49 to 51: NumPy where Python numbers were meant (Informer's ln(L), TRPO's
np.prod of a shape, the numpy extension tutorial's emulated dtype), a list tested with `in` (DINOv2), a mark
for a size that changes in evaluation only, sizes pinned by torch's own checks, a tensor subclass's
__torch_function__, a module's int attribute, a bool predicate, a library's cache, a branch's own side, an op's
int from a global, one Optional per item, a model cast with the default dtype, a container per instance and
marks told together. Each is checked against Dynamo's own account, with the printed fixes applied."""

import logging
import math
import warnings

import numpy as np
import torch
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


class Blocks(torch.nn.Module):  # facebookresearch/dinov2's _get_intermediate_layers_not_chunked, trimmed
    def __init__(self, depth=6):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(depth))

    def forward(self, x, n=1):
        output, total = [], len(self.blocks)
        blocks_to_take = range(total - n, total) if isinstance(n, int) else n
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if i in blocks_to_take:
                output.append(x)
        return tuple(output)


def test_a_list_tested_with_in_is_told_against_the_list_graph_and_each_set_of_values_is_its_own_graph():
    f = torch.compile(Blocks(), backend="eager")
    x = torch.randn(2, 8)
    table = watched(lambda: [f(x, n=n) for n in (1, 4, [2, 5], [1, 4], [0, 3])])
    told = [r.causes[0] for r in table.rows]
    fourth = told[3]  # [1, 4] after [2, 5]: the list graph, never the int one
    assert "is now a list" not in fourth.words and "n[0] changed (was 2)" in fourth.words, fourth
    if table.total_compiles == 4:  # torch 2.13 guards no membership: [0, 3] reuses the graph, as the words say
        assert "so later values reuse this graph" in fourth.words, fourth.words
        return
    assert fourth.kind == "members" and "but the graph holds which values n has (1, 4 in n" in fourth.words, fourth
    assert "reuse this graph" not in fourth.words, fourth.words
    fifth = told[4]
    assert fifth.kind == "members" and fifth.words.startswith("0 and 3 are now in n; 1 and 4 are no longer"), fifth
    assert fifth.fix.startswith("expected once per set of values n holds"), fifth.fix


class Classifier(torch.nn.Module):  # the PyTorch nn.Transformer tutorial's encoder, trimmed
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 16)
        self.drop = torch.nn.Dropout(0.1)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, tokens):
        return self.head(self.drop(self.emb(tokens)).mean(1))


def train_then_evaluate(model, compiled, mark=None):
    model.train()
    for _ in range(2):
        compiled(torch.randint(0, 32, (4, 12))).sum().backward()
    model.eval()
    with torch.no_grad():
        for length in (12, 20, 16):
            tokens = torch.randint(0, 32, (4, length))
            if mark is not None and length == 12:
                mark(tokens)
            compiled(tokens)


def test_a_mark_for_a_size_that_changes_only_in_evaluation_goes_on_the_first_evaluation_call():
    model = Classifier()
    table = watched(lambda: train_then_evaluate(model, torch.compile(model, backend="aot_eager")))
    sized = [c for r in table.rows for c in r.causes if c.kind == "size"]
    assert sized and all("before the first call in eval mode with grad mode off (" in c.fix for c in sized), sized
    torch._dynamo.reset()
    mark = lambda t: torch._dynamo.maybe_mark_dynamic(t, 1)  # noqa: E731 (the fix as printed, where it says)
    fixed = watched(lambda: train_then_evaluate(model, torch.compile(model, backend="aot_eager"), mark))
    assert fixed.total_compiles == table.total_compiles - 1, fixed.to_text()


def sampled_scores(q, k, math_fix=False):  # Informer's ProbAttention: sample c * ln(L_K) keys per query
    L_K = k.shape[1]
    u = 2 * math.ceil(math.log(L_K)) if math_fix else 2 * np.ceil(np.log(L_K)).astype("int").item()
    return q @ k[:, :u].transpose(1, 2)


def test_numpy_on_a_size_read_back_with_item_is_named_and_the_math_module_fix_removes_the_break():
    f = torch.compile(sampled_scores, backend="eager")
    table = watched(lambda: [f(torch.randn(2, 8, 4), torch.randn(2, n, 4)) for n in (16, 32)])
    assert table.breaks and all(
        b.words.startswith("NumPy on a number here, read back as a Python number") for b in table.breaks
    )
    assert all("math.ceil(math.log(n))" in b.fix for b in table.breaks), table.breaks
    fixed = watched(lambda: [f(torch.randn(2, 8, 4), torch.randn(2, n, 4), True) for n in (16, 32)])
    assert not fixed.breaks, fixed.to_text()


class NumpyFFT(torch.autograd.Function):  # the "Creating Extensions Using numpy and SciPy" tutorial's BadFFTFunction
    @staticmethod
    def forward(ctx, input):
        numpy_input = input.detach().numpy()
        result = abs(np.fft.rfft2(numpy_input))
        return input.new(result)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.new(np.fft.irfft2(grad_output.numpy()))


def spectrum(x):
    return NumpyFFT.apply(x).sum()


def test_numpys_emulated_dtype_failing_only_under_compile_is_said_so_and_keeping_numpy_out_compiles():
    f = torch.compile(spectrum, backend="eager")
    x = torch.randn(8, 8, requires_grad=True)
    spectrum(x).backward()  # eagerly it runs: NumPy keeps float32
    table = watched(lambda: _raised(lambda: f(x)))
    failed = [c for r in table.rows for c in r.causes if c.kind == "failed"]
    told = [c for c in failed if "Dynamo traces NumPy calls with torch ops" in c.words]
    assert told and all("@torch.compiler.disable" in c.fix for c in told), table.to_text()
    assert not any("double check" in c.fix for c in failed), table.to_text()
    torch._dynamo.reset()
    with torch._dynamo.config.patch(trace_numpy=False):  # the fix as printed
        fixed = watched(lambda: torch.compile(spectrum, backend="eager")(x).backward())
    assert not [c for r in fixed.rows for c in r.causes if c.kind == "failed"], fixed.to_text()


def _raised(call):
    try:
        call()
    except Exception as e:  # the compile's failure raises out of the call, as the user meets it
        return e
    raise AssertionError("the compiled call did not raise")


def psd_safe_cholesky(A, max_tries=3):  # linear_operator's utils/cholesky.py, trimmed: jitter until it factors
    L, info = torch.linalg.cholesky_ex(A)
    if not torch.any(info):
        return L
    Aprime, jitter_prev = A.clone(), 0.0
    for i in range(max_tries):
        jitter_new = 1e-6 * (10**i)
        Aprime.diagonal(dim1=-2, dim2=-1).add_(jitter_new - jitter_prev)
        jitter_prev = jitter_new
        warnings.warn(f"A not p.d., added jitter of {jitter_new:.1e} to the diagonal", RuntimeWarning)  # noqa: B028
        L, info = torch.linalg.cholesky_ex(Aprime)
        if not torch.any(info):
            return L
    return L


def test_a_warning_dynamo_logs_at_another_line_of_the_loop_is_never_told_to_be_reordered():
    f = torch.compile(psd_safe_cholesky, backend="eager")
    singular = -torch.eye(4)  # no jitter this small makes it factor: the loop runs every pass, and warns on each
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = watched(lambda: f(singular))
    warned = [b for b in table.breaks if "_warnings.warn" in b.words]
    assert len({b.where for b in warned}) > 1, table.to_text()  # Dynamo logs the later passes at another line
    assert not any("reorderable_logging_functions" in b.fix for b in warned), warned


class DecisionTransformer(torch.torch.nn.Module):  # kzl/decision-transformer, get_action over a growing history
    def __init__(self, state_dim=3, act_dim=2, hidden=16, max_length=4, max_ep_len=64):
        super().__init__()
        self.state_dim, self.act_dim, self.max_length = state_dim, act_dim, max_length
        self.embed_timestep = torch.nn.Embedding(max_ep_len, hidden)
        self.embed_return = torch.nn.Linear(1, hidden)
        self.embed_state = torch.nn.Linear(state_dim, hidden)
        self.embed_state = torch.nn.Linear(state_dim, hidden)
        self.embed_action = torch.nn.Linear(act_dim, hidden)
        self.attn = torch.nn.MultiheadAttention(hidden, 2, batch_first=True)
        self.predict_action = torch.nn.Sequential(torch.nn.Linear(hidden, act_dim), torch.nn.Tanh())

    def forward(self, states, actions, returns_to_go, timesteps, attention_mask):
        B, T = states.shape[0], states.shape[1]
        t = self.embed_timestep(timesteps)
        tokens = (
            torch.stack(
                (self.embed_return(returns_to_go) + t, self.embed_state(states) + t, self.embed_action(actions) + t),
                dim=1,
            )
            .permute(0, 2, 1, 3)
            .reshape(B, 3 * T, -1)
        )
        mask = torch.stack((attention_mask,) * 3, dim=1).permute(0, 2, 1).reshape(B, 3 * T)
        h, _ = self.attn(tokens, tokens, tokens, key_padding_mask=(mask == 0))
        h = h.reshape(B, T, 3, -1).permute(0, 2, 1, 3)
        return self.predict_action(h[:, 1])

    def get_action(self, states, actions, rewards, returns_to_go, timesteps):
        states = states.reshape(1, -1, self.state_dim)
        actions = actions.reshape(1, -1, self.act_dim)
        returns_to_go = returns_to_go.reshape(1, -1, 1)
        timesteps = timesteps.reshape(1, -1)
        if self.max_length is not None:
            states = states[:, -self.max_length :]
            actions = actions[:, -self.max_length :]
            returns_to_go = returns_to_go[:, -self.max_length :]
            timesteps = timesteps[:, -self.max_length :]
            attention_mask = torch.cat([torch.zeros(self.max_length - states.shape[1]), torch.ones(states.shape[1])])
            attention_mask = attention_mask.to(dtype=torch.long, device=states.device).reshape(1, -1)
            states = torch.cat(
                [torch.zeros((states.shape[0], self.max_length - states.shape[1], self.state_dim)), states], dim=1
            )
            actions = torch.cat(
                [torch.zeros((actions.shape[0], self.max_length - actions.shape[1], self.act_dim)), actions], dim=1
            )
            returns_to_go = torch.cat(
                [torch.zeros((returns_to_go.shape[0], self.max_length - returns_to_go.shape[1], 1)), returns_to_go],
                dim=1,
            )
            timesteps = torch.cat(
                [torch.zeros((timesteps.shape[0], self.max_length - timesteps.shape[1]), dtype=torch.long), timesteps],
                dim=1,
            )
        else:
            attention_mask = None
        action_preds = self.forward(states, actions, returns_to_go, timesteps, attention_mask=attention_mask)
        return action_preds[0, -1]


def test_a_size_left_one_value_by_torchs_checks_is_said_so_and_padding_before_the_call_keeps_one_graph():
    model = DecisionTransformer().eval()
    f = torch.compile(model.get_action, backend="aot_eager")
    s, a, r = torch.randn(9, 3), torch.randn(9, 2), torch.randn(9, 1)
    step = torch.arange(9).reshape(1, -1)

    def last4(x, t, dim=0):  # the fix, applied: the history cut and padded to max_length before the call
        x = x.narrow(dim, max(t - 4, 0), min(t, 4))
        return torch.cat([torch.zeros_like(x.narrow(dim, 0, 1)).repeat_interleave(4 - x.shape[dim], dim), x], dim)

    def run(pad=False):
        with torch.no_grad():
            for t in range(1, 8):
                args = (s[:t], a[:t], r[:t, 0], r[:t].reshape(1, -1), step[:, :t])
                f(*(last4(x, t, d) for x, d in zip(args, (0, 0, 0, 1, 1), strict=True)) if pad else args)

    table = watched(run)
    pinned = [c for r in table.rows for c in r.causes if "leave only" in c.words]
    assert pinned and all("as a plain Python number" not in c.words for c in pinned), table.to_text()
    assert all(c.fix.startswith("pad to one size before the call") for c in pinned), pinned
    later = [c for r in table.rows for c in r.causes if c.fix.startswith("none needed: Dynamo made states dim 0")]
    assert later and all("a mark before the first call saves nothing" in c.fix for c in later), later
    torch._dynamo.reset()
    fixed = watched(lambda: run(pad=True))
    assert fixed.total_compiles == 1, fixed.to_text()


def jvp_penalty(net, x, v):  # the forward-mode AD tutorial: a Jacobian-vector product through a module
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        out = net(fwAD.make_dual(x, v))
        return fwAD.unpack_dual(out).tangent.pow(2).mean()


def test_a_size_pinned_inside_torchs_own_code_names_it_and_never_asks_to_edit_the_users_line():
    net = torch.nn.Linear(4, 4)
    f = torch.compile(jvp_penalty, backend="eager")
    table = watched(lambda: [f(net, torch.randn(n, 4), torch.randn(n, 4)) for n in (8, 12, 16)])
    inside = [c for r in table.rows for c in r.causes if "inside torch (torch/nn/modules/linear.py" in c.words]
    assert inside and all("torch.arange" not in c.fix and c.fix.startswith("pad to one size") for c in inside), inside


def test_a_bound_on_a_multiple_of_a_number_is_said_on_the_number():
    from tpu_lab.compile.causes.guard_places import held

    kept = held(["32*L['L_Q'] >= 2", "3*L['n'] > 7"], ())
    assert [w for w, _ in kept["L_Q"]] == ["L_Q >= 1"] and [w for w, _ in kept["n"]] == ["n >= 3"], kept


_optrace = logging.getLogger("tpu_lab.tests.optrace")


class LoggingTensor(torch.Tensor):  # PyTorch's "Extending torch" notes: a subclass that logs each op
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _optrace.info(f"func: {func.__name__}")
        return super().__torch_function__(func, types, args, kwargs or {})


_mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))


def logged_block(x):
    return x + _mlp(torch.layer_norm(x, (8,)))


def test_a_torch_function_compiled_on_its_own_is_told_as_one_graph_per_op_with_the_break_as_the_fix():
    block = torch.compile(logged_block, backend="eager")  # torch 2.13's aot_eager fails on the subclass
    x = torch.randn(4, 8).as_subclass(LoggingTensor)
    table = watched(lambda: block(x))
    own = [c for r in table.rows if "__torch_function__" in r.function for c in r.causes if c.kind != "first"]
    assert own and {c.kind for c in own} <= {"torch_function", "backward", "dynamic"}, table.to_text()
    assert all("reuse one instance" not in c.fix and "detach()" not in c.fix for c in own), own
    torch._dynamo.reset()
    with torch._dynamo.config.patch(ignore_logging_functions={_optrace.info}):  # the break's fix, as printed
        fixed = watched(lambda: block(x))
    assert fixed.total_compiles < table.total_compiles and not fixed.breaks, fixed.to_text()


class Transposed(torch.nn.Module):  # sparsemax's forward, trimmed: its dim attribute is transpose's
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.transpose(0, self.dim).softmax(0).transpose(0, self.dim)


def normalise(sm, scores):
    return sm(scores)


def test_an_int_attribute_of_a_module_passed_in_is_never_told_to_be_a_tensor():
    f = torch.compile(normalise, backend="aot_eager")
    table = watched(lambda: [f(Transposed(d), torch.randn(4, 6)) for d in (-1, 1)])
    (held,) = [c for r in table.rows for c in r.causes if "sm.dim" in c.words]
    assert "Dynamo keeps an nn.Module's int attribute static" in held.words, held.words
    assert "torch.tensor(" not in held.fix and "allow_unspec_int_on_nn_module" in held.fix, held.fix
    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_unspec_int_on_nn_module=True):  # the fix as printed: never worse
        fixed = watched(lambda: [f(Transposed(d), torch.randn(4, 6)) for d in (-1, 1)])
    failed = [c for r in fixed.rows for c in r.causes if c.kind == "failed"]
    assert not failed and not fixed.breaks and fixed.total_compiles <= table.total_compiles, fixed.to_text()


def routed(x, pred):  # torch.cond's docs: a data-dependent predicate, later passed as a Python bool
    return torch.cond(pred, lambda x: x.sin(), lambda x: x.cos(), (x,))


def test_a_bool_in_place_of_a_tensor_predicate_is_a_graph_per_value_never_made_dynamic():
    f = torch.compile(routed, backend="eager")
    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that a Python constant predicate specialises
        table = watched(lambda: [f(x, x.sum() > 0), f(x, True), f(x, False)])
    (typed,) = [c for r in table.rows for c in r.causes if c.kind == "tensor_type"]
    assert "reuse this graph" not in typed.words and "each value is its own graph" in typed.words, typed.words
    assert table.total_compiles == 3  # and False was a graph of its own, as said
    torch._dynamo.reset()
    fixed = watched(lambda: [f(x, x.sum() > 0), f(x, torch.tensor(True)), f(x, torch.tensor(False))])
    assert fixed.total_compiles == 1, fixed.to_text()  # the fix as printed: a tensor every call


def test_a_library_cache_grown_while_dynamo_traced_is_expected_once_never_read_outside():
    import einops

    cls = torch.nn.Parameter(torch.randn(1, 1, 4))

    def tokens(x):  # vit-pytorch's class token, repeated per batch: einops meets a Parameter while Dynamo traces
        return torch.cat((einops.repeat(cls, "1 1 d -> b 1 d", b=x.shape[0]), einops.rearrange(x, "b c n -> b n c")), 1)

    f = torch.compile(tokens, backend="eager")
    cache = einops._backends._type2backend
    kept = dict(cache)
    cache.clear()  # as in a fresh process: the case does not depend on which test used einops before
    try:
        table = watched(lambda: [f(torch.randn(2, 4, 3)) for _ in range(2)])
    finally:
        cache.update(kept)
    memo = [c for r in table.rows for c in r.causes if "_type2backend" in c.words]
    assert memo, table.to_text()  # einops' cache grew during the first compile, a new one at the second call
    for c in memo:
        assert "einops' own cache" in c.words and c.fix.startswith("expected once"), c
        assert "read it outside" not in c.fix, c.fix


_alphas = torch.linspace(0.99, 0.01, 1000)


def ddim_step(x, t, t_prev, guidance_scale):  # DDIM with classifier-free guidance, trimmed: t_prev = -1 at the end
    at = _alphas[t]
    at_next = _alphas[t_prev] if t_prev >= 0 else torch.tensor(1.0)
    eps = x * 0.1 * guidance_scale
    return at_next.sqrt() * (x - (1 - at).sqrt() * eps) / at.sqrt()


def test_a_call_past_a_numbers_branch_is_told_against_its_own_sides_graph():
    f = torch.compile(ddim_step, backend="eager")
    x = torch.randn(4)
    steps = [(800, 600, 7.5), (600, 400, 7.5), (0, -1, 7.5), (800, 600, 3.0), (0, -1, 3.0)]
    table = watched(lambda: [f(x, *s) for s in steps])
    told = [r.causes[0] for r in table.rows]
    assert "crossed a condition the graph assumed (0 <= t_prev <= 999)" in told[2].words, told[2]
    assert "guidance_scale changed (was 7.5)" in told[4].words and "crossed" not in told[4].words, told[4]


class TopKPool(torch.nn.Module):  # Graph U-Nets' gPool, trimmed: keep a ratio k of the nodes
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.proj = torch.nn.Linear(8, 1)

    def forward(self, h):
        scores = torch.sigmoid(self.proj(h).squeeze(-1))
        values, idx = torch.topk(scores, max(2, int(self.k * h.shape[0])))
        return h[idx] * values.unsqueeze(-1)


_pool = TopKPool(0.5)


def pooled(h):
    return _pool(h).sum()


def test_a_global_a_line_turns_into_an_ops_int_is_told_to_keep_few_values_only():
    f = torch.compile(pooled, backend="eager")
    h = torch.randn(30, 8)

    def run():
        f(h)
        _pool.k = 0.8
        f(h)
        _pool.k = 0.5

    table = watched(run)
    (told,) = [c for r in table.rows for c in r.causes if c.kind == "global"]
    assert told.fix.startswith(
        "keep it to a few values: your line turns it into a Python number (int(...)) that torch.topk"
    )
    assert "torch.tensor(" not in told.fix and "as an argument" not in told.fix, told.fix


def dqn_targets(transitions):  # the PyTorch DQN tutorial's optimize_model, trimmed: a final state has no next state
    non_final = torch.tensor([t[1] is not None for t in transitions])
    next_states = torch.cat([t[1] for t in transitions if t[1] is not None])
    values = torch.zeros(len(transitions))
    values[non_final] = next_states.sum(1)
    return values + torch.cat([t[0] for t in transitions]).sum(1)


def test_one_optional_per_item_of_a_list_is_told_as_a_graph_per_pattern_and_tensors_built_outside_keep_one():
    f = torch.compile(dqn_targets, backend="eager")
    s = torch.randn(1, 4)
    patterns = [(2,), (4,), (0, 2), (1,)]
    batches = [[(s, None if i in p else s) for i in range(6)] for p in patterns]
    table = watched(lambda: [f(b) for b in batches])
    told = [c for r in table.rows for c in r.causes if c.kind == "none"]
    assert told and all("each pattern of None over its items is a graph of its own" in c.fix for c in told), told
    assert not any("pass it always" in c.fix for c in told), told

    @torch.compile(backend="eager")
    def on_tensors(states, next_states, non_final):  # the fix, applied: the tensors built outside
        values = torch.where(non_final, next_states.sum(1), torch.zeros(()))
        return values + states.sum(1)

    def fixed_run():
        for b in batches:
            mask = torch.tensor([n is not None for _, n in b])
            nxt = torch.cat([n if n is not None else torch.zeros(1, 4) for _, n in b])
            on_tensors(torch.cat([st for st, _ in b]), nxt, mask)

    assert watched(fixed_run).total_compiles == 1


def residual(net, n):  # a PINN's residual on fresh collocation points, made in the default dtype
    x = torch.rand(n, 1)
    return net(x).pow(2).mean()


def test_a_default_dtype_switch_beside_the_models_own_cast_is_not_told_to_be_set_once():
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    f = torch.compile(residual, backend="eager")

    def run():
        f(net, 16)
        torch.set_default_dtype(torch.float64)  # the float64 refinement phase: the model cast with it
        try:
            net.double()
            f(net, 16)
        finally:
            torch.set_default_dtype(torch.float32)
            net.float()

    table = watched(run)
    (state,) = [c for r in table.rows for c in r.causes if c.kind == "global_state"]
    assert state.fix.startswith("none for this compile, which needs a graph of its own anyway"), state.fix


class Embedder:  # NeRF's positional Embedder, trimmed: one function per frequency, set per instance
    def __init__(self, freqs):
        self.embed_fns = [lambda x, f=f: torch.sin(x * f) for f in range(freqs)]

    def embed(self, inputs):
        return torch.cat([fn(inputs) for fn in self.embed_fns], -1)


def test_a_container_each_instance_configures_is_expected_once_per_configuration():
    points, views = Embedder(5), Embedder(2)
    table = watched(lambda: [torch.compile(e.embed, backend="eager")(torch.randn(8, 3)) for e in (points, views)])
    told = [c for r in table.rows for c in r.causes if c.kind == "length"]
    assert told and all(c.fix.startswith("expected once per configuration") for c in told), told
    assert not any("read it outside" in c.fix for c in told), told


def set_flat_params_to(model, flat_params, numel=False):  # ikostrikov's pytorch-trpo utils, trimmed
    prev_ind = 0
    for param in model.parameters():
        flat_size = param.numel() if numel else int(np.prod(list(param.size())))
        param.data.copy_(flat_params[prev_ind : prev_ind + flat_size].view(param.size()))
        prev_ind += flat_size


def test_numpy_on_a_shape_read_back_with_int_is_named_and_never_told_capture_scalar_outputs():
    model = torch.nn.Linear(4, 2)
    f = torch.compile(set_flat_params_to, backend="eager")
    table = watched(lambda: f(model, torch.randn(10)))
    said = [b for b in table.breaks if b.words.startswith("NumPy on a number here")]
    assert said and all("p.numel()" in b.fix and "capture_scalar_outputs" not in b.fix for b in said), table.to_text()
    assert not watched(lambda: f(model, torch.randn(10), True)).breaks  # the fix as printed


_enc = torch.nn.Linear(5, 8)


def readout(feat, lengths):  # a graph readout with torch.segment_reduce, one segment per graph in the batch
    return torch.segment_reduce(torch.relu(_enc(feat)), "max", lengths=lengths, axis=0, unsafe=True).sum()


def test_marks_for_sizes_that_changed_together_are_told_together_and_applied_together_save_a_graph():
    f = torch.compile(readout, backend="eager")
    batches = [[4, 6, 5], [4, 6, 5, 2], [3, 3]]

    def run(mark=False):
        for sizes in batches:
            lengths, feat = torch.tensor(sizes), torch.randn(sum(sizes), 5)
            if mark:  # the fix as printed: both marks, before the first call
                torch._dynamo.maybe_mark_dynamic(feat, 0)
                torch._dynamo.maybe_mark_dynamic(lengths, 0)
            f(feat, lengths)

    table = watched(run)
    sized = [c for r in table.rows for c in r.causes if c.kind == "size"]
    assert sized and all(
        "maybe_mark_dynamic(feat, 0)" in c.fix and "maybe_mark_dynamic(lengths, 0)" in c.fix for c in sized
    ), sized
    torch._dynamo.reset()
    assert watched(lambda: run(mark=True)).total_compiles < table.total_compiles
