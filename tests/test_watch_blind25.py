"""tl.watch() checked blind, twenty-fifth round: a Python int that torch needs as one fixed value (a group
count) is told as such, never "pass it as a tensor"; an nn.Module's int attribute reached through a
container (``model[1].window``), which Dynamo keeps static, is never claimed "made dynamic", and the fix
is Dynamo's own setting, which the test applies as printed; several values carried over one graph break
are each named as the line calls them, in the words and in the guards shown. Checked against Dynamo's records."""

import re

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def norm(x, num_groups):
    return F.group_norm(x, num_groups) * 2


def test_a_group_count_torch_needs_fixed_is_never_told_to_be_a_tensor(dynamo):
    f = torch.compile(norm, backend=BACKEND)
    with tl.watch() as w:
        for g in (2, 4, 8):
            f(torch.randn(3, 8, 5), g)
    check_against_dynamo(w, dynamo)
    causes = [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")]
    assert len(causes) == 2 and w.table.total_compiles == 3, causes
    for c in causes:
        assert "torch's group_norm needs it as one fixed value" in c.words, c.words
        assert "from your line" in c.words and "F.group_norm(x, num_groups)" in c.words, c.words
        assert "torch.tensor(" not in c.fix and "recompile_limit" in c.fix, c.fix


class Local(torch.nn.Module):  # local attention: a window the training schedule widens
    def __init__(self, window):
        super().__init__()
        self.window = window

    def forward(self, x):
        s = x @ x.transpose(-1, -2)
        mask = torch.triu(torch.ones_like(s, dtype=torch.bool), diagonal=self.window)
        return s.masked_fill(mask, 0.0).softmax(-1) @ x


def step(model, x):
    return model(x).sum()


def run_windows(model, f):
    for win in (1, 2, 3, 4):
        model[1].window = win
        f(model, torch.randn(2, 6, 8))


def test_a_submodule_int_attribute_is_kept_static_and_the_printed_setting_makes_it_dynamic(dynamo):
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), Local(1))
    f = torch.compile(step, backend=BACKEND)
    with tl.watch() as w:
        run_windows(net, f)
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    assert row.compiles == 4
    windows = [c for c in row.causes if "model[1].window" in c.words]
    assert len(windows) == 3 and len({c.fix for c in windows}) == 1, windows
    for c in windows:
        assert "made model[1].window dynamic" not in c.words, c.words  # four graphs: it was not
        assert "Dynamo keeps an nn.Module's int attribute static" in c.words, c.words
    setting = re.search(r"torch\._dynamo\.config\.(\w+) = True", windows[0].fix)
    assert setting and "torch.tensor(" not in windows[0].fix, windows[0].fix
    torch._dynamo.reset()
    with torch._dynamo.config.patch(**{setting[1]: True}), tl.watch() as w2:  # the fix as printed
        run_windows(net, torch.compile(step, backend=BACKEND))
    assert w2.table.total_compiles == 2  # one recompile makes it dynamic; later windows reuse that graph


@torch.compiler.disable
def grouped(h, g):
    return F.group_norm(h, g)


def residual_norm(x, num_groups):
    h = x * 2
    return h + grouped(h, num_groups) * 2


def test_several_values_carried_over_one_break_are_each_named_as_the_line_calls_them(dynamo):
    f = torch.compile(residual_norm, backend=BACKEND)
    with tl.watch() as w:
        for c in (8, 16, 24):
            f(torch.randn(3, c, 5), 4)
    check_against_dynamo(w, dynamo, also=("___stack1",))  # Dynamo logs the first carried value's only
    text = str(w.table)
    assert "the carried value" not in text, text
    resumed = [c for r in w.table for c in r.causes if "after the graph break" in r.function]
    dynamic = " ".join(c.words for c in resumed if c.kind == "dynamic")
    assert "grouped(h, num_groups) dim 1" in dynamic and "h dim 1" in dynamic, dynamic
    (size,) = [c for c in resumed if c.kind not in ("first", "dynamic")]
    assert size.words.startswith("h and grouped(h, num_groups) changed size (dimension 1: 8 -> 16)"), size.words
    for carried in ("h", "grouped(h, num_groups)"):
        assert f"tensor '{carried}' size mismatch" in size.shown_guard, size.shown_guard
