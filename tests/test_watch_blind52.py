"""tl.watch() checked blind, fifty-second round: a prompt encoded inside the compiled function (nanoGPT's
encode), functions passed to an ODE solver (a lambda over other variables, then a plain function), and an
op with no kernel for dynamic sizes (the spatial transformer tutorial's affine_grid on a short last batch).
Each is checked against Dynamo's own account, with the printed fixes applied."""

import numpy as np
import torch
import torch.nn.functional as F
from _dynamo_oracle import watched_clean

_stoi = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ")}
_emb = torch.nn.Embedding(len(_stoi), 8)


def watched(run):
    return watched_clean(run)[0]


def next_token_logits(prompt):  # nanoGPT's sample.py, trimmed: encode(start) inside the compiled call
    ids = torch.tensor([_stoi[c] for c in prompt])
    return _emb(ids).sum(0)


def test_text_that_changes_per_call_is_told_to_be_encoded_outside_and_that_keeps_few_graphs():
    prompts = ["to be", "or not", "to be or", "not to", "be it so", "so it is", "a b c", "it is to", "be", "no"]
    f = torch.compile(next_token_logits, backend="eager")
    table = watched(lambda: [f(p) for p in prompts])
    told = [c for r in table.rows for c in r.causes if c.kind == "string"]
    assert told and all("do the work on it outside the compiled function (encode it)" in c.fix for c in told), told
    torch._dynamo.reset()
    g = torch.compile(lambda ids: _emb(ids).sum(0), backend="eager")
    encoded = [torch.tensor([_stoi[c] for c in p]) for p in prompts]  # the fix, applied
    assert watched(lambda: [g(ids) for ids in encoded]).total_compiles <= 2


def rk4(func, y, n_steps=4):  # torchdiffeq-style fixed-step RK4, trimmed
    h = 1.0 / n_steps
    for _ in range(n_steps):
        k1 = func(y)
        k2 = func(y + h * k1 / 2)
        y = y + h * (k1 + 2 * k2) / 3
    return y


def decay(y):
    return -y


def test_a_function_passed_in_is_told_as_another_function_never_as_an_untranslated_accessor():
    f = torch.compile(rk4, backend="eager")
    y = torch.randn(4)
    k, j = 0.5, 2.0
    table = watched(lambda: [f(lambda v: -k * v, y), f(lambda v: -j * v * v, y), f(decay, y)])
    said = [c for r in table.rows for c in r.causes if c.kind not in ("first",)]
    assert not any("not translated" in c.words for c in said), said
    assert any("is now another function" in c.words for c in said), said
    assert not any(c.fix == "reuse one instance across calls" for c in said if "func" in c.words), said


class STN(torch.nn.Module):  # the spatial transformer networks tutorial, trimmed
    def __init__(self):
        super().__init__()
        self.loc = torch.nn.Linear(16 * 16, 6)

    def forward(self, x):
        theta = self.loc(x.flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)


def test_an_op_without_a_kernel_for_dynamic_sizes_is_told_to_keep_sizes_fixed_and_dynamic_false_runs():
    net = STN()

    def run(model):
        for b in (8, 8, 5):  # the last, short batch
            model(torch.randn(b, 1, 16, 16)).sum().backward()

    def raised():
        try:
            run(torch.compile(net, backend="aot_eager"))
        except Exception:  # the failed compile raises out of the call, as the user meets it
            return
        raise AssertionError("the short batch did not raise")

    table = watched(raised)
    failed = [c for r in table.rows for c in r.causes if c.kind == "failed"]
    assert failed and all("no kernel for dynamic sizes" in c.fix and "dynamic=False" in c.fix for c in failed), failed
    torch._dynamo.reset()
    watched(lambda: run(torch.compile(net, backend="aot_eager", dynamic=False)))  # the fix as printed: it runs


class MyLinear(torch.nn.Module):  # the "Extending PyTorch" notes' Linear module, trimmed: bias optional
    def __init__(self, bias=True):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 8))
        self.bias = torch.nn.Parameter(torch.zeros(4)) if bias else None

    def forward(self, x):
        out = x @ self.weight.T
        return out + self.bias if self.bias is not None else out


def test_a_module_built_without_a_parameter_is_another_configuration_not_only_a_pruned_one():
    f = torch.compile(lambda layer, x: layer(x).sum(), backend="eager")
    x = torch.randn(2, 8)
    table = watched(lambda: [f(MyLinear(), x), f(MyLinear(bias=False), x)])
    said = [c for r in table.rows for c in r.causes if c.kind == "parameters"]
    assert said, table.to_text()
    for c in said:
        assert "another module built without it" in c.words and "expected once per module configuration" in c.fix


def layer_drop(x):  # wav2vec2's LayerDrop, trimmed: a NumPy draw per call decides whether the layer runs
    if np.random.rand(1).item() < 0.1:
        return x
    return x * 2


def test_a_numpy_draw_read_back_is_named_as_numpys():
    f = torch.compile(layer_drop, backend="eager")
    table = watched(lambda: f(torch.randn(3)))
    said = [b for b in table.breaks if "random draw" in b.words]
    assert said and all("a NumPy random draw" in b.words for b in said), table.breaks


def test_a_logged_breaks_hint_to_set_fullgraph_false_is_no_fix():
    from tpu_lab.compile.causes.cause import Cause, as_logged

    hinted = Cause(
        "graph_break", "Backend compiler failed with aten.nonzero.default", "", "Set `fullgraph=False` to ..."
    )
    assert "fullgraph=False" not in as_logged(hinted).fix and as_logged(hinted).fix.startswith("none needed")
