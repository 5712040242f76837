"""tl.watch() checked blind, twenty-sixth round: an int that indexes a Python list (a DDPM schedule) is
told as such, with a fix that works when applied, and the line at the recompile limit gives the same fix,
never "pass it as a tensor" beside "a tensor would not do"; a value each instance holds its own of (a
drop-path rate per block, each block compiled on its own) is said once with its values and told to raise
the limit to the number of instances; a condition set only inside torch names torch, never a dangling
"set:"; one condition is "the condition", not "the 1 conditions"; a loop over a tensor whose length depends on
its data (after capture_dynamic_output_shape_ops) is said in words, never as a sympy symbol; a builtin a
resumed line calls (``int(t.item())``) is no input. Checked against Dynamo's records."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl
from tpu_lab.compile.causes import guard_words

BACKEND = "eager"
BETAS = [0.01 * i for i in range(16)]  # a noise schedule kept in a Python list, as tutorials write it


def sample(x, t):
    return x * BETAS[t] + 1


def test_an_int_that_indexes_a_python_list_is_told_so_and_the_limit_line_gives_the_same_fix(dynamo):
    f = torch.compile(sample, backend=BACKEND)
    with tl.watch() as w:
        for t in range(15, 4, -1):
            f(torch.randn(4), t)
    check_against_dynamo(w, dynamo)
    told = [c for r in w.table for c in r.causes if c.kind == "value"]
    assert len(told) == 7 and w.table.limit_hit, told
    for c in told:
        assert "it indexes a Python list or tuple (BETAS[t]) (from your line" in c.words, c.words
        assert "evaluate_expr" not in c.words and "torch.tensor([t])" in c.fix, c.fix
    (limit,) = [c for r in w.table for c in r.causes if c.kind == "limit"]
    assert limit.fix == told[0].fix and "torch.tensor(value)) so the graph reads" not in limit.fix, limit.fix
    schedule = torch.tensor(BETAS)  # the fix as printed: the list in a tensor, t a one-element tensor

    def sample_fixed(x, t):
        return x * schedule[t] + 1

    torch._dynamo.reset()
    with tl.watch() as fixed:
        g = torch.compile(sample_fixed, backend=BACKEND)
        for t in range(15, 4, -1):
            g(torch.randn(4), torch.tensor([t]))
    assert fixed.table.total_compiles == 1 and not fixed.table.breaks


class DropPath(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        if self.p == 0.0 or not self.training:
            return x
        keep = 1 - self.p
        return x * x.new_empty((x.shape[0], 1)).bernoulli_(keep) / keep  # timm's drop_path


class Block(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.fc, self.drop_path = torch.nn.Linear(4, 4), DropPath(p)

    def forward(self, x):
        return x + self.drop_path(self.fc(x))


def test_a_rate_each_instance_holds_is_said_once_and_told_to_raise_the_limit_per_instance(dynamo):
    blocks = [Block(p) for p in (0.0, 0.1, 0.2, 0.3)]
    for b in blocks:
        b.compile(backend=BACKEND)
    with tl.watch() as w:
        x = torch.randn(2, 4, requires_grad=True)  # as every later block's input
        for b in blocks:
            x = b(x)
    check_against_dynamo(w, dynamo)
    text = w.table.to_text()
    assert text.count("(another instance of Block") <= 3, text  # once per cause said, not once per value
    derived = [c for r in w.table for c in r.causes if c.kind == "derived"]
    assert len(derived) == 2 and "changed 2 times (was 0.9, 0.8" in w.table.rows[-1].cause, w.table.rows[-1].cause
    for c in derived:
        assert "above the number of Block instances" in c.fix and c.fix.count("recompile_limit") == 1, c.fix


def test_a_condition_set_only_inside_torch_names_torch():
    reason = "5/1: t != 1  # (_prims_common/__init__.py:285 in check_contiguous_sizes_strides)"
    (failure,) = guard_words.parse([reason])
    assert failure.code == "" and failure.where == "_prims_common/__init__.py:285", failure
    cause = guard_words.words(failure, inputs={"t": "int 1"})
    assert "set by a check inside torch" in cause.words and "set:" not in cause.words, cause.words


class Queue(torch.nn.Module):  # MoCo's negative-key queue, its pointer read back from a buffer
    def __init__(self):
        super().__init__()
        self.register_buffer("queue", torch.zeros(4, 16))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def forward(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        self.queue[:, ptr : ptr + batch_size] = keys.T
        self.queue_ptr[0] = (ptr + batch_size) % 16
        return self.queue.sum()


def test_one_condition_is_said_as_one(dynamo):
    f = torch.compile(Queue(), backend=BACKEND)
    with tl.watch() as w:
        for _ in range(4):
            f(torch.randn(4, 4))
    check_against_dynamo(w, dynamo)
    text = w.table.to_text()
    # the carried ptr is named by its line in the condition too (it read as a placeholder before): quoted whole
    assert "while 0 <= ptr <= 12 holds (from your line" in text and "the 1 conditions" not in text, text


def segment_sums(x, sizes):  # DINO's multi-crop grouping: the groups' ends from unique_consecutive
    ends = torch.cumsum(torch.unique_consecutive(sizes, return_counts=True)[1], 0)
    start, out = 0, []
    for end in ends:
        out.append(x[start:end].sum())
        start = end
    return torch.stack(out)


def test_a_loop_over_a_tensor_of_data_dependent_length_is_said_in_words(dynamo):
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        f = torch.compile(segment_sums, backend=BACKEND)
        with tl.watch() as w:
            f(torch.randn(6), torch.tensor([2, 2, 3, 3, 3, 4]))
    check_against_dynamo(w, dynamo)
    (loop,) = w.table.breaks
    assert loop.words.startswith("this loop walks ends, whose length depends on tensor data"), loop.words
    assert "torch._check" not in loop.words and "u0" not in loop.words, loop.words
    assert loop.fix.startswith("compute the count in Python"), loop.fix


def spec_mask_width(spec, max_t):  # SpecAugment: a mask width drawn as a Python int
    t = int(torch.randint(0, max_t, ()).item())
    return spec[..., : spec.shape[-1] - t] * 2


def test_a_builtin_the_resumed_line_calls_is_not_listed_among_its_inputs(dynamo):
    f = torch.compile(spec_mask_width, backend=BACKEND)
    torch.manual_seed(0)
    with tl.watch() as w:
        for _ in range(3):
            f(torch.randn(2, 16), 8)
    check_against_dynamo(w, dynamo)
    resumed = [r for r in w.table.rows if "after the graph break" in r.function]
    assert resumed and all("torch.randint(0, max_t, ()).item(): int" in r.signature for r in resumed)
    assert not [r.signature for r in resumed if "int: class" in r.signature]  # int(...): never another int
