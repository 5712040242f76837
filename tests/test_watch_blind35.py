"""tl.watch() checked blind, thirty-fifth round: the size fix marks with maybe_mark_dynamic, never
mark_dynamic, which raised ConstraintViolationError where a mask of fixed size pins the dimension
(Perceiver's cross-attention); the printed fix is run as printed; a comprehension's hidden argument (``.0``)
is named as the iterable it walks; a tuple unpacked from a call written over several lines (I-BERT's value and
scaling factor) names the items carried over a break. Checked against Dynamo's records."""

import sys

import pytest
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


class CrossAttention(torch.nn.Module):  # lucidrains' Perceiver: latents attend to a byte array, masked when padded
    def __init__(self):
        super().__init__()
        self.latents, self.to_kv = torch.nn.Parameter(torch.randn(4, 8)), torch.nn.Linear(6, 16)

    def forward(self, data, mask=None):
        k, v = self.to_kv(data).chunk(2, dim=-1)
        sim = self.latents @ k.transpose(-1, -2)
        if mask is not None:
            sim = sim.masked_fill(~mask[:, None, :], -1e9)
        return (sim.softmax(-1) @ v).mean()


def run(f, marked):
    for n in (12, 19, 27, 33):  # byte arrays of different lengths; the padded ones carry a mask
        data = torch.randn(2, n, 6)
        mask = torch.ones(2, n, dtype=torch.bool) if n > 20 else None
        if marked:
            torch._dynamo.maybe_mark_dynamic(data, 1)  # the fix as printed
        f(data, mask)


def test_the_size_fix_marks_with_maybe_mark_dynamic_which_never_raises_where_a_mask_pins_the_size(dynamo):
    torch.manual_seed(0)
    model = CrossAttention()
    with tl.watch() as w:
        run(torch.compile(model, backend=BACKEND), marked=False)
    check_against_dynamo(w, dynamo, also=("mask", "size mismatch"))
    sizes = [c for r in w.table for c in r.causes if "data" in c.words and "mark_dynamic(" in c.fix]
    assert sizes and all("torch._dynamo.maybe_mark_dynamic(data, 1)" in c.fix for c in sizes), [c.fix for c in sizes]
    assert not any("torch._dynamo.mark_dynamic(" in c.fix for r in w.table for c in r.causes)
    torch._dynamo.reset()
    with tl.watch() as fixed:
        run(torch.compile(model, backend=BACKEND), marked=True)  # no ConstraintViolationError
    assert fixed.table.total_compiles <= w.table.total_compiles, fixed.table.to_text()


class FeatureEncoder(torch.nn.Module):  # wav2vec's feature extractor: per-sample lengths as Python ints
    def out_len(self, n):
        return (n - 3) // 2 + 1

    def forward(self, wav, lengths):
        feat = [self.out_len(int(n)) for n in lengths]
        return wav[:, : max(feat)].sum()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 inlines comprehensions (PEP 709): no frame")
def test_a_comprehensions_hidden_argument_is_named_as_what_it_is(dynamo):
    encoder = FeatureEncoder()
    f = torch.compile(lambda wav, lengths: encoder(wav, lengths), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 16), torch.tensor([16, 11]))
    check_against_dynamo(w, dynamo)
    shown = [r.signature for r in w.table if r.function.startswith("<listcomp>")]
    assert shown and all(s.startswith("the iterable it walks: ") for s in shown), [
        (r.function, r.signature) for r in w.table
    ]


class Act(torch.nn.Module):  # I-BERT's quantized activations: a value and its scaling factor
    def forward(self, x, scale, **options):
        print("quantized")  # a graph break inside the call, as I-BERT's asserts on isnan take
        return x.tanh(), scale


class Embeddings(torch.nn.Module):  # transformers' IBertEmbeddings: a tuple unpacked over several lines
    def __init__(self):
        super().__init__()
        self.act = Act()

    def forward(self, x, scale):
        embeddings, embeddings_scaling_factor = self.act(  # longer than 240 characters whole, as Longformer's
            x,
            scale,
            identity_for_the_residual_connection=None,
            identity_scaling_factor_for_the_residual_connection=None,
            quantization_mode_for_the_activation_function="symmetric",
        )
        return embeddings * embeddings_scaling_factor


def test_a_tuple_unpacked_from_a_call_over_several_lines_names_the_carried_items(dynamo):
    f = torch.compile(Embeddings(), backend=BACKEND)
    with tl.watch() as w:
        for n in (4, 6, 8):
            f(torch.randn(2, n), torch.ones(1))
    check_against_dynamo(w, dynamo)  # its d_names invariant: no placeholder such as "the carried value[0]"
    text = w.table.to_text()
    assert "carried value" not in text and "carried over the graph break[" not in text, text
