"""tl.watch() checked blind, forty-seventh round: a train/eval switch beside a size change (rl_games'
RunningMeanStd), marks said together after a graph break (the Annotated Transformer's LabelSmoothing),
NumPy ints as slice bounds (CutMix's rand_bbox), Python's random draws in compiled code (SpecAugment), and
tied inputs marked together. Each is checked against Dynamo's own account, with the printed fixes applied."""

import torch
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


class RunningNorm(torch.nn.Module):  # rl_games' RunningMeanStd: batch statistics in train, the running ones in eval
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        if self.training:
            self.mean = 0.9 * self.mean + 0.1 * x.mean(0)
        return x - self.mean


def test_a_train_eval_switch_beside_a_size_change_counts_the_compile_and_the_size_fix_saves_nothing_there():
    norm = RunningNorm()
    f = torch.compile(norm, backend="eager")

    def run():
        f(torch.randn(16, 4))
        norm.eval()
        f(torch.randn(1, 4))

    table = watched(run)
    (second,) = [r for r in table.rows if r.compiles and "first compile" not in r.cause]
    kinds = [c.kind for c in second.causes]
    assert kinds[0] == "training", kinds
    (size,) = [c for c in second.causes if c.kind == "size"]
    assert size.fix.startswith("none for this compile, which needs a graph of its own anyway (train/eval switched")


def test_marks_told_together_after_a_graph_break_keep_the_mark_dynamic_warning_after_the_last():
    @torch.compile(backend="eager")
    def smoothed(x, target):  # The Annotated Transformer's LabelSmoothing: nonzero breaks the graph
        true_dist = x * 0.9
        mask = torch.nonzero(target == 0)
        return true_dist.sum() + mask.sum() + target.sum()

    table = watched(lambda: [smoothed(torch.randn(n, 5), torch.arange(n) % 3) for n in (40, 56)])
    fix = next(c.fix for r in table.rows for c in r.causes if c.kind == "size" and "target" in c.fix)
    marks = "torch._dynamo.maybe_mark_dynamic(x, 0); torch._dynamo.maybe_mark_dynamic(target, 0)"
    assert f"{marks}, not mark_dynamic, which raises" in fix, fix


def cutmix(input, rand_index, bbx1, bby1, bbx2, bby2):  # CutMix-PyTorch's train.py, the mixing step
    input[:, :, bbx1:bbx2, bby1:bby2] = input[rand_index, :, bbx1:bbx2, bby1:bby2]
    return input


def test_numpy_ints_used_as_slice_bounds_are_named_as_numpy_scalars_and_int_of_them_compiles():
    import numpy as np

    f = torch.compile(cutmix, backend="aot_eager")
    bounds = [np.clip(np.int64(v), 0, 8) for v in (2, 1, 6, 7)]  # rand_bbox's np.clip: np.int64
    table = watched(lambda: f(torch.randn(4, 3, 8, 8), torch.randperm(4), *bounds))
    (row,) = [r for r in table.rows if r.failed]
    (failed,) = [c for c in row.causes if c.kind == "failed"]
    assert "bbx1, bby1, bbx2, bby2 are NumPy scalars (np.int64), which Dynamo traces as 0-d tensors" in failed.words
    assert failed.fix.startswith("pass Python numbers: int(...) around each where it is made")
    torch._dynamo.reset()
    fixed = watched(lambda: f(torch.randn(4, 3, 8, 8), torch.randperm(4), *(int(b) for b in bounds)))
    assert fixed.total_compiles == 1 and not any(r.failed for r in fixed.rows)  # the fix as printed


def freq_mask(spec, F=8):  # zcaceres/spec_augment's SpecAugment.ipynb, one mask
    import random

    cloned = spec.clone()
    f = random.randrange(0, F)
    f_zero = random.randrange(0, cloned.shape[1] - f)
    cloned[0][f_zero : f_zero + f] = cloned.mean()
    return cloned


def tensor_freq_mask(spec, F=8):  # the fix as printed: torch draws, the mask by comparison with torch.arange
    f = torch.randint(0, F, ())
    f_zero = torch.randint(0, spec.shape[1] - F + 1, ())
    rows = torch.arange(spec.shape[1]).view(1, -1, 1)
    return torch.where((rows >= f_zero) & (rows < f_zero + f), spec.mean(), spec)


def test_a_python_random_draw_met_by_int_arithmetic_is_named_as_the_draw_and_the_tensor_mask_holds():
    f = torch.compile(freq_mask, backend="eager")
    table = watched(lambda: [f(torch.randn(1, 40, t)) for t in (100, 120)])
    said = [c for r in table.rows for c in r.causes if c.kind == "failed"] + list(table.breaks)
    drawn = [c for c in said if "a Python random draw Dynamo passes into the graph as a tensor" in c.words]
    assert drawn and all("torch.randint for the bounds" in c.fix for c in drawn), [c.words for c in said]
    g = torch.compile(tensor_freq_mask, backend="eager")
    fixed = watched(lambda: [g(torch.randn(1, 40, t)) for t in (100, 120, 90)])
    assert not fixed.breaks and not any(r.failed for r in fixed.rows) and fixed.total_compiles <= 2


def test_tied_inputs_named_labels_among_others_are_each_marked_and_the_marks_applied_hold():
    tower = torch.nn.Embedding(100, 4)  # a two-tower CTR evaluate: ids and labels from one batch

    @torch.compile(backend="eager")
    def evaluate(user_ids, item_ids, labels):
        return ((tower(user_ids) * tower(item_ids)).sum(-1) - labels).pow(2).mean()

    def batch(n):
        return torch.randint(0, 100, (n,)), torch.randint(0, 100, (n,)), torch.rand(n)

    table = watched(lambda: [evaluate(*batch(n)) for n in (64, 50)])
    (size,) = [c for r in table.rows for c in r.causes if c.kind == "size"]
    for name in ("user_ids", "item_ids", "labels"):
        assert f"torch._dynamo.maybe_mark_dynamic({name}, 0)" in size.fix, size.fix

    def marked():
        for n in (64, 50, 40):
            inputs = batch(n)
            for t in inputs:
                torch._dynamo.maybe_mark_dynamic(t, 0)
            evaluate(*inputs)

    torch._dynamo.reset()
    assert watched(marked).total_compiles == 1  # the marks as printed


def test_a_list_built_before_a_break_from_the_data_is_no_container_that_grows():
    @torch.compile(backend="eager")
    def decode(emission):  # torchaudio's GreedyCTCDecoder: the kept tokens, read back as a list
        indices = torch.unique_consecutive(torch.argmax(emission, dim=-1))
        kept = indices.tolist()
        return torch.stack([emission[0, i] for i in kept]).sum()

    table = watched(lambda: [decode(torch.eye(10)[:n] * 3) for n in (3, 5, 8, 9)])
    said = [c for r in table.rows for c in r.causes if c.kind == "length" and c.count]
    assert said and not any("grows" in c.words for c in said), [c.words for c in said]
    assert any(c.words.startswith("kept had another length at every compile (before: 3, 5") for c in said)
    assert all(c.fix.startswith("remove the graph break before it") for c in said if "another length" in c.words)


def test_dynamos_stand_in_for_a_profiler_region_is_never_shown_as_an_input():
    import warnings

    @torch.compile(backend="eager")
    def attention(x, head_mask=None):  # a deprecation warning inside a profiler region breaks the graph
        with torch.profiler.record_function("attention"):
            if head_mask is not None:
                warnings.warn("head_mask is deprecated", FutureWarning, stacklevel=2)
            return x.softmax(-1) * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = watched(lambda: attention(torch.randn(2, 4), torch.ones(2, 4)))
    assert table.breaks and "nullcontext" not in table.to_text()
    assert all("Dynamo cannot trace this builtin and runs it eagerly" in b.fix for b in table.breaks), table.breaks
