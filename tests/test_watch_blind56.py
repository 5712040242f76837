"""tl.watch() checked blind, fifty-sixth round: a size set by a tensor's value (detectron2's mask paste,
torch.arange between box bounds), a function cached with functools.lru_cache and traced through, greedy NMS
in a while loop, and a Python list of rewards. Each is checked against Dynamo's own account, with the printed
fixes applied."""

import numpy as np
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


def nms(dets, thresh):  # py-faster-rcnn's greedy NMS, ported to torch: a while loop over the data
    x1, x2, scores = dets[:, 0], dets[:, 2], dets[:, 4]
    order, keep = scores.argsort(descending=True), []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        inter = torch.clamp(torch.minimum(x2[i], x2[order[1:]]) - torch.maximum(x1[i], x1[order[1:]]), min=0)
        order = order[torch.where(inter / (x2[i] - x1[i]) <= thresh)[0] + 1]
    return torch.stack(keep)


def test_an_index_read_back_inside_a_while_over_the_data_is_told_as_control_flow():
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(12, generator=g) * 10
    dets = torch.stack([x1, x1, x1 + 3, x1 + 3, torch.rand(12, generator=g)], 1)
    table = watched(lambda: torch.compile(nms, backend="aot_eager")(dets, 0.5))
    read = [b for b in table.breaks if "read back" in b.words]
    assert read and all("decides Python control flow" in b.fix for b in read), [b.fix for b in table.breaks]
    assert not any("index with the tensor itself" in b.fix for b in read)


def ramps(n):  # whisper's mel filterbank built in NumPy (librosa's formula), trimmed
    hz = np.linspace(0.0, 100.0, n)
    return torch.from_numpy(np.subtract.outer(hz, np.linspace(0.0, 50.0, 5)))


def test_a_numpy_ufunc_method_break_is_told_to_be_computed_outside():
    table = watched(lambda: torch.compile(ramps, backend="aot_eager")(8))
    ufunc = [b for b in table.breaks if "numpy.* functions as methods" in b.words]
    assert ufunc and all(b.fix.startswith("compute it outside the compiled function") for b in ufunc), table.breaks
