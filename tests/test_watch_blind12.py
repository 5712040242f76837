"""tl.watch() checked blind, twelfth round: litgpt's chunked cross-entropy compiled through a partial with
dynamic=True (and the same function compiled again with other options), a diffusers-style UNet whose
timestep turns from a tensor into an int, and graphs of few ops (a GCN's edge index, SpecAugment's time
axis) whose inputs Dynamo made dynamic. What the reviewer found wrong is asserted right here; every run is
also checked against Dynamo's own records and the watch's invariants."""

import functools
import time

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl
from tpu_lab.testing.dynamo_account import DynamoAccount
from tpu_lab.testing.watch_invariants import violations

BACKEND = "eager"


def chunked_cross_entropy(logits, targets, chunk_size=128):
    logits = logits.reshape(-1, logits.size(-1))
    targets = targets.reshape(-1)
    logit_chunks = logits.split(chunk_size)
    target_chunks = targets.split(chunk_size)
    # litgpt names them so: a graph node named after ``l`` (l, l_1) reads like an input's (l_x)
    losses = [F.cross_entropy(l, t, reduction="none") for l, t in zip(logit_chunks, target_chunks, strict=True)]  # noqa: E741
    return torch.cat(losses).mean()


def test_a_chunk_count_held_by_the_graph_is_a_graph_per_value_even_with_dynamic_true():
    loss = torch.compile(functools.partial(chunked_cross_entropy, chunk_size=4), backend=BACKEND, dynamic=True)
    torch._dynamo.reset()
    with DynamoAccount() as account, tl.watch() as w:
        for length in (8, 12, 16):
            loss(torch.randn(1, length, 16), torch.randint(0, 16, (1, length)))
    assert violations(w.table, account) == {k: [] for k in violations(w.table, account)}
    _, first, *later = [c for r in w.table for c in r.causes]  # first compile, its note, the recompiles
    # the variable of the list comprehension (l) is no input; the claim of reuse holds only for one chunk count
    assert first.words.startswith("logits dim 1, logits dim 2, targets dim 1 dynamic from the first compile")
    assert "while (-1 + chunk_size + logits.size()[1]) // chunk_size == 2 holds" in first.fix
    assert len(later) == 2 and all(c.kind == "size_value" for c in later)
    assert "(the graph holds (-1 + chunk_size + logits.size()[1]) // chunk_size == 2)" in later[0].words
    assert "torch.cond" not in later[0].fix and "keywords" not in later[0].words


def test_the_same_function_compiled_again_with_other_options_is_named_by_the_option():
    def f(x):
        return x.sin() + 1

    with tl.watch() as w:
        torch.compile(f, backend=BACKEND, dynamic=False)(torch.randn(3))
        torch.compile(f, backend=BACKEND, dynamic=True)(torch.randn(3))
    (again,) = [c for r in w.table for c in r.causes if c.kind == "backend"]
    assert (
        "another torch.compile call on the same code, with other options (dynamic=True, where the first call had dynamic=False)"
        in again.words
    )
    assert "compile the function once and reuse that compiled object" in again.fix


class TinyUNet(torch.nn.Module):
    """diffusers' UNet2DConditionModel takes a tensor or a Python number as its timestep."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.time = torch.nn.Linear(1, 4)

    def forward(self, sample, timestep):
        if not torch.is_tensor(timestep):
            timestep = torch.tensor([timestep], dtype=torch.float32)
        emb = self.time(timestep.float().reshape(-1, 1))
        return self.conv(sample) + emb[:, :, None, None]


def test_a_timestep_that_turns_from_a_tensor_into_an_int_dynamo_made_dynamic_is_not_called_baked(dynamo):
    unet = torch.compile(TinyUNet().eval(), backend=BACKEND)
    sample = torch.randn(1, 4, 8, 8)
    with tl.watch() as w, torch.no_grad():
        for t in (torch.tensor(999), torch.tensor(666)):
            unet(sample, t)
        for t in (999, 666, 333, 0):  # an LCM-style loop of int timesteps
            unet(sample, t)
    check_against_dynamo(w, dynamo)
    (turned,) = [c for r in w.table for c in r.causes if c.kind == "tensor_type"]
    assert "timestep is now an int, was a tensor (Dynamo made timestep dynamic, so later values reuse" in turned.words
    assert turned.fix.startswith("none needed") and "baked" not in turned.words
    assert sum(r.compiles for r in w.table) == 2  # the later ints reused the graph, as said


def num_nodes(edge_index):
    return int(edge_index.max()) + 1  # PyG's maybe_num_nodes: .item() breaks the graph


class GCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)

    def forward(self, x, edge_index):
        n = num_nodes(edge_index)
        out = torch.zeros(n, 8).index_add_(0, edge_index[1], self.lin(x)[edge_index[0]])
        return out


def test_an_input_a_graph_of_few_ops_holds_dynamic_is_said_to_be_dynamic(dynamo):
    model = torch.compile(GCN(), backend=BACKEND)
    torch._dynamo.reset()
    with DynamoAccount() as account, tl.watch() as w:
        for nodes, edges in ((20, 60), (35, 90), (28, 140)):
            model(torch.randn(nodes, 16), torch.randint(0, nodes, (2, edges)))
    assert violations(w.table, account) == {k: [] for k in violations(w.table, account)}
    dynamic = {d for r in w.table for d in r.dynamic.split(", ") if d}
    assert "edge_index dim 1" in dynamic, [(r.function, r.dynamic) for r in w.table]
    fixes = [c.fix for r in w.table for c in r.causes if "edge_index" in c.words and c.kind == "size"]
    assert fixes and all(f.startswith("none needed") for f in fixes), fixes


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()  # a graph break: the rest of the wrapper is a resumed frame of its own
        return fn(*args, **kwargs), time.perf_counter() - t0

    return wrapper


def sgd_update(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad


def test_a_decorators_wrapper_resumed_after_a_break_names_the_inputs_as_the_wrapped_function_does(dynamo):
    step = torch.compile(timed(sgd_update), backend=BACKEND)
    w = torch.nn.Linear(4, 4)
    with tl.watch() as watch:
        for lr in (0.1, 0.1, 0.05):
            w(torch.randn(3, 4)).sum().backward()
            step(list(w.parameters()), lr)
    check_against_dynamo(watch, dynamo)
    resumed = [r for r in watch.table if "after the graph break" in r.function]
    assert resumed and all("lr: float" in r.signature and "args[" not in r.signature for r in resumed)
    assert any(
        "Python float lr changed (was 0.1): Dynamo made lr dynamic" in c.words for r in resumed for c in r.causes
    )


def unpool(x, indices, kernel_size, stride):
    return F.max_unpool1d(x, indices, kernel_size, stride)


def test_an_int_argument_that_becomes_a_tuple_is_a_type_change_not_a_new_value(dynamo):
    # torch's op_db samples for max_unpool1d: the kernel size as an int, then as a tuple
    f = torch.compile(unpool, backend=BACKEND)
    x, indices = F.max_pool1d(torch.randn(1, 2, 6), 3, 2, return_indices=True)
    with tl.watch() as w:
        f(x, indices, 3, 2)
        f(x, indices, (3,), (2,))
    check_against_dynamo(w, dynamo, also=["kernel_size == 3"])  # both changed; Dynamo logs stride's guard
    found = {c.words for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")}
    assert found == {
        "stride is now a tuple, was the int 2 (each type is its own graph)",
        "kernel_size is now a tuple, was the int 3 (each type is its own graph)",
    }


def selective_scan(x):
    # mamba-minimal's scan: a Python loop over the sequence length fixes that size in each graph
    state = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for i in range(x.shape[1]):
        state = 0.9 * state + x[:, i]
        outs.append(state)
    return torch.stack(outs, 1)


def test_a_size_dynamo_specialised_again_is_never_said_to_be_dynamic(dynamo):
    f = torch.compile(selective_scan, backend=BACKEND)
    with tl.watch() as w:
        for length in (4, 5, 6):
            f(torch.randn(1, length, 3))
    check_against_dynamo(w, dynamo)
    assert not any(r.dynamic for r in w.table), [r.dynamic for r in w.table]
    said = [c for r in w.table for c in r.causes if c.kind == "size"]
    assert len(said) == 2 and not any("reuse this graph" in c.words + c.fix for c in said)
    assert "mark_dynamic would raise here" in said[-1].fix


def interact(dense_x, lS_o, lS_i):  # DLRM's names: camel case, which Dynamo's graph writes as l_s_i
    return dense_x.sum(1) + sum(i.float().mean() for i in lS_i) + lS_o.float().mean()


def test_inputs_named_in_camel_case_are_named_so_in_what_dynamo_made_dynamic():
    f = torch.compile(interact, backend=BACKEND)
    torch._dynamo.reset()
    with DynamoAccount() as account, tl.watch() as w:
        for n in (6, 9, 12):
            f(torch.randn(2, 4), torch.arange(n), [torch.randint(0, 4, (n,)), torch.randint(0, 4, (n + 1,))])
    assert violations(w.table, account) == {k: [] for k in violations(w.table, account)}
    dynamic = ", ".join(r.dynamic for r in w.table)
    assert "lS_i[0] dim 0" in dynamic and "l_s_i" not in dynamic, dynamic


def test_a_size_of_a_value_built_inside_the_compiled_code_is_never_given_a_mark_dynamic_to_write():
    # open_clip's ClipLoss keeps its labels per device; Dynamo's guard on them, from blind round 13
    from tpu_lab.compile.causes import guard_words

    (failure,) = guard_words.parse(
        ["0/1: tensor 'self.labels[device(type='cpu')]' size mismatch at index 0. expected 8, actual 5"]
    )
    cause = guard_words.words(failure)
    assert "mark_dynamic(" not in cause.fix and "device(type=" not in cause.fix, cause.fix
