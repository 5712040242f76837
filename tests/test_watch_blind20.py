"""tl.watch() checked blind, twentieth round: a size pinned by a buffer the module holds (a streaming cache)
is told to move the state into the arguments, a container where a tensor was compiled for is named as what
it is, a list that shrank is never said to grow and a guard that raised on None is no guard, a sliding
window's tile count is told against the graph that made the image dynamic, a flag passed only sometimes
in **kwargs is a case of its own, a Python builtin Dynamo skips is not called a torch function, and a
global float that sets a loss option is told to stay a few values. Checked against Dynamo's own records too."""

import warnings

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


class StreamingConv(torch.nn.Module):  # moshi / EnCodec streaming: left context kept in a buffer
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 2, 3)
        self.register_buffer("cache", torch.zeros(1, 2, 2), persistent=False)

    def reset(self, batch):
        self.cache = torch.zeros(batch, 2, 2)

    def forward(self, x):
        x = torch.cat([self.cache, x], dim=-1)
        self.cache.copy_(x[..., -2:])
        return self.conv(x)


def test_a_size_a_module_buffer_pins_is_told_to_pass_the_state_as_an_argument(dynamo):
    m = StreamingConv()
    f = torch.compile(m, backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for batch in (1, 2, 3):
            m.reset(batch)
            f(torch.randn(batch, 2, 5))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sizes = [c for r in w.table for c in r.causes if c.kind == "size"]
    assert len(sizes) == 2 and all("to the size of self.cache, a tensor the module holds" in c.words for c in sizes)
    assert all(c.fix.startswith("pass self.cache into the compiled function as an argument") for c in sizes)
    assert not any("plain Python number" in c.words or "vectorise" in c.fix for c in sizes)


def mean_image(images):
    if isinstance(images, (list, tuple)):
        images = torch.stack(list(images))
    return images.mean(0)


def test_a_list_or_tuple_where_a_tensor_was_compiled_for_is_named_as_what_it_is(dynamo):
    f = torch.compile(mean_image, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 3))
        f([torch.randn(3), torch.randn(3)])
        f((torch.randn(3), torch.randn(3)))
    check_against_dynamo(w, dynamo, also=("images",))
    words = [c.words for r in w.table for c in r.causes if c.kind in ("tensor_type", "type")]
    assert words == [
        "images is now a list, was a tensor (each type is its own graph)",
        "images is now a tuple, was a list",
    ]
    assert "subclass" not in str(w.table) and "torch.stack" in str(w.table)


class Node:
    def __init__(self, word=None, children=()):
        self.word, self.children = word, list(children)


def embed(tree, table):  # a recursive net over a parse tree (Socher's RNN)
    if not tree.children:
        return table[tree.word]
    return torch.tanh(sum(embed(c, table) for c in tree.children))


def test_a_list_that_shrank_is_never_said_to_grow_and_a_guard_that_raised_on_none_is_no_cause(dynamo):
    f = torch.compile(embed, backend=BACKEND)
    table = torch.randn(4, 3)
    with tl.watch() as w:
        f(Node(children=[Node(0), Node(1)]), table)
        f(Node(children=[Node(children=[Node(0), Node(1)]), Node(2)]), table)
        f(Node(children=[Node(0), Node(children=[Node(1), Node(2)])]), table)
    check_against_dynamo(w, dynamo, also=("children", "word"))
    text = str(w.table)
    assert "has a different length (was 2, now 0)" in text and "grows at every compile" not in text
    assert "not supported between instances" not in text and "not translated" not in text
    assert "the code walks a Python tree (tree.children[i].children), so each shape of tree is a graph" in text


def forward_kwargs(x, **kwargs):  # a trainer passes output_hidden_states only on some calls
    out = x.sin()
    return (out, x) if kwargs.get("output_hidden_states") else out


def test_a_flag_passed_only_sometimes_in_kwargs_is_a_case_of_its_own(dynamo):
    f = torch.compile(forward_kwargs, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2))
        f(torch.ones(2), output_hidden_states=True)
    check_against_dynamo(w, dynamo)
    (keys,) = [c for r in w.table for c in r.causes if c.kind == "dict_keys"]
    assert keys.fix.startswith("expected once per case: a flag passed only sometimes picks a code path")


def warned(x):
    if x.shape[0] > 2:
        warnings.warn("large batch", stacklevel=1)
    return x * 2


def test_a_python_builtin_dynamo_skips_is_not_called_a_torch_function(dynamo):
    f = torch.compile(warned, backend=BACKEND)
    with tl.watch() as w, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(torch.ones(3))
    check_against_dynamo(w, dynamo)
    (brk,) = w.table.breaks
    assert "warn" in brk.words and "torch function" not in brk.fix and "Dynamo cannot trace this builtin" in brk.fix


EPSILON = 0.1


def smoothed_loss(logits, labels):  # HF Trainer's LabelSmoother: label smoothing set from a global
    return F.cross_entropy(logits, labels, label_smoothing=EPSILON)


def test_a_global_float_that_sets_a_loss_option_is_told_each_value_is_a_graph(dynamo):
    global EPSILON
    f = torch.compile(smoothed_loss, backend=BACKEND)
    logits, labels = torch.randn(4, 5), torch.randint(0, 5, (4,))
    with tl.watch() as w:
        for EPSILON in (0.1, 0.0):  # noqa: B007 (the loop sets the global the compiled function reads)
            f(logits, labels)
    check_against_dynamo(w, dynamo)
    (changed,) = [c for r in w.table for c in r.causes if c.kind == "global"]
    assert "a loss option such as label_smoothing" in changed.fix and "keep it to a few values" in changed.fix


def slide(img, crop=8, stride=6):  # MONAI / mmseg sliding-window inference: tiles counted from the size
    height, width = img.shape[2:]
    rows = max(height - crop + stride - 1, 0) // stride + 1
    cols = max(width - crop + stride - 1, 0) // stride + 1
    out = img.new_zeros(img.shape)
    for i in range(rows):
        for j in range(cols):
            y, x = min(i * stride, height - crop), min(j * stride, width - crop)
            out[:, :, y : y + crop, x : x + crop] += img[:, :, y : y + crop, x : x + crop].sigmoid()
    return out


def test_a_tile_count_is_told_against_the_graph_that_made_the_image_dynamic(dynamo):
    f = torch.compile(slide, backend=BACKEND)
    with tl.watch() as w:
        for height, width in ((16, 16), (16, 20), (24, 20), (32, 32)):
            f(torch.randn(1, 1, height, width))
    check_against_dynamo(w, dynamo, also=("size mismatch", "img.size()["))
    last = [c for c in w.table.rows[-1].causes if c.kind != "dynamic"]
    assert last and last[0].kind == "size_value" and "changed 16 -> 32" not in w.table.rows[-1].cause
    assert "a loop count" in last[0].words
