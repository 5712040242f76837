"""tl.watch() checked blind, sixteenth round: a model whose forward calls a logging helper wrapped in
torch.compiler.disable (a graph break) was told to mark its input with mark_dynamic; the part after the break
adds that input to a fresh tensor of fixed size, so the mark raised ConstraintViolationError on the first call.
Checked against Dynamo's own records too."""

import math

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"
seen = []


@torch.compiler.disable
def record_activation_stats(name, t):  # wandb/tensorboard-style logging, kept out of the graph
    seen.append((name, float(t.abs().mean())))


class Block(torch.nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x):
        h = torch.nn.functional.silu(self.fc1(x))
        record_activation_stats("mlp", h)
        return x + self.fc2(h)


def test_a_function_with_a_graph_break_is_told_maybe_mark_dynamic_and_that_fix_runs(dynamo):
    block = torch.compile(Block(), backend=BACKEND)
    with tl.watch() as w:
        for batch in (8, 8, 3):  # the last, smaller batch
            block(torch.randn(batch, 8)).sum().backward()
    check_against_dynamo(w, dynamo)
    (size,) = [c for r in w.table.by_function("Block.forward (") for c in r.causes if c.kind == "size"]
    assert "torch._dynamo.maybe_mark_dynamic(x, 0), not mark_dynamic" in size.fix
    assert "torch._dynamo.mark_dynamic(" not in size.fix
    fixed = torch.compile(Block(), backend=BACKEND)
    for batch in (8, 8, 3):  # the fix as printed: it must run (mark_dynamic raised here)
        x = torch.randn(batch, 8)
        torch._dynamo.maybe_mark_dynamic(x, 0)
        fixed(x).sum().backward()


class ModelEMA:  # YOLOv5's utils/torch_utils.py: the decay ramps up with a Python int counter through math.exp
    def __init__(self, model, decay=0.9999, tau=2000):
        self.ema, self.updates = torch.nn.Linear(4, 4), 0
        self.ema.load_state_dict(model.state_dict())
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        for e, m in zip(self.ema.parameters(), model.parameters(), strict=True):
            e.detach().mul_(d).add_((1 - d) * m.detach())


def test_a_counter_through_math_exp_is_said_baked_in_each_value_a_graph_never_reused(dynamo):
    model = torch.nn.Linear(4, 4)
    ema = ModelEMA(model)
    update = torch.compile(ema.update, backend=BACKEND)
    with tl.watch() as w:
        for _ in range(5):
            update(model)
    check_against_dynamo(w, dynamo)
    causes = [c for r in w.table for c in r.causes if c.kind not in ("first",)]
    assert len([c for c in causes if c.count]) == 4  # one graph per value: nothing is reused
    assert not any("so later values reuse this graph" in c.words or "each side of it" in c.words for c in causes)
    held = [c for c in causes if c.words.startswith("a value computed from self.updates is baked into this graph")]
    assert held and all(c.words.endswith("each new value of self.updates compiles a graph of its own") for c in held)
    assert all("math.exp" in c.fix and "outside the compiled function" in c.fix for c in causes if c.count)


def test_a_size_the_users_assert_compares_is_never_told_mark_unbacked_once_the_bound_is_known(dynamo):
    from test_watch_blind14b import TinyGPT  # nanoGPT's forward: assert t <= self.block_size

    model = torch.compile(TinyGPT(), backend=BACKEND)
    with tl.watch() as w:
        for t in (16, 1, 2, 3):  # a training length, then generate()'s growing context from one token
            model(torch.randint(0, 64, (1, t)))
    check_against_dynamo(w, dynamo)
    bounded = [c for r in w.table for c in r.causes if "from your line" in c.fix and "assert t <=" in c.fix]
    assert bounded and all("mark_unbacked(" not in c.fix for c in bounded)  # it broke the graph at the assert
    assert any("mark_unbacked is no way out here: your code compares that size" in c.fix for c in bounded)


class LanguageModel(torch.nn.Module):  # nanoGPT's forward: a loss when targets are given, else the last logits
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(4, 4)

    def forward(self, idx, targets=None):
        logits = self.head(idx)
        if targets is not None:
            return (logits - targets).pow(2).mean()
        return logits[:, -1]


def test_targets_passed_in_training_and_none_in_generation_is_the_cause_that_counts(dynamo):
    model = torch.compile(LanguageModel(), backend=BACKEND)
    with tl.watch() as w:
        model(torch.randn(4, 3, 4), torch.randn(4, 3, 4))
        with torch.no_grad():  # sampling: one sequence, no targets
            model(torch.randn(1, 1, 4))
    check_against_dynamo(w, dynamo, also=("targets", "grad_mode", "'idx' size mismatch"))
    second = [c for c in w.table.rows[1].causes if c.kind != "first"]
    assert second[0].words == "targets is now None, was a tensor (each case is its own graph)" and second[0].count == 1
    assert all(c.count == 0 for c in second[1:])  # grad mode and the sizes are said with it


class LoraLinear(torch.nn.Module):  # PEFT's LoRA layer: disable_adapter() switches a flag on every layer
    def __init__(self, d=8, r=2):
        super().__init__()
        self.base, self.a, self.b = torch.nn.Linear(d, d), torch.nn.Linear(d, r), torch.nn.Linear(r, d)
        self.disable_adapters = False

    def forward(self, x):
        out = self.base(x)
        return out if self.disable_adapters else out + self.b(self.a(x))


def test_a_flag_switched_with_grad_mode_counts_the_compile_and_the_mode_fix_saves_none_here(dynamo):
    layer = LoraLinear()
    f = torch.compile(layer, backend=BACKEND)
    with tl.watch() as w:
        x = torch.randn(2, 8)
        f(x)
        layer.disable_adapters = True  # TRL's DPO: the reference pass, without adapters and without grad
        with torch.no_grad():
            f(x)
    check_against_dynamo(w, dynamo, also=("disable_adapters", "grad_mode"))
    second = [c for c in w.table.rows[1].causes if c.kind != "first"]
    assert second[0].kind == "flag" and second[0].count == 1
    mode = next(c for c in second if c.kind == "global_state")
    assert mode.count == 0 and mode.fix.startswith("none for this compile, which needs a graph of its own anyway")


def add_optional(x, y=None):
    return x * 2 if y is None else x + y


def test_dims_of_a_later_graph_under_dynamic_true_are_said_dynamic_from_its_start_not_automatic(dynamo):
    f = torch.compile(add_optional, backend=BACKEND, dynamic=True)
    with tl.watch() as w:
        f(torch.randn(4, 8))
        f(torch.randn(4, 8), torch.randn(4, 8))  # a graph of its own (y None -> a tensor), dynamic throughout
    check_against_dynamo(w, dynamo)
    notes = [c.words for r in w.table for c in r.causes if c.kind == "dynamic"]
    assert "y dim 0, y dim 1 dynamic from this graph's start (torch.compile(dynamic=True))" in notes
    assert not any("automatic dynamic" in n for n in notes)


class Schedule:  # diffusers' DDIMScheduler.step: the previous alpha picked with torch.where from a table
    def __init__(self):
        self.table, self.final = torch.linspace(1.0, 0.1, 10), torch.tensor(1.0)

    def prev_alpha(self, t):
        return torch.where(t > 0, self.table[t.item() - 1], self.final)  # .item(): a break inside the call


def test_a_break_inside_a_calls_arguments_resumes_inside_its_line_not_at_an_attribute(dynamo):
    schedule = Schedule()
    f = torch.compile(schedule.prev_alpha, backend=BACKEND)
    with tl.watch() as w:
        f(torch.tensor(3))
    check_against_dynamo(w, dynamo)
    line = Schedule.prev_alpha.__code__.co_firstlineno + 1
    (resumed,) = [r for r in w.table if "after the graph break" in r.function]
    assert f"after the graph break at line {line}, resuming inside line {line} (" in resumed.function
    assert resumed.signature.startswith("where: function")  # torch.where, about to be called
