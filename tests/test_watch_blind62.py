"""tl.watch() checked blind, rounds 62 and 63: DANN's gradient reversal with a NumPy alpha then an int one,
Knowledge-Distillation's JSON ints swept to floats, SAC's dict of outputs filled on the first call, and more.
Each is checked against Dynamo's own account, with the printed fix applied where it is an action."""

import numpy as np
import torch
from _dynamo_oracle import watched_clean
from torch import nn


def watched(run):
    return watched_clean(run)[0]


class ReverseLayerF(torch.autograd.Function):  # fungtion/DANN's models/functions.py
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.alpha, None


class Dann(nn.Module):  # DANN's CNNModel, trimmed to linear layers
    def __init__(self):
        super().__init__()
        self.feature = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.classes = nn.Linear(8, 3)
        self.domain = nn.Linear(8, 2)

    def forward(self, input_data, alpha):
        feature = self.feature(input_data)
        return self.classes(feature), self.domain(ReverseLayerF.apply(feature, alpha))


def _dann(alphas):
    torch.manual_seed(0)
    model = Dann()
    net = torch.compile(model, backend="aot_eager")

    def run():
        for step in range(2):  # train/main.py: alpha = 2. / (1. + np.exp(-10 * p)) - 1, a NumPy float
            class_output, domain_output = net(torch.randn(8, 6), 2.0 / (1.0 + np.exp(-10 * step / 2)) - 1)
            (class_output.sum() + domain_output.sum()).backward()
        model.eval()
        with torch.no_grad():  # test.py: alpha = 0, then another alpha
            for alpha in alphas:
                net(torch.randn(5, 6), alpha)

    return run


def test_a_numpy_alpha_then_an_int_zero_is_never_said_to_be_made_dynamic_and_one_is_told_against_the_eval_graph():
    table = watched(_dann([0, 0, 1]))
    said = [c for r in table.rows for c in r.causes]
    typed = [c for c in said if c.kind == "tensor_type"]
    assert typed and not any("dynamic" in c.words for c in typed), typed  # int 0: compiled apart, never dynamic
    assert all("Python number" in c.words or "number is baked" in c.words for c in typed), typed
    last = [r for r in table.rows if "int 1" in r.signature]
    (one,) = [c for r in last for c in r.causes]  # told against the eval graph that holds alpha == 0 ...
    assert "alpha changed (was 0): Dynamo made alpha dynamic, so later values reuse this graph" in one.words, one
    assert not any(c.kind == "training" for r in last for c in r.causes)  # ... not the train graph


def test_an_int_alpha_made_dynamic_after_zero_is_reused_by_later_values_as_said():
    table = watched(_dann([0, 1, 2, 3]))  # 0: compiled for that value; 1: made dynamic; 2 and 3 reuse it
    evals = [r for r in table.rows if "grad mode: off" in r.signature and "(backward)" not in r.function]
    assert sum(r.compiles for r in evals) == 2, table.to_text()


def test_alpha_as_a_tensor_every_call_as_printed_keeps_the_eval_graph_for_every_alpha():
    table = watched(_dann([torch.tensor(0.0), torch.tensor(0.0), torch.tensor(1.0)]))
    evals = [r for r in table.rows if "grad mode: off" in r.signature and "(backward)" not in r.function]
    assert sum(r.compiles for r in evals) == 1, table.to_text()  # the fix as printed: one eval graph for all


class Actor(nn.Module):  # denisyarats/pytorch_sac's DiagGaussianActor, trimmed: forward records its outputs
    def __init__(self, filled=False):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 4))
        self.outputs = dict(mu=None, std=None) if filled else dict()  # the printed fix: its keys made in __init__

    def forward(self, obs):
        mu, log_std = self.trunk(obs).chunk(2, dim=-1)
        std = torch.tanh(log_std).exp()
        self.outputs["mu"] = mu
        self.outputs["std"] = std
        return torch.distributions.Normal(mu, std).rsample().sum()


def _act_then_update(actor):
    net = torch.compile(actor, backend="aot_eager")

    def run():
        torch.manual_seed(0)
        with torch.no_grad():  # sac.py's act(): one observation, no grad
            net(torch.randn(1, 5))
        for batch in (8, 5):  # update_actor: batches of the replay buffer
            net(torch.randn(batch, 5)).backward()
        with torch.no_grad():  # the next act(): its graph was compiled while self.outputs was empty
            net(torch.randn(1, 5))

    return run


def test_a_dict_forward_fills_is_told_with_the_line_that_fills_it_and_making_its_keys_first_saves_a_compile():
    table = watched(_act_then_update(Actor()))
    (filled, *_) = [c for r in table.rows for c in r.causes if "self.outputs" in c.words]
    assert "self.outputs held no items when the graph compiled" in filled.words, filled
    assert "forward (test_watch_blind62.py:" in filled.words and 'self.outputs["mu"] = mu' in filled.words
    assert "create its keys in __init__" in filled.fix and "each length is a graph" not in filled.fix
    fixed = watched(_act_then_update(Actor(filled=True)))
    forward = lambda t: sum(r.compiles for r in t.rows if "(backward)" not in r.function)  # noqa: E731
    assert forward(fixed) < forward(table), (fixed.to_text(), table.to_text())


def per_sample(f, w):  # generative-inpainting's ContextualAttention, trimmed: a loop over the batch's pieces
    out = []
    for xi, wi in zip(torch.split(f, 1, dim=0), torch.split(w, 1, dim=0), strict=True):
        out.append(torch.nn.functional.conv2d(xi, wi[0], padding=1))
    return torch.cat(out, 0)


def one_sample(xi, wi):  # the printed fix: the loop over the pieces in Python, what each one runs compiled
    return torch.nn.functional.conv2d(xi, wi[0], padding=1)


def test_a_size_that_sets_how_many_pieces_split_makes_is_told_so_and_compiling_one_piece_keeps_one_graph():
    f = torch.compile(per_sample, backend="aot_eager")
    table = watched(lambda: [f(torch.randn(n, 2, 6, 6), torch.randn(n, 3, 2, 3, 3)) for n in (2, 3, 4)])
    sized = [c for r in table.rows for c in r.causes if c.kind == "size"]
    assert sized and all("how many pieces the code makes" in c.words for c in sized), table.to_text()
    assert all("maybe_mark_dynamic" not in c.fix and "keep the loop over the pieces" in c.fix for c in sized)
    g = torch.compile(one_sample, backend="aot_eager")

    def fixed():
        for n in (2, 3, 4):
            x, w = torch.randn(n, 2, 6, 6), torch.randn(n, 3, 2, 3, 3)
            torch.cat([g(xi, wi) for xi, wi in zip(torch.split(x, 1), torch.split(w, 1), strict=True)])

    assert watched(fixed).total_compiles == 1


def flow_to_image(flow):  # generative-inpainting's utils/tools.py, trimmed: NumPy code inside a compiled function
    colorwheel = np.ones((55, 3))
    ncols = np.size(colorwheel, 0)
    return np.tanh(flow) * ncols


def test_a_numpy_function_that_returns_a_number_is_named_and_shape_in_its_place_removes_the_break():
    f = torch.compile(flow_to_image, backend="aot_eager")
    table = watched(lambda: f(np.ones((2, 3), dtype=np.float32)))
    (broke,) = table.breaks
    assert broke.words.startswith("np.size(colorwheel, 0) returns a Python number"), broke
    assert "torch.* ops" not in broke.words and broke.fix.startswith("use colorwheel.shape[0] in place of")
    src = "def fixed(flow):\n    colorwheel = np.ones((55, 3))\n    return np.tanh(flow) * colorwheel.shape[0]\n"
    space = {"np": np}
    exec(compile(src, __file__, "exec"), space)  # the fix as printed
    assert not watched(lambda: torch.compile(space["fixed"], backend="aot_eager")(np.ones((2, 3)))).breaks


def test_np_load_is_named_as_numpy_and_a_graph_whose_later_part_failed_is_said_to_run_eagerly(tmp_path):
    path = str(tmp_path / "mel_filters.npz")
    np.savez(path, mel_80=np.ones((4, 6), dtype=np.float32))

    def mel_filters(device, n_mels=80):  # openai/whisper's audio.py, without its lru_cache
        assert n_mels in {80, 128}, f"Unsupported n_mels: {n_mels}"
        with np.load(path, allow_pickle=False) as f:
            return torch.from_numpy(f[f"mel_{n_mels}"]).to(device)

    def log_mel(x):
        return (mel_filters(x.device) @ x).clamp(min=1e-10).log10()

    table = watched(lambda: torch.compile(log_mel, backend="aot_eager")(torch.rand(6, 3)))
    said = " ".join(b.words for b in table.breaks)
    assert "NumPy's load is not among the NumPy functions Dynamo can trace" in said and "torch._numpy" not in said
    (first,) = [r for r in table.rows if r.function.startswith("mel_filters (")]
    assert "no part after it compiled, so this function's work runs eagerly" in first.cause, table.to_text()


class Dlrm(nn.Module):  # facebookresearch/dlrm's apply_emb, trimmed: one EmbeddingBag per sparse feature
    def __init__(self):
        super().__init__()
        self.emb_l = nn.ModuleList(nn.EmbeddingBag(20, 4, mode="sum") for _ in range(3))

    def forward(self, lS_o, lS_i):
        return torch.cat([e(i, o) for e, i, o in zip(self.emb_l, lS_i, lS_o, strict=True)], 1).sum()


def _dlrm_batches(seed):
    g = torch.Generator().manual_seed(seed)
    for bags in ([2, 2, 2, 2], [3, 2, 3, 2], [1, 3, 1, 2]):  # dlrm_data_pytorch: each bag's length, per batch
        lens = [torch.tensor(bags[k:] + bags[:k]) + k for k in range(3)]  # every table's bags, of its own lengths
        offsets = [torch.cat([torch.zeros(1, dtype=torch.long), n.cumsum(0)[:-1]]) for n in lens]
        yield offsets, [torch.randint(0, 20, (int(n.sum()),), generator=g) for n in lens]


def test_items_of_one_list_that_each_changed_length_are_one_summary_line_and_padding_keeps_to_padding_idx():
    model = Dlrm()
    f = torch.compile(model, backend="aot_eager")
    table = watched(lambda: [f(o, i) for o, i in _dlrm_batches(0)])
    lines = [line for line in table.to_text().splitlines() if "each item of lS_i has its own length" in line]
    assert len(lines) == 1 and "lS_i[0] dim 0, lS_i[1] dim 0, lS_i[2] dim 0" in lines[0], table.to_text()
    assert "padding_idx" in lines[0]

    def marked():  # the marks as printed, together, before the first call
        for n, (o, i) in enumerate(_dlrm_batches(0)):
            if n == 0:
                for item in i:
                    torch._dynamo.maybe_mark_dynamic(item, 0)
            f(o, i)

    assert watched(marked).total_compiles < table.total_compiles


def ball_query(xyz, nsample):  # Pointnet_Pointnet2_pytorch's query_ball_point, trimmed: a slice of a larger index
    group_idx = torch.arange(xyz.shape[1]).view(1, 1, -1).repeat(xyz.shape[0], 4, 1)
    torch._dynamo.graph_break()  # its x[mask] breaks the graph, as in the original
    return group_idx[:, :, :nsample]


def sample_and_group(xyz):
    idx = ball_query(xyz, 3)  # carried over the break: a view whose strides follow the cloud's size
    return torch.gather(xyz[..., 0].unsqueeze(1).expand(-1, 4, -1), 2, idx).sum()


def test_a_carried_views_stride_is_told_as_a_slice_of_a_larger_tensor_never_as_a_memory_format_to_pass():
    f = torch.compile(sample_and_group, backend="aot_eager")
    table = watched(lambda: [f(torch.randn(2, n, 3)) for n in (8, 6)])
    strides = [c for r in table.rows for c in r.causes if c.kind == "stride" and "idx" in c.words]
    assert strides and all("a view (a slice) of a larger tensor" in c.words for c in strides), table.to_text()
    assert not any("memory format every call" in c.fix for c in strides)


def test_a_compile_that_needs_its_own_graph_never_offers_to_skip_itself():
    from tpu_lab.compile.causes.cause import Cause
    from tpu_lab.compile.causes.own_graph import own_graph_first

    grad = Cause("global_state", "grad mode changed", "global state changed: grad_mode", "expected once per mode")
    size = Cause(  # NeRF's render_rays under no_grad at test time, with a new chunk of rays: its fix as said alone
        "size",
        "inputs dimension 0 changed 1024 -> 512",
        "tensor 'inputs' size mismatch at index 0. expected 1024, actual 512",
        "Dynamo made inputs dim 0 dynamic, so later sizes reuse this graph; to skip even this one: mark it first",
    )
    (_, told) = own_graph_first([size, grad])
    assert told.fix.startswith("none for this compile, which needs a graph of its own anyway (grad mode changed)")
    assert "to skip even this one" not in told.fix and "later sizes reuse this graph" in told.fix


def scaled_or_shifted(x, flag):
    return x * 2 if flag else x + 1


def test_a_size_told_against_a_later_graph_is_marked_on_every_call_which_saves_what_a_first_mark_does_not():
    f = torch.compile(scaled_or_shifted, backend="aot_eager")

    def run(mark):  # lucidrains' T2T-ViT: einops' cache compiled the graph the short batch is compared with
        def calls():
            for i, (n, flag) in enumerate(((4, True), (4, False), (3, False))):
                x = torch.randn(n)
                if mark == "each" or (mark == "first" and i == 0):
                    torch._dynamo.maybe_mark_dynamic(x, 0)
                f(x, flag)

        return watched(calls)

    table = run(None)
    (size,) = [c for r in table.rows for c in r.causes if c.kind == "size"]
    assert "on every call's input" in size.fix and "before the first call" not in size.fix, size.fix
    assert run("each").total_compiles < run("first").total_compiles == table.total_compiles


class LockedDropout(nn.Module):  # salesforce/awd-lstm-lm's locked_dropout.py: eval returns x, no tensor work
    def forward(self, x, dropout=0.5):
        if not self.training or not dropout:
            return x
        m = x.data.new(1, x.size(1), x.size(2)).bernoulli_(1 - dropout)
        return m.div_(1 - dropout).expand_as(x) * x


def test_a_function_skipped_on_inputs_with_no_tensor_work_is_told_that_later_calls_run_eagerly_and_eval_uncompiled_keeps_it():
    def run(evaluate_uncompiled):
        drop = LockedDropout()
        f = torch.compile(drop, backend="aot_eager")

        def epochs():
            f(torch.randn(5, 2, 4))
            drop.eval()
            (drop if evaluate_uncompiled else f)(torch.randn(5, 3, 4))  # evaluate(): eval mode, another batch
            drop.train()
            f(torch.randn(5, 2, 6))  # the next epoch's training: a new size

        return watched(epochs)

    table = run(False)
    (skipped,) = [c for r in table.rows for c in r.causes if c.kind == "failed"]
    assert "skips its code for every later call, those with tensor work included" in skipped.fix, skipped
    assert "evaluate with the uncompiled model" in skipped.fix and "inputs hold tensors" not in skipped.fix
    assert table.total_compiles == 1  # the training call after it compiled nothing: it ran eagerly
    assert run(True).total_compiles == 2  # the fix as printed: training compiles again


class Masked(nn.Module):  # pytorch/examples' word_language_model TransformerModel: a mask kept on the module
    def __init__(self):
        super().__init__()
        self.src_mask = None

    def forward(self, src, has_mask=True):
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = torch.triu(torch.ones(len(src), len(src)), diagonal=1)
                self.src_mask = mask
        else:
            self.src_mask = None
        return src + (self.src_mask.sum() if self.src_mask is not None else 0)


def test_a_cached_tensor_is_told_by_the_line_that_sets_it_never_by_its_reset_to_none():
    model = Masked()
    f = torch.compile(model, backend="aot_eager")
    table = watched(lambda: [f(torch.randn(n, 3)) for n in (4, 4, 2, 2)])
    said = " ".join(c.words for r in table.rows for c in r.causes if "src_mask" in c.words)
    assert "self.src_mask = mask)" in said and "self.src_mask = None)" not in said, table.to_text()


def test_torch_autograd_variable_is_said_in_one_sentence_never_inside_dynamos_builtin_text():
    from torch.autograd import Variable

    f = torch.compile(lambda x: Variable(x * 2, requires_grad=False) + 1, backend="aot_eager")
    (broke,) = watched(lambda: f(torch.randn(3))).breaks
    assert broke.words.startswith("Dynamo cannot trace torch.autograd.Variable, a constructor in C code"), broke
    assert "This function is either" not in broke.words and "`" not in broke.words


class GhostBN(nn.Module):  # dreamquark-ai/tabnet's GBN: chunks of a virtual batch size, counted through NumPy
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x):
        chunks = x.chunk(int(np.ceil(x.shape[0] / 16)), 0)
        return torch.cat([self.bn(x_) for x_ in chunks], dim=0)


def test_a_carried_size_a_count_holds_to_one_value_is_told_so_never_that_removing_the_break_saves_it():
    ghost, first = GhostBN(), nn.Linear(6, 6)

    def embed(x):  # TabNet's EmbeddingGenerator: its `if is_continuous:` breaks the graph
        torch._dynamo.graph_break()
        return first(x)

    def forward(x):  # TabNet's forward: x comes out of the break, carried into the part after it
        x = embed(x)
        return ghost(x)

    f = torch.compile(forward, backend="aot_eager")
    table = watched(lambda: [f(torch.randn(n, 6)) for n in (48, 4, 10)])
    held = [c for r in table.rows for c in r.causes if "the code before the break made it" in c.words]
    assert held and all("so every other size compiles a graph of its own" in c.words for c in held), table.to_text()
    assert all("this recompile goes with it" not in c.fix and "pad to a few sizes" in c.fix for c in held)
    resumed = [r for r in table.rows if r.function.startswith("forward after") and "(backward)" not in r.function]
    assert sum(r.compiles for r in resumed) == 3  # as said: 48, 4 and 10 each a graph of the part after the break


class CorrelationLayer(nn.Module):  # thuml/Autoformer's AutoCorrelationLayer, trimmed: a break inside it
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, queries):
        queries = self.proj(queries)
        torch._dynamo.graph_break()  # Autoformer: its loops over torch.roll(..., -int(index[i])) break the graph
        return queries.mean(1)


class Former(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.layer = nn.Linear(3, 4), CorrelationLayer()

    def forward(self, x_enc):
        return self.layer(self.embed(x_enc)).sum()


def test_a_layer_whose_inputs_compiled_code_made_is_never_told_to_mark_them():
    f = torch.compile(Former(), backend="aot_eager")
    table = watched(lambda: [f(torch.randn(2, n, 3)) for n in (24, 20, 16)])
    layer = [c for r in table.rows if r.function.startswith("CorrelationLayer.forward (") for c in r.causes]
    sized = [c for c in layer if c.kind == "size"]
    assert sized and not any("maybe_mark_dynamic(queries" in c.fix for c in sized), table.to_text()
    assert all("nothing to mark: these inputs are made inside Former.forward's compiled code" in c.fix for c in sized)


def switch_route(routes, capacity):  # labml's Switch Transformer: token indices per expert, then capacity
    indexes_list = [torch.eq(routes, i).nonzero(as_tuple=True)[0] for i in range(3)]
    kept = []
    for i in range(3):
        if len(indexes_list[i]) <= capacity:
            kept.append(indexes_list[i])
        else:
            kept.append(indexes_list[i][:capacity])
    return torch.cat(kept)


def test_a_branch_on_one_items_length_after_nonzero_is_named_where_the_capture_setting_is_offered():
    f = torch.compile(switch_route, backend="aot_eager")
    table = watched(lambda: f(torch.tensor([0, 1, 1, 2, 2, 2]), 2))
    shaped = [b for b in table.breaks if "nonzero" in b.words]
    assert shaped and all("if len(indexes_list[i]) <= capacity:" in b.fix for b in shaped), table.to_text()
