"""tl.watch() checked blind, thirteenth round: stylegan2's style mixing draws its injection index with
``random.randint`` inside the compiled forward and uses it as a size, and transformers' decorator frames
see an eval batch of 1 after a graph held dynamic from 2. What the reviewer found wrong is asserted right
here; every run is also checked against Dynamo's own records and the watch's invariants."""

import functools
import random

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def mix_styles(style, n_latent=4):
    inject_index = random.randint(1, n_latent - 1)
    latent = style.unsqueeze(1).repeat(1, inject_index, 1)
    latent2 = style.unsqueeze(1).repeat(1, n_latent - inject_index, 1)
    return torch.cat([latent, latent2], 1)


def test_a_random_draw_used_as_a_size_is_named_and_its_fix_is_not_capture_scalar_outputs(dynamo):
    mix = torch.compile(mix_styles, backend=BACKEND)
    random.seed(0)
    with tl.watch() as w:
        for _ in range(3):
            mix(torch.randn(2, 8))
    check_against_dynamo(w, dynamo, also=("inject_index == 2",))  # the resumed part's second guard
    (brk,) = w.table.breaks
    # capture_scalar_outputs only moves the break to the next use of the drawn number (Dynamo: "builtin
    # operator sub with tensor arguments ... skipping the rest of the function")
    assert "capture_scalar_outputs" not in brk.fix
    draw = mix_styles.__code__.co_firstlineno + 1
    assert f"line {draw}: inject_index = random.randint(1, n_latent - 1), a Python random draw" in brk.words
    assert brk.fix.startswith("draw the random number outside the compiled function and pass it in")


def returns_tuple(fn):  # transformers' @can_return_tuple: a *args/**kwargs wrapper around forward
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return (fn(self, *args, **kwargs),)

    return wrapper


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    @returns_tuple
    def forward(self, input_ids, attention_mask=None, labels=None):
        h = self.lin(input_ids) * attention_mask
        print("step")  # a break in the wrapped forward: the wrapper and the forward compile as frames of their own
        return ((h - labels) ** 2).mean()


def test_a_decorator_frame_is_its_own_row_and_an_eval_batch_of_1_is_named_as_a_size_below_2(dynamo):
    f = torch.compile(Regressor(), backend=BACKEND)
    with tl.watch() as w:
        for b in (4, 2):  # training: batch 2 makes dim 0 dynamic
            f(torch.randn(b, 8), attention_mask=torch.ones(b, 8), labels=torch.randn(b, 8))[0].backward()
        with torch.no_grad():  # evaluation: the same batch, then a last batch of 1
            for b in (2, 1):
                f(torch.randn(b, 8), attention_mask=torch.ones(b, 8), labels=torch.randn(b, 8))
    check_against_dynamo(w, dynamo, also=("labels", "attention_mask"))  # Dynamo logs the first failing guard only
    names = {r.function.split(" (")[0] for r in w.table}
    assert {"Regressor.forward", "Regressor.forward via @returns_tuple"} <= names
    last = [r for r in w.table if r.function.startswith("Regressor.forward") and "[1, 8]" in r.signature]
    assert len(last) == 2  # the wrapper's frame and the forward's own, each at batch 1
    for row in last:  # the same change on two inputs is one change: not "grad mode changed; batch 4 -> 1"
        assert row.causes[0].words.startswith("input_ids dimension 0 is now 1 (the graph held is dynamic there")
