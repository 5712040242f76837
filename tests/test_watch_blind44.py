"""tl.watch() checked blind, forty-fourth round: expert routing whose per-expert count hits 0 or 1 (Dynamo's 0/1
rule, a size built from the data), a branch on a NumPy scalar a scheduler sets (DropBlock), DLRM's per-table
index lists of one length, a hyper-parameter sweep that swaps a layer and a padding tuple (PatchTST), the rest of
a function after a break that only returns (MoCo), and a generator in the standard library that a compiled
training step meets while its backward compiles. Each is checked against Dynamo's own account; printed fixes
are applied."""

import numpy as np
import torch
import torch.nn.functional as F
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


def dispatch(x, routes):  # a Switch Transformer's routing: each expert's tokens, by nonzero
    idx = [torch.eq(routes, i).nonzero(as_tuple=True)[0] for i in range(3)]
    return [x[i] * 2 for i in idx]


def test_a_size_built_from_the_data_that_reaches_0_or_1_says_the_0_1_rule_never_pad_its_source():
    f = torch.compile(dispatch, backend="eager")
    x = torch.randn(6, 4)
    routes = ([0, 1, 2, 2, 2, 0], [0, 1, 1, 2, 1, 0], [0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0])
    table = watched(lambda: [f(x, torch.tensor(r)) for r in routes])
    (zero,) = [c for r in table.rows for c in r.causes if c.words == "idx[2] dimension 0 changed 1 -> 0"]
    assert zero.fix.startswith(
        "nothing to mark: it is built inside the compiled code, and sizes 0 and 1 always compile graphs of their "
        "own (Dynamo's 0/1 rule), so each costs one graph at most; to avoid even those, keep it at a fixed size"
    )
    assert "pad what it is built from" not in table.to_text()


class DropBlock(torch.nn.Module):  # miguelvr/dropblock: a scheduler sets drop_prob from np.linspace
    def __init__(self):
        super().__init__()
        self.drop_prob = 0.0

    def forward(self, x):
        if not self.training or self.drop_prob == 0.0:
            return x
        return F.dropout(x, self.drop_prob)


class Scheduled(torch.nn.Module):  # dropblock's LinearScheduler wraps the block; the model holds both
    def __init__(self):
        super().__init__()
        self.dropblock = DropBlock()
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.dropblock(x))


def test_a_branch_on_a_numpy_scalar_names_it_and_float_at_its_source_removes_the_break():
    model = Scheduled()
    f = torch.compile(model, backend="eager")
    schedule = np.linspace(0.0, 0.25, 4)

    def sweep(as_float):
        for p in schedule:
            model.dropblock.drop_prob = float(p) if as_float else p
            f(torch.randn(2, 8))

    table = watched(lambda: sweep(False))
    # Dynamo words it in full the first time and short on repeats: one row, named by the condition either way
    (b,) = [b for b in table.breaks if "NumPy" in b.words]
    assert b.count >= 2
    assert b.words.startswith(
        "data-dependent branching on a NumPy value: self.drop_prob is NumPy data (an array, or a NumPy scalar"
    )
    assert b.fix.startswith("make self.drop_prob a Python number where it is set (float(...) of a NumPy scalar")

    table = watched(lambda: sweep(True))  # the fix as printed
    assert table.breaks == ()


class Embeddings(torch.nn.Module):  # facebookresearch/dlrm's apply_emb: one index list per table
    def __init__(self):
        super().__init__()
        self.emb_l = torch.nn.ModuleList([torch.nn.EmbeddingBag(50, 8, mode="sum") for _ in range(2)])

    def forward(self, lS_o, lS_i):
        return torch.cat([e(i, o) for e, i, o in zip(self.emb_l, lS_i, lS_o, strict=True)], dim=1)


def test_index_lists_of_one_length_that_change_together_are_no_ragged_items():
    f = torch.compile(Embeddings(), backend="eager")

    def batch(bags, total):
        offsets = [torch.arange(bags) * (total // bags) for _ in range(2)]
        return offsets, [torch.randint(0, 50, (total,)) for _ in range(2)]

    table = watched(lambda: [f(*batch(b, t)) for b, t in ((8, 32), (8, 24), (5, 20))])
    fixes = " ".join(c.fix for r in table.rows for c in r.causes)
    assert "has its own length" not in fixes and "maybe_mark_dynamic(lS_i[0], 0)" in fixes, fixes


class PatchBackbone(torch.nn.Module):  # yuqinie98/PatchTST: patching hyper-parameters, swept
    def __init__(self, patch_len=16, stride=8):
        super().__init__()
        self.patch_len, self.stride = patch_len, stride
        self.pad = torch.nn.ReplicationPad1d((0, stride))
        self.W_P = torch.nn.Linear(patch_len, 8)

    def forward(self, z):
        z = self.pad(z.permute(0, 2, 1))
        return self.W_P(z.unfold(-1, self.patch_len, self.stride))


def test_a_swept_layer_and_padding_tuple_are_a_configuration_translated_with_no_optimizer_advice():
    model = PatchBackbone()
    f = torch.compile(model, backend="eager")

    def sweep():
        f(torch.randn(2, 96, 3))
        model.patch_len, model.stride = 12, 6
        model.pad = torch.nn.ReplicationPad1d((0, 6))
        model.W_P = torch.nn.Linear(12, 8)
        f(torch.randn(2, 96, 3))

    table = watched(sweep)
    causes = [c for r in table.rows for c in r.causes]
    (tuple_cause,) = [c for c in causes if "self.pad.padding" in c.words]
    assert tuple_cause.words.startswith("tuple self.pad.padding changed (was (0, 8)): Dynamo keeps a tuple")
    assert tuple_cause.fix.startswith("expected once per value of self.pad.padding, a setting of the module")
    (layer,) = [c for c in causes if c.kind == "parameter_shape"]
    assert layer.fix.startswith("expected once per model configuration: the module now holds a layer of another")
    assert "optimizer" not in layer.fix and "not translated" not in table.to_text()


def test_the_rest_of_a_function_after_a_break_that_only_returns_needs_no_fix():
    @torch.compile(backend="eager")
    def logits_and_labels(q, k):
        logits = q @ k.T
        print("queue pointer moved")  # MoCo's bookkeeping between the graph and the return
        return logits

    table = watched(lambda: [logits_and_labels(torch.randn(4, 8), torch.randn(6, 8)) for _ in range(2)])
    skipped = [c for r in table.rows for c in r.causes if c.kind == "failed" and "no tensor operation" in c.words]
    for c in skipped:
        assert c.fix.startswith("none needed: what is left of logits_and_labels after the graph break"), c.fix
        assert "make sure its inputs hold tensors" not in c.fix


def test_a_standard_library_generator_met_while_a_compiled_step_runs_backward_needs_no_fix():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    @torch.compile(backend="aot_eager")
    def train_step(inp, target):  # the whole step compiled, as users try first
        loss = ((net(inp) - target) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    table = watched(lambda: [train_step(torch.randn(16, 8), torch.randn(16, 4)) for _ in range(2)])
    library = [r for r in table.rows if r.failed and r.function.startswith("<genexpr> (inspect.py")]
    assert library, table.to_text()  # AOTAutograd's lazy backward compile meets inspect's generator
    (cause,) = [c for c in library[0].causes if c.kind == "failed"]
    assert cause.fix.startswith("none needed: library code, met while your line test_watch_blind44.py:")
    assert cause.fix.endswith("(loss.backward()) ran eagerly")
