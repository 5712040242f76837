"""tl.watch() checked blind, fifty-third round, with rounds 51 and 52's leftovers: a cache the module's own
forward rewrites (YOLOv5's detection grid), a hook library replacing forward, warn_only, a float a torch Python
API also takes as a tensor (mixup's Beta), a number read back into a list a branch tests (an Anderson solver), a
rule on a masked size (OHEM), a break inside fork_rng, and a frame Dynamo fails on at every call. Each is checked
against Dynamo's own account, with the printed fixes applied."""

from pathlib import Path

import pytest
import torch
from _dynamo_oracle import watched_clean

_OLD_DYNAMO = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15)


def watched(run):
    return watched_clean(run)[0]


class Detect(torch.nn.Module):  # ultralytics/yolov5 models/yolo.py, trimmed: one grid per level, cached
    def __init__(self, dynamic=False):
        super().__init__()
        self.m = torch.nn.ModuleList(torch.nn.Conv2d(c, 6, 1) for c in (4, 8))
        self.grid = [torch.empty(0) for _ in range(2)]
        self.dynamic = dynamic

    def forward(self, x):
        z = []
        for i in range(2):
            y = self.m[i](x[i])
            ny, nx = y.shape[2:]
            if self.dynamic or self.grid[i].shape[2:4] != y.shape[2:4]:
                self.grid[i] = self._make_grid(nx, ny)
            z.append((y.sigmoid()[:, :2] * 2 + self.grid[i]).flatten(1))
        return torch.cat(z, 1)

    def _make_grid(self, nx, ny):
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        return torch.stack((xv, yv), 0).unsqueeze(0).float()


class Net(torch.nn.Module):
    def __init__(self, dynamic=False):
        super().__init__()
        self.b1 = torch.nn.Conv2d(3, 4, 3, stride=8, padding=1)
        self.b2 = torch.nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.detect = Detect(dynamic)

    def forward(self, im):
        p3 = self.b1(im)
        return self.detect([p3, self.b2(p3)])


def _sizes(net):
    f = torch.compile(net.eval(), backend="aot_eager")
    with torch.no_grad():
        return watched(lambda: [f(torch.randn(1, 3, s, s)) for s in (64, 64, 96, 64, 128)])


def test_a_cache_the_modules_forward_rewrites_is_named_with_its_line_and_computing_it_each_call_saves_compiles():
    table = _sizes(Net())
    told = [c for r in table.rows for c in r.causes if c.kind == "rewritten"]
    assert told, [c.words for r in table.rows for c in r.causes]
    line = next(
        i for i, s in enumerate(Path(__file__).read_text().splitlines(), 1) if "self.grid[i] = self._make_grid" in s
    )
    assert all(
        f"Detect.forward (test_watch_blind53.py:{line}: self.grid[i] = self._make_grid(nx, ny))" in c.words
        for c in told
    )
    assert all("compute it inside the call from the input every time" in c.fix for c in told)
    said = [c for r in table.rows for c in r.causes]
    assert not any("final rank" in c.fix or "have 5 dimensions" in c.words for c in said), said
    # the graph held for 64 px is told stale (the grid rewritten at 96 px), never the placeholder's rank again
    assert sum(c.count for c in told) == table.total_compiles - 2, (told, table.total_compiles)
    torch._dynamo.reset()
    assert _sizes(Net(dynamic=True)).total_compiles < table.total_compiles  # the fix: the grid built every call


def test_a_mark_before_the_first_call_is_not_offered_where_the_first_sizes_fail_a_condition_inside_torch():
    table = _sizes(Net())
    fixes = [c.fix for r in table.rows for c in r.causes if c.kind == "size" and "Dynamo made im dim" in c.fix]
    assert fixes and all("mark_dynamic" not in f and "would not skip this one" in f for f in fixes), fixes
    torch._dynamo.reset()
    marked = torch.compile(Net().eval(), backend="aot_eager")  # the mark, applied: it saves nothing
    with torch.no_grad():
        first = torch.randn(1, 3, 64, 64)
        torch._dynamo.maybe_mark_dynamic(first, 2)
        torch._dynamo.maybe_mark_dynamic(first, 3)
        again = watched(lambda: [marked(first), marked(torch.randn(1, 3, 96, 96))])
    assert again.total_compiles == 2


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def test_a_hook_library_replacing_forward_is_named_and_popping_the_leftover_forward_saves_a_compile():
    from accelerate.hooks import ModelHook, add_hook_to_module, remove_hook_from_module

    def run(model, pop):
        f, x = torch.compile(model, backend="aot_eager"), torch.randn(4, 8)
        with torch.no_grad():
            f(x)
            add_hook_to_module(model.fc2, ModelHook())  # accelerate's hooks API, after the compile
            f(x)
            remove_hook_from_module(model.fc2)
            if pop:  # the printed fix, applied
                model.fc2.__dict__.pop("forward", None)
            f(x)

    table = watched(lambda: run(MLP(), pop=False))
    told = [c for r in table.rows for c in r.causes if "forward was set on the instance" in c.words]
    assert told and all("mlp.fc2.__dict__.pop('forward', None), mlp being your MLP module" in c.fix for c in told), told
    assert not any("a setting the code reads" in c.words for r in table.rows for c in r.causes)
    torch._dynamo.reset()
    assert watched(lambda: run(MLP(), pop=True)).total_compiles < table.total_compiles


def test_the_deterministic_switch_and_its_warn_only_are_told_apart():
    f = torch.compile(lambda x: x * 2, backend="eager")

    def run():
        try:
            f(torch.ones(2))
            torch.use_deterministic_algorithms(True)
            f(torch.ones(2))
            torch.use_deterministic_algorithms(True, warn_only=True)  # only warn_only changes
            f(torch.ones(2))
        finally:
            torch.use_deterministic_algorithms(False)

    said = [c.words for r in watched(run).rows for c in r.causes]
    assert said[1:] == [
        "torch.use_deterministic_algorithms() was switched",
        "torch.use_deterministic_algorithms(warn_only=...) was switched (a nondeterministic op warns or raises)",
    ], said


def mixup(x, alpha):  # mixup's weight drawn from torch.distributions.Beta inside the compiled step
    lam = torch.distributions.Beta(alpha, alpha).sample()
    return lam * x + (1 - lam) * x.flip(0)


def test_a_float_a_torch_python_api_also_takes_as_a_tensor_is_told_to_be_passed_as_one_and_that_keeps_one_graph():
    alphas = (0.2, 0.2, 0.4, 1.0)
    f = torch.compile(mixup, backend="aot_eager")
    table = watched(lambda: [f(torch.randn(8, 3), a) for a in alphas])
    fixes = [c.fix for r in table.rows for c in r.causes if c.kind not in ("first",)]
    assert table.total_compiles > 1 and fixes, fixes
    assert all("pass it as a 0-d tensor" in x and "would not do" not in x for x in fixes), fixes
    torch._dynamo.reset()
    g = torch.compile(mixup, backend="aot_eager")  # the fix, applied
    assert watched(lambda: [g(torch.randn(8, 3), torch.tensor(a)) for a in alphas]).total_compiles == 1


def solve(f, x, max_iter=6, tol=1e-3):  # Anderson-style solver of the Deep Implicit Layers tutorial, trimmed
    res = []
    for _k in range(max_iter):
        y = f(x)
        res.append((y - x).norm().item() / (1e-5 + y.norm().item()))
        if res[-1] < tol:
            break
        x = y
    return x


def test_a_number_read_back_into_a_list_a_branch_then_tests_is_never_told_capture_scalar_outputs():
    f = torch.compile(solve, backend="aot_eager")
    table = watched(lambda: f(lambda v: 0.5 * v + 1, torch.randn(4)))
    item = [b for b in table.breaks if "item()" in b.words]
    assert item and all("decides Python control flow" in b.fix for b in item), [b.fix for b in item]
    assert not any("capture_scalar_outputs = True" in b.fix for b in item)
    torch._dynamo.reset()
    torch._dynamo.config.capture_scalar_outputs = True  # Dynamo's own hint, applied: the break only moves
    try:
        moved = watched(lambda: torch.compile(solve, backend="aot_eager")(lambda v: 0.5 * v + 1, torch.randn(4)))
    finally:
        torch._dynamo.config.capture_scalar_outputs = False
    assert moved.breaks and not any("item()" in b.words for b in moved.breaks), [b.words for b in moved.breaks]


class Ohem(torch.nn.Module):  # BiSeNet's OhemCELoss, trimmed: keep at least n_min of the hardest pixels
    def forward(self, loss, n_min: int):
        hard = loss[loss > 0.5]
        if hard.numel() < n_min:
            hard, _ = loss.topk(n_min)
        return hard.mean()


def test_a_check_of_a_rule_on_a_masked_size_is_told_to_be_made_branchless_never_to_be_removed():
    f = torch.compile(Ohem(), backend="aot_eager")
    table = watched(lambda: [f(torch.rand(64), 8) for _ in range(2)])
    masked = [b for b in table.breaks if "boolean mask" in b.words]
    assert masked, [b.words for b in table.breaks]
    assert all("without a Python branch" in b.fix and "remove the check" not in b.fix for b in masked), masked


def masked_kspace(kspace, seed):  # fastMRI's mask drawn under a temporary seed, with torch.random.fork_rng
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        mask = torch.rand(kspace.shape[-1]) < 0.3
    return kspace * mask


@pytest.mark.skipif(_OLD_DYNAMO, reason="torch 2.13's Dynamo breaks on entering fork_rng, not inside torch/random.py")
def test_a_break_inside_a_library_context_manager_names_the_with_block_to_move_out():
    f = torch.compile(masked_kspace, backend="aot_eager")
    table = watched(lambda: f(torch.randn(2, 8), 3))
    inside = [b for b in table.breaks if "library code" in b.words]
    assert inside and all("move the with block (with torch.random.fork_rng():)" in b.fix for b in inside), inside


def hooked(x, w):  # a DEQ's backward hook solving with autograd.grad (the tutorial's, trimmed)
    z = x * w
    z0 = z.detach().requires_grad_()
    f0 = (z0 * 2).sum()

    def hook(grad):
        return torch.autograd.grad(f0, z0, retain_graph=True)[0] + grad

    z.register_hook(hook)
    return z


@pytest.mark.skipif(_OLD_DYNAMO, reason="torch 2.13's Dynamo breaks before the hook and compiles the rest")
def test_a_frame_that_fails_at_every_call_is_said_to_be_tried_again_each_time():
    f, w = torch.compile(hooked, backend="aot_eager"), torch.randn(3, requires_grad=True)
    table = watched(lambda: [f(torch.randn(3), w).sum().backward() for _ in range(3)])
    (row,) = [r for r in table.rows if r.failed]
    assert row.failed == 3, row
    assert all("tries to compile it again at each call and fails each time" in c.words for c in row.causes), row.causes


def graph_readout(x, num_nodes):  # torch_geometric's batch vector, then a global add pool, trimmed
    batch = torch.repeat_interleave(torch.arange(num_nodes.numel()), num_nodes)
    return torch.zeros(num_nodes.numel(), x.size(1)).index_add(0, batch, x)


def with_output_size(x, num_nodes):  # the printed fix, applied
    batch = torch.repeat_interleave(torch.arange(num_nodes.numel()), num_nodes, output_size=x.size(0))
    return torch.zeros(num_nodes.numel(), x.size(1)).index_add(0, batch, x)


def test_repeat_interleaves_break_is_told_its_own_output_size_argument_and_that_removes_it():
    nodes = torch.tensor([3, 2, 4])
    table = watched(lambda: torch.compile(graph_readout, backend="aot_eager")(torch.randn(9, 4), nodes))
    told = [b for b in table.breaks if "repeat_interleave" in b.words]
    assert told and all("output_size=" in b.fix for b in told), [b.fix for b in table.breaks]
    torch._dynamo.reset()
    fixed = watched(lambda: torch.compile(with_output_size, backend="aot_eager")(torch.randn(9, 4), nodes))
    assert not any("repeat_interleave" in b.words for b in fixed.breaks), [b.words for b in fixed.breaks]
