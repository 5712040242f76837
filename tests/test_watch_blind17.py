"""tl.watch() checked blind, seventeenth round and round 16's leftovers: a recompile is told against the
graph of its own code path (a PEFT adapter's flag matched, its scaling changed), a number logged with
``.item()`` is told to stay a tensor (capture_scalar_outputs would trace the logging and recompile as its
list grows), and the values a line left pending when its call broke are named as the line writes them.
Checked against Dynamo's own records too."""

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


class LoraLinear(torch.nn.Module):  # PEFT's LoRA layer: a flag to switch it off, a scaling per adapter
    def __init__(self, d=8):
        super().__init__()
        self.base, self.a, self.b = torch.nn.Linear(d, d), torch.nn.Linear(d, 2), torch.nn.Linear(2, d)
        self.scaling, self.disable_adapters = {"default": 2.0}, False

    def forward(self, x):
        out = self.base(x)
        if self.disable_adapters:
            return out
        return out + self.b(self.a(x)) * self.scaling["default"]


def test_a_recompile_is_told_against_the_graph_whose_flags_match_not_the_last_one(dynamo):
    layer = LoraLinear()
    f = torch.compile(layer, backend=BACKEND)
    with tl.watch() as w:
        x = torch.randn(2, 8)
        f(x)
        layer.disable_adapters = True  # TRL's DPO reference pass, then back
        f(x)
        layer.disable_adapters = False
        layer.scaling["default"] = 1.0  # PEFT's set_scale: the graph with adapters on fails on this
        f(x)
    check_against_dynamo(w, dynamo, also=("disable_adapters", "scaling"))
    on, off = w.table.rows  # a row per value of the flag, in the order first compiled
    assert on.signature.endswith("self.disable_adapters: False") and on.compiles == 2
    assert off.signature.endswith("self.disable_adapters: True") and off.compiles == 1
    (scaling,) = [c for c in on.causes if c.kind != "first"]  # the third compile, against the graph adapters on
    assert scaling.words.startswith("Python float self.scaling['default'] changed (was 2.0)"), scaling.words
    (flag,) = off.causes
    assert flag.kind == "flag" and "self.disable_adapters was False" in flag.words


net = torch.nn.Linear(8, 3)
logged = []


def log(name, value):  # Lightning's self.log: the number goes to a Python list
    logged.append((name, value))


def training_step(batch, batch_idx):
    x, y = batch
    loss = F.cross_entropy(net(x), y)
    if batch_idx % 2 == 0:
        log("train_loss", loss.item())
    return loss


def test_a_number_logged_with_item_is_told_to_stay_a_tensor_not_capture_scalar_outputs(dynamo):
    f = torch.compile(training_step, backend=BACKEND)
    with tl.watch() as w:
        for batch_idx in range(4):
            f((torch.randn(4, 8), torch.randint(0, 3, (4,))), batch_idx).backward()
    check_against_dynamo(w, dynamo)
    (item,) = {b.fix for b in w.table.breaks}
    assert item.startswith("keep loss a tensor inside the compiled function (return it, or store loss.detach())")
    assert "Set torch._dynamo.config.capture_scalar_outputs" not in item
    (resumed,) = [r for r in w.table if "after the graph break" in r.function]
    assert "log's argument 1: str 'train_loss', loss.item(): float" in resumed.signature


class Schedule:  # diffusers' DDIMScheduler.step: the previous alpha picked with torch.where from a table
    def __init__(self):
        self.table, self.final = torch.linspace(1.0, 0.1, 10), torch.tensor(1.0)

    def prev_alpha(self, t, x):
        return torch.where(t > 0, self.table[t.item() - 1], x + self.final)


def test_the_values_a_line_left_pending_at_its_break_are_named_as_the_line_writes_them(dynamo):
    f = torch.compile(Schedule().prev_alpha, backend=BACKEND)
    with tl.watch() as w:
        f(torch.tensor(3), torch.randn(()))
    check_against_dynamo(w, dynamo)
    (resumed,) = [r for r in w.table if "after the graph break" in r.function]
    assert resumed.signature.startswith("where: function, t > 0: bool[], self.table: f32[10], t.item(): int 3")
    assert "carried value" not in resumed.signature


class PerImageHead(torch.nn.Module):  # torchvision-style post-processing: a Python loop over the batch
    def forward(self, images):
        scores = images.flatten(1).sigmoid()
        results = []
        for i in range(images.shape[0]):
            results.append(scores[i].amax(-1))
        return torch.stack(results)


def test_a_marked_size_the_code_fixes_names_the_line_and_counts_the_call_that_raised(dynamo):
    f = torch.compile(PerImageHead(), backend=BACKEND)
    raised = 0
    with tl.watch() as w:
        for batch in (2, 3):
            images = torch.randn(batch, 4)
            torch._dynamo.mark_dynamic(images, 0)
            try:
                f(images)
            except Exception:  # ConstraintViolationError, re-raised by Dynamo
                raised += 1
    check_against_dynamo(w, dynamo)
    loop = PerImageHead.forward.__code__.co_firstlineno + 3
    assert raised == 2 and [r.raised for r in w.table.rows] == [1, 1]
    for row, size in zip(w.table.rows, (2, 3), strict=True):
        (failed,) = row.causes
        assert f"but the code fixes it at {size} at test_watch_blind17.py:{loop} (for i in range(images.shape[0]))" in (
            failed.words
        )
    assert "0 (1 failed) (1 raised)" in str(w.table)


def test_mark_unbacked_told_before_a_later_graph_found_the_users_bound_is_withdrawn(dynamo):
    from test_watch_blind14b import TinyGPT  # nanoGPT's forward: assert t <= self.block_size

    model = torch.compile(TinyGPT(), backend=BACKEND)
    with tl.watch() as w:
        for t in (16, 1, 2, 3):  # the 16 -> 1 compile comes before the graph that holds the assert's bound
            model(torch.randint(0, 64, (1, t)))
    check_against_dynamo(w, dynamo)
    fixes = [c.fix for r in w.table for c in r.causes if c.kind == "size"]
    assert len(fixes) >= 2 and not any("mark_unbacked(idx, 1)" in f for f in fixes), fixes
    assert all("mark_unbacked is no way out here: your code compares that size" in f for f in fixes)
    assert "mark_unbacked(idx, 1)" not in str(w.table)
