"""tl.watch() checked blind, twenty-seventh round: a memo dict a module fills inside forward is a cache
filled on a miss whatever forward calls its module (``s``, not ``self``), with the cache's fix, never "pass
the dict with the same keys"; a step counter a module bumps in forward is one cause said alike at every
compile, the first and the refusal at the limit included, and the printed setting works when applied;
Dynamo's ``___dict_contains`` helper is shown as ``in``; a tuple of task names that changes length is a code
path, never "pass one stacked tensor"; a recompile that fails one guard on each of several graphs is told
against the graph of the same type (an attribute changed), not one of another type. Checked against
Dynamo's records."""

import re

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl
from tpu_lab.compile.causes.guard_containers import CACHE_FIX

BACKEND = "eager"


class PositionalMemo(torch.nn.Module):  # a 2-D positional encoding memoised by an f-string key
    def __init__(s):
        super().__init__()
        s.cache, s.proj = {}, torch.nn.Linear(4, 4)

    def forward(s, feat):
        h, w = feat.shape[-2:]
        key = f"{h}x{w}"
        if key not in s.cache:
            ys, xs = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
            s.cache[key] = torch.stack([ys, xs, ys * xs, ys - xs])
        return feat + s.proj(s.cache[key].permute(1, 2, 0)).permute(2, 0, 1)


def test_a_memo_a_module_fills_in_forward_is_a_cache_whatever_its_self_is_called(dynamo):
    f = torch.compile(PositionalMemo(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for hw in ((8, 8), (8, 8), (12, 8), (12, 8), (16, 8)):
            f(torch.randn(2, 4, *hw))
    check_against_dynamo(w, dynamo, also=("not s.cache", "len(s.cache)"))  # logged beside the key's guard
    keys = [c for r in w.table for c in r.causes if c.kind == "dict_keys"]
    assert len(keys) == 2 and all("a cache filled on a miss" in c.words and c.fix == CACHE_FIX for c in keys), keys
    text = w.table.to_text()
    assert "pass the dict with the same keys" not in text and "keep what grows out" not in text, text
    assert "'8x8' not in s.cache" in text and "___dict_contains" not in text, text


class Warmup(torch.nn.Module):  # a residual scaled up over the first steps, counted inside forward
    def __init__(s, warmup=20):
        super().__init__()
        s.ff, s.warmup, s.step = torch.nn.Linear(8, 8), warmup, 0

    def forward(s, x):
        if s.training:
            s.step += 1
        alpha = min(1.0, s.step / s.warmup)
        return x + alpha * s.ff(x)


def test_a_step_counter_on_a_module_is_one_cause_said_alike_and_the_printed_setting_works(dynamo):
    f = torch.compile(Warmup(), backend=BACKEND)
    with tl.watch() as w:
        for _ in range(10):
            f(torch.randn(2, 8))
    check_against_dynamo(w, dynamo)
    steps = [c for r in w.table for c in r.causes if c.kind in ("value", "limit")]
    assert len(steps) == 8 and len({c.fix for c in steps}) == 1, steps
    assert all("Dynamo keeps an nn.Module's int attribute static" in c.words for c in steps), steps
    setting = re.search(r"torch\._dynamo\.config\.(\w+) = True", steps[0].fix)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(**{setting[1]: True}), tl.watch() as fixed:  # the fix as printed
        g = torch.compile(Warmup(), backend=BACKEND)
        for _ in range(10):
            g(torch.randn(2, 8))
    assert fixed.table.total_compiles == 2 and not fixed.table.limit_hit


class MultiTask(torch.nn.Module):  # the heads a batch needs, named by a tuple of task names
    def __init__(s):
        super().__init__()
        s.enc = torch.nn.Linear(6, 8)
        s.heads = torch.nn.ModuleDict({"cls": torch.nn.Linear(8, 4), "reg": torch.nn.Linear(8, 1)})

    def forward(s, x, tasks):
        h = s.enc(x).relu()
        return {t: s.heads[t](h) for t in tasks}


def test_a_tuple_of_task_names_that_changes_length_is_a_code_path_not_a_list_of_images(dynamo):
    f = torch.compile(MultiTask(), backend=BACKEND)
    with tl.watch() as w:
        for tasks in (("cls", "reg"), ("cls",), ("cls", "reg")):
            f(torch.randn(3, 6), tasks)
    check_against_dynamo(w, dynamo)
    (length,) = [c for r in w.table for c in r.causes if c.kind == "length"]
    assert length.fix.startswith("expected once per length: items that are not tensors"), length.fix
    assert "stacked tensor" not in length.fix and "images" not in length.fix, length.fix


class SwappedAct(torch.nn.Module):  # an ablation in a notebook: the activation swapped between runs
    def __init__(s):
        super().__init__()
        s.fc1, s.act, s.fc2 = torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)

    def forward(s, x):
        return s.fc2(s.act(s.fc1(x)))


def test_a_recompile_tied_between_graphs_is_told_against_the_one_of_the_same_type(dynamo):
    net = SwappedAct()
    f = torch.compile(net, backend=BACKEND)
    with tl.watch() as w:
        for act in (torch.nn.ReLU(), torch.nn.GELU(), torch.nn.SiLU(), torch.nn.GELU(approximate="tanh")):
            net.act = act
            f(torch.randn(4, 8))
    check_against_dynamo(w, dynamo)
    # the last call fails one guard on each graph: ReLU's and SiLU's on the type, GELU's on approximate
    last = [c for r in w.table for c in r.causes if "approximate" in c.guard]
    assert [c.words for c in last] == [
        "Python string s.act.approximate changed (was 'none'; its value is baked into the graph)"
    ], str(w.table)
    assert sum(c.count for r in w.table for c in r.causes if c.kind == "type") == 2  # was 3: "now a GELU, was a SiLU"
