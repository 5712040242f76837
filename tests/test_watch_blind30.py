"""tl.watch() checked blind, thirtieth round: a fix never suggests a setting that turns a graph break into an
error (capture_dynamic_output_shape_ops where the line reads the result back), and a compile that failed
because such a setting is on says so; a branch on a Python random draw is told to become branchless, not to
pass the draw in (each float value recompiles); a Dynamo error in a resumed part names the user's line, not
Dynamo's generated function, and no f-string pieces among the inputs; sizes a library builds that Dynamo
made dynamic need nothing more; a KV cache that grows is a row per size, its layers' layouts one change.
Checked against Dynamo's records."""

import logging
import random
import time

import pytest
import torch
from _dynamo_oracle import check_against_dynamo
from _tiny_bert import tiny_bert

import tpu_lab as tl

BACKEND = "aot_eager"


def per_class_accuracy(logits, labels):  # hand-written metrics from classification tutorials
    pred = logits.argmax(-1)
    out = {}
    for c in torch.unique(labels).tolist():
        out[c] = (pred[labels == c] == c).float().mean()
    return out


def evaluate(f):
    torch.manual_seed(0)
    for _ in range(2):
        f(torch.randn(32, 4), torch.randint(0, 4, (32,)))


def test_a_shape_op_read_back_on_its_line_is_never_told_to_capture_it_and_the_error_that_setting_makes_says_so(
    dynamo,
):
    f = torch.compile(per_class_accuracy, backend=BACKEND)
    with tl.watch() as w:
        evaluate(f)
    check_against_dynamo(w, dynamo)
    fixes = {b.words.split(" (")[0]: b.fix for b in w.table.breaks}
    unique = fixes["`torch.unique`"]
    assert "torch.bincount(x, minlength=n) > 0" in unique and "turns from this break into an error" in unique, unique
    nonzero = next(fix for words, fix in fixes.items() if words.startswith("indexing by a boolean mask"))  # pred[...]
    assert "only where no code after it" in nonzero and "GuardOnDataDependentSymNode" in nonzero, nonzero
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), tl.watch() as crashed:
        with pytest.raises(Exception, match="data-dependent"):  # what the hint Dynamo prints would do here
            evaluate(torch.compile(per_class_accuracy, backend=BACKEND))
        (failed,) = [c for r in crashed.table for c in r.causes if c.kind == "failed"]
    assert "capture_dynamic_output_shape_ops = True (set in this process) is what traces" in failed.fix, failed.fix


net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(4 * 64, 2))


def augment_and_forward(x):  # GPU-side augmentation in Kaggle kernels: flip on a Python random draw
    if random.random() < 0.5:
        x = x.flip(-1)
    return net(x)


def augment_branchless(x):  # the watcher's fix
    return net(torch.where(torch.rand(()) < 0.5, x.flip(-1), x))


def test_a_branch_on_a_python_random_draw_is_told_to_become_branchless_which_keeps_one_graph(dynamo):
    random.seed(0)
    with tl.watch() as w:
        f = torch.compile(augment_and_forward, backend=BACKEND)
        for _ in range(4):
            f(torch.randn(2, 3, 8, 8))
    check_against_dynamo(w, dynamo)
    branch = [b for b in w.table.breaks if b.words.startswith("data-dependent branching")]
    assert branch or torch.__version__ < "2.14"  # 2.13 breaks at random.random() itself, a function it skips
    for b in branch:
        assert b.fix.startswith("make it branchless with a tensor draw (x = torch.where(torch.rand(()) < p"), b.fix
        assert "not the float draw, which each value recompiles" in b.fix
    with tl.watch() as fixed:
        g = torch.compile(augment_branchless, backend=BACKEND)
        for _ in range(4):
            g(torch.randn(2, 3, 8, 8))
    assert fixed.table.total_compiles == 1 and not fixed.table.breaks, fixed.table.to_text()


logger = logging.getLogger("tpu_lab.tests.timing")


class Timed(torch.nn.Module):  # "profile inside forward" snippets: a clock and a logged f-string
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        t0 = time.perf_counter()
        h = torch.relu(self.a(x))
        logger.info(f"hidden {tuple(h.shape)} took {time.perf_counter() - t0:.4f}s")
        return self.b(h)


def test_a_dynamo_error_in_a_resumed_part_names_the_users_line_and_the_inputs_hold_no_message_pieces(dynamo):
    model = torch.compile(Timed(), backend=BACKEND)
    raised = None
    with tl.watch() as w:
        try:
            for _ in range(3):
                model(torch.randn(4, 8))
        except Exception as e:  # torch 2.15 fails formatting a clock reading made dynamic (an error of its own)
            raised = e
    if raised is None:
        pytest.skip(f"torch {torch.__version__} compiles this without an internal error")
    internal = [c for r in w.table for c in r.causes if c.kind == "failed" and "Dynamo failed internally" in c.words]
    assert internal, w.table.to_text()
    fix = internal[0].fix
    assert fix.startswith("move the line at ") and "into a function of its own wrapped in torch.compiler.disable" in fix
    assert "this was a recompile" in fix and "a clock reading" in fix, fix
    assert not any("str 'hidden" in r.signature for r in w.table), [r.signature for r in w.table]


def test_sizes_a_pipeline_builds_that_dynamo_made_dynamic_need_nothing_and_never_mention_generate(dynamo):
    from transformers import pipeline

    model, tok = tiny_bert("BertForSequenceClassification")
    model.forward = torch.compile(model.forward, backend=BACKEND)
    classify = pipeline("text-classification", model=model, tokenizer=tok, device="cpu")
    with tl.watch() as w:
        classify(["this movie was great"])
        classify(["this movie was great", "the cat sat on the mat in the park"], batch_size=2)
    check_against_dynamo(w, dynamo, also=("size mismatch",))  # Dynamo logs the first of four
    sizes = [c for r in w.table for c in r.causes if c.kind == "size"]
    assert len(sizes) == 2 and all(c.fix.startswith("none needed: Dynamo made ") for c in sizes), sizes
    assert not any("generate()" in c.fix or "else none needed" in c.fix for c in sizes), sizes


class Block(torch.nn.Module):  # minGPT-style attention with a KV cache held as (k, v) pairs
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x, past):
        q, k, v = (t.view(1, -1, 2, 8).transpose(1, 2) for t in self.qkv(x).split(16, -1))
        if past is not None:
            k, v = torch.cat([past[0], k], -2), torch.cat([past[1], v], -2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return x + y.transpose(1, 2).reshape(1, -1, 16), (k, v)


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(2))

    def forward(self, x, past=None):
        new = []
        for i, b in enumerate(self.blocks):
            x, kv = b(x, None if past is None else past[i])
            new.append(kv)
        return x[:, -1:], new


@torch.no_grad()
def decode(model, steps):
    x, past = model(torch.randn(1, 5, 16))
    for _ in range(steps):
        x, past = model(x, past)


def test_a_growing_kv_cache_is_a_row_per_size_and_its_layers_layouts_one_change(dynamo):
    model = torch.compile(TinyLM(), backend=BACKEND)
    with tl.watch() as w:
        decode(model, 4)
    check_against_dynamo(w, dynamo, also=("past[", "past is None", "storage_offset()"))  # Dynamo logs x's size
    assert [r.compiles for r in w.table] == [1, 1, 1], w.table.to_text()  # prompt, first step, the cache grown
    assert len({r.signature for r in w.table}) == 3
    layouts = [c for r in w.table for c in r.causes if c.kind == "stride"]
    assert len(layouts) == 1 and "(the same for " in layouts[0].fix, [c.words for c in layouts]
