"""tl.watch() checked blind, twenty-third round, what was left: a size held by a dict key in the user's code is
said as the range of sizes the graph keeps (never sympy) and never told to be marked dynamic; a module's own
cache that fills on a miss is called a cache; pruning (a parameter made an attribute) is said as such, and a
graph compiled before a hook is said to serve again once the hook is removed; a logger's call names the
exact method to ignore; an input that was None in an earlier graph shows as None there. Checked against
Dynamo's records."""

import logging

import torch
import torch.nn.utils.prune as prune
from _dynamo_oracle import check_against_dynamo, printed_setting_applied

import tpu_lab as tl

BACKEND = "eager"


class AnchorGenerator(torch.nn.Module):  # old torchvision: anchors cached per feature-map size on the module
    def __init__(self, stride=8):
        super().__init__()
        self.stride, self._cache = stride, {}

    def grid_anchors(self, h, w):
        key = (h, w)
        if key in self._cache:
            return self._cache[key]
        ys, xs = torch.meshgrid(torch.arange(h) * self.stride, torch.arange(w) * self.stride, indexing="ij")
        anchors = torch.stack([xs, ys, xs + self.stride, ys + self.stride], -1).reshape(-1, 4).float()
        self._cache[key] = anchors
        return anchors


class DetectionHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=8, padding=1)
        self.anchors = AnchorGenerator()
        self.reg = torch.nn.Conv2d(8, 4, 1)

    def forward(self, images):
        f = self.conv(images)
        anchors = self.anchors.grid_anchors(f.shape[-2], f.shape[-1])
        return anchors + self.reg(f).flatten(2).transpose(1, 2)


def test_a_size_held_by_a_dict_key_is_said_as_its_range_and_never_told_to_be_marked_dynamic(dynamo):
    model = torch.compile(DetectionHead(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for hw in [(64, 64), (64, 64), (96, 64), (64, 64), (128, 96)]:
            model(torch.randn(1, 3, *hw))
    check_against_dynamo(w, dynamo, also=("not self._modules['anchors']._cache", "at index 3. expected 64, actual 96"))
    text = str(w.table)
    assert "images.size()[2]) // 8" not in text and "1 + ((-1" not in text, text  # sympy, not a size range
    (size,) = [c for c in w.table.rows[1].causes if c.kind == "size"]
    assert "while 89 <= images.size()[2] <= 96 holds (from your line" in size.fix, size.fix
    assert "mark_dynamic(images" not in size.fix and not size.fix.startswith("none needed"), size.fix
    assert "pad to a few sizes (buckets)" in size.fix and "on a TPU" not in size.fix
    (cache,) = [c for c in w.table.rows[0].causes if c.kind == "dict_keys"]
    assert cache.words.startswith("dict self.anchors._cache gained the key (8, 8) (absent when this graph was")
    assert "a cache filled on a miss" in cache.words and "pass the dict" not in cache.fix


def test_pruning_is_said_as_a_parameter_made_an_attribute_and_the_graph_from_before_it_is_not_blamed(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    compiled, x = torch.compile(model, backend=BACKEND), torch.randn(8, 16)
    with tl.watch() as w:
        compiled(x).sum().backward()
        prune.l1_unstructured(model[0], name="weight", amount=0.5)  # weight -> weight_orig * mask, by a hook
        compiled(x)
        prune.remove(model[0], "weight")  # the hook goes; the first graph (no hook) fits again
        with torch.no_grad():
            model[0].weight.fill_(1.0)
        assert torch.allclose(compiled(x), model(x))  # the graph does not run the removed hook
    check_against_dynamo(w, dynamo)
    causes = [c for r in w.table for c in r.causes]
    # the pruned graph guards its hook (Dynamo traced it): removing it is no silent change, so no note
    assert not [c for c in causes if c.kind == "hooks" and not c.guard], causes
    (pruned,) = [c for c in causes if c.kind == "parameters"]
    assert pruned.words.startswith("self[0] has no parameter 'weight' now (the graph read it)"), pruned.words
    assert "torch.nn.utils.prune" in pruned.words and "before the first compiled call" in pruned.fix


def test_a_loggers_call_names_the_exact_method_to_ignore_and_that_setting_removes_the_break(dynamo):
    log = logging.getLogger("tpu_lab_tests.metrics")
    log.addHandler(logging.NullHandler())
    log.propagate = False

    def step(x):
        y = x.sin()
        log.warning("loss %s", y.shape)
        return y.cos()

    f = torch.compile(step, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(3))
    check_against_dynamo(w, dynamo)
    (broke,) = w.table.breaks
    assert broke.words.startswith("a logging call (logger 'tpu_lab_tests.metrics', .warning) cannot go into a graph")
    setting = "torch._dynamo.config.ignore_logging_functions.add(logging.getLogger('tpu_lab_tests.metrics').warning)"
    assert broke.fix.startswith(f"{setting} before the first call"), broke.fix
    with printed_setting_applied(setting), tl.watch() as w:
        f(torch.randn(3))
    assert w.table.breaks == () and w.table.total_compiles == 1, w.table


def test_an_input_that_was_none_shows_as_none_in_the_earlier_graphs_row(dynamo):
    def cell(x, hidden=None):  # truncated BPTT: no state on the first chunk, then the carried one
        if hidden is None:
            hidden = torch.zeros(x.shape[-1])
        return (x + hidden).tanh()

    f = torch.compile(cell, backend=BACKEND)
    with tl.watch() as w:
        h = f(torch.randn(4))
        f(torch.randn(4), h)
    check_against_dynamo(w, dynamo)
    first, second = w.table.rows
    assert first.signature == "x: f32[4], hidden: None", first.signature
    assert second.signature == "x: f32[4], hidden: f32[4]", second.signature
    assert second.causes[0].words.startswith("hidden is now a tensor (f32[4]), was None"), second.causes[0].words
