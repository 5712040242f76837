"""tl.watch() checked blind, thirty-sixth round: an int that indexes a ModuleList (RWKV's per-layer step,
``self.att[i]``) is said to pick a submodule fixed into the graph, with the fix that holds (pass the layer in:
one graph for every layer), never "pass it as a tensor", which made Dynamo give up on the function. Checked
against Dynamo's records."""

import math

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


class RWKV(torch.nn.Module):  # BlinkDL's RWKV in 150 lines: a time-mixing step called per layer with its index
    def __init__(self, layers=6, d=8):
        super().__init__()
        self.att = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))
        self.mix = torch.nn.Parameter(torch.full((layers, d), 0.5))

    def time_mixing(self, x, state, i: int, layer=None):
        layer = self.att[i] if layer is None else layer
        state[i] = x * self.mix[i] + state[i] * (1 - self.mix[i])
        return layer(state[i])


def run(model, step, passed):
    state = torch.zeros(len(model.att), 8)
    with torch.no_grad():
        x = torch.randn(8)
        for i in range(len(model.att)):
            x = x + (step(x, state, i, model.att[i]) if passed else step(x, state, i))


def test_an_int_that_indexes_a_module_list_is_said_to_pick_a_submodule_and_the_fix_passes_the_layer_in(dynamo):
    model = RWKV()
    with tl.watch() as w:
        run(model, torch.compile(model.time_mixing, backend="eager"), passed=False)
    check_against_dynamo(w, dynamo)
    picked = [c for r in w.table for c in r.causes if "indexes a ModuleList" in c.words]
    assert picked and all("pass the submodule in from the caller" in c.fix for c in picked), w.table.to_text()
    assert not any("as a tensor" in c.fix for r in w.table for c in r.causes if c.count), w.table.to_text()
    torch._dynamo.reset()
    with tl.watch() as fixed:  # the fix as printed: the layer passed in
        run(model, torch.compile(model.time_mixing, backend="eager"), passed=True)
    assert fixed.table.total_compiles < w.table.total_compiles <= len(model.att), (
        fixed.table.to_text(),
        w.table.to_text(),
    )


class PromptEncoder(torch.nn.Module):  # SAM's prompt encoder, cut down: point labels select embeddings by mask
    def __init__(self, d=8):
        super().__init__()
        self.pe, self.not_a_point, self.point = (
            torch.nn.Linear(2, d),
            torch.nn.Embedding(1, d),
            torch.nn.Embedding(1, d),
        )

    def _embed_points(self, points, labels):
        pe = self.pe(points)
        pe[labels == -1] += self.not_a_point.weight  # a boolean mask: its shape follows the data, a break
        pe[labels == 1] += self.point.weight
        return pe

    def forward(self, points, labels):
        sparse = torch.empty((points.shape[0], 0, self.pe.out_features))
        sparse = torch.cat([sparse, self._embed_points(points, labels)], dim=1)
        return sparse.sum()


def test_values_carried_over_a_break_at_a_masked_update_or_inside_a_list_argument_are_named(dynamo):
    encoder = torch.compile(PromptEncoder(), backend="eager")
    with tl.watch() as w:
        for n in (3, 2):
            encoder(torch.rand(1, n, 2), torch.tensor([[1, -1, 1][:n]]))
    check_against_dynamo(w, dynamo, also=("size mismatch",))  # its invariants: no placeholder among the inputs
    masked = [r.signature for r in w.table if "_embed_points after" in r.function]
    assert masked and all(s.startswith("labels == ") for s in masked), masked  # pe[labels == -1] += ...
    listed = [r.signature for r in w.table if r.function.startswith("forward after")]
    assert listed and all(s.startswith("cat: function, sparse: f32[1, 0, 8], self._embed_points(") for s in listed), (
        listed
    )


class MLPHead(torch.nn.Module):  # a Hydra-style config dict read inside forward, changed by a sweep
    def __init__(self, cfg):
        super().__init__()
        self.cfg, self.fc = cfg, torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        if self.cfg.get("residual_scale") is not None:
            h = h * self.cfg["residual_scale"]
        return h


def test_a_config_key_a_sweep_adds_is_a_setting_that_picks_a_path_never_a_cache_keyed_by_size(dynamo):
    cfg = {"dropout": 0.1}
    model = torch.compile(MLPHead(cfg), backend="eager")
    with tl.watch() as w:
        model(torch.randn(2, 4))
        cfg["residual_scale"] = 0.5  # the sweep's next setting
        model(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    (gained,) = [c for r in w.table for c in r.causes if c.kind == "dict_keys"]
    assert "gained the key 'residual_scale'" in gained.words and "size" not in gained.words + gained.fix, gained
    assert gained.fix.startswith("expected once per setting") and "torch._dynamo.reset()" in gained.fix, gained.fix


def resample(wav, orig_freq: int, new_freq: int):  # torchaudio's resample, cut down: rates reduced by their gcd
    gcd = math.gcd(int(orig_freq), int(new_freq))
    orig, new = int(orig_freq) // gcd, int(new_freq) // gcd
    out = wav.repeat_interleave(new, -1)[..., ::orig]
    target = torch.ceil(torch.as_tensor(new * wav.size(-1) / orig)).long()
    return out[..., :target]  # a tensor as a slice bound: read back, inside an operator


def test_math_gcd_of_numbers_made_dynamic_and_a_break_inside_an_operator_are_said_as_what_they_are(dynamo):
    f = torch.compile(resample, backend="eager")
    with tl.watch() as w:
        for orig in (44100, 48000, 22050):
            f(torch.randn(1, 64), orig, 16000)
    check_against_dynamo(w, dynamo, also=("orig_freq == 48000",))  # beside gcd's: Dynamo logs gcd's only
    gcd = [b for b in w.table.breaks if "math.gcd" in b.words]
    assert gcd and all(b.fix.startswith("compute math.gcd(...) outside the compiled function") for b in gcd), [
        (b.words, b.fix) for b in w.table.breaks
    ]
    resumed = [b for b in w.table.breaks if "cannot resume" in b.words]
    assert resumed and not any("inside a loop" in b.words for b in resumed), [b.words for b in resumed]


def policy_loss(log_probs, rewards, gamma=0.99):  # pytorch/examples' REINFORCE: returns from a list of rewards
    R, returns = 0.0, []
    for r in rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    return (-log_probs * (returns - returns.mean())).sum()


def test_a_size_pinned_by_a_tensor_built_from_a_list_names_the_list_and_passing_it_as_a_tensor_fixes_it(dynamo):
    f = torch.compile(policy_loss, backend="eager")
    with tl.watch() as w:
        for n in (6, 5, 4):
            f(torch.randn(n), [1.0] * n)
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    pinned = [c for r in w.table for c in r.causes if "pins log_probs dim 0" in c.words]
    assert pinned and all("to the length of rewards, a Python list" in c.words for c in pinned), w.table.to_text()
    assert all(c.fix.startswith("pass rewards in as one tensor") for c in pinned), [c.fix for c in pinned]
    torch._dynamo.reset()
    with tl.watch() as fixed:  # the fix: the returns computed before the call, passed in as one tensor
        f = torch.compile(lambda log_probs, returns: (-log_probs * (returns - returns.mean())).sum(), backend="eager")
        for n in (6, 5, 4):
            f(torch.randn(n), torch.tensor([0.99**i for i in range(n)]))
    assert fixed.table.total_compiles == 2, fixed.table.to_text()  # the second made the size dynamic


def test_a_quantized_modules_packed_weights_are_said_in_words_never_as_dynamos_internals(dynamo):
    fp32 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).eval()
    quantized = torch.ao.quantization.quantize_dynamic(fp32, {torch.nn.Linear}, dtype=torch.qint8)
    f = torch.compile(quantized, backend="eager")
    with tl.watch() as w, torch.inference_mode():
        f(torch.randn(4, 8))
    check_against_dynamo(w, dynamo)
    packed = [b for b in w.table.breaks if "TorchScript object" in b.words]
    assert packed and "as_proxy" not in str(w.table), [b.words for b in w.table.breaks]


def prompt_embed(image, points=None):  # SAM: points come as a (coords, labels) tuple, or not at all
    if points is not None:
        coords, labels = points
        return image.sum() + (coords * labels[..., None]).sum()
    return image.sum()


def test_a_tuple_now_none_is_one_change_never_also_a_different_length(dynamo):
    f = torch.compile(prompt_embed, backend="eager")
    with tl.watch() as w:
        f(torch.randn(2, 4), (torch.randn(1, 3, 2), torch.ones(1, 3)))
        f(torch.randn(2, 4), None)
    check_against_dynamo(w, dynamo, also=("points",))  # its type and (torch 2.14 on) its length: Dynamo logs one
    (row,) = [r for r in w.table if r.compiles and "points is now None" in r.cause]
    assert "different length" not in row.cause, row.cause
