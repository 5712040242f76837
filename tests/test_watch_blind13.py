"""tl.watch() checked blind, thirteenth round: stylegan2's style mixing draws its injection index with
``random.randint`` inside the compiled forward and uses it as a size, and transformers' decorator frames
see an eval batch of 1 after a graph held dynamic from 2. What the reviewer found wrong is asserted right
here; every run is also checked against Dynamo's own records and the watch's invariants."""

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
    assert "line 17: inject_index = random.randint(1, n_latent - 1), a Python random draw" in brk.words
    assert brk.fix.startswith("draw the random number outside the compiled function and pass it in")
