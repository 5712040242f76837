"""tl.watch() checked blind, fifty-seventh round: a break Dynamo logs a second time by its place alone (DINO's
multi-crop loop over crop boundaries held in a tensor). Checked against Dynamo's own account."""

import inspect

import torch
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


def multi_crop(xs):  # DINO's MultiCropWrapper, trimmed: crops grouped by resolution, boundaries in a tensor
    sizes = torch.unique_consecutive(torch.tensor([x.shape[-1] for x in xs]), return_counts=True)[1]
    bounds = torch.cumsum(sizes, 0)  # the unique_consecutive break comes first: the loop is in the resumed part
    start, out = 0, xs[0].new_zeros(0)
    for end in bounds:
        out = torch.cat((out, torch.cat([c.flatten() for c in xs[start:end]]).sum().reshape(1)))
        start = end
    return out


def test_a_break_logged_again_by_its_place_alone_is_placed_on_its_own_line_with_one_fix():
    f = torch.compile(multi_crop, backend="aot_eager")
    crops = [torch.randn(2, 4)] * 2 + [torch.randn(2, 2)] * 2
    table = watched(lambda: [f(crops), f(crops + [torch.randn(2, 2)] * 2)])
    lines, first = inspect.getsourcelines(multi_crop)
    sliced = first + next(i for i, s in enumerate(lines) if "xs[start:end]" in s)
    loop = first + next(i for i, s in enumerate(lines) if "for end in bounds" in s)
    places = {b.where for b in table.breaks if "item()" in b.words}
    assert places and all(p.endswith(f":{sliced}") for p in places), (places, sliced)
    assert not any(b.where.endswith(f":{loop}") for b in table.breaks), [b.where for b in table.breaks]
