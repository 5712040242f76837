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


def banned(scores, pairs):  # transformers v3's banned-words mask, built with the legacy sparse constructor
    idx = torch.LongTensor(pairs)
    mask = torch.sparse.LongTensor(idx.t(), torch.ones(len(pairs), dtype=torch.long), scores.size()).to_dense().bool()
    return scores.masked_fill(mask, float("-inf"))


def banned_dense(scores, pairs):  # the printed fix, applied: built with torch ops Dynamo traces
    idx = torch.tensor(pairs, dtype=torch.long)
    return scores.index_put((idx[:, 0], idx[:, 1]), torch.tensor(float("-inf")))


def test_a_legacy_typed_constructor_is_named_and_torch_ops_in_its_place_remove_the_break():
    scores, pairs = torch.randn(2, 10), [[0, 1], [1, 4]]
    table = watched(lambda: torch.compile(banned, backend="aot_eager")(scores, pairs))
    told = [b for b in table.breaks if "legacy typed-tensor constructor" in b.words]
    assert told and all("torch.tensor(data, dtype=...)" in b.fix for b in told), [b.words for b in table.breaks]
    torch._dynamo.reset()
    assert not watched(lambda: torch.compile(banned_dense, backend="aot_eager")(scores, pairs)).breaks


def n_step_target(rewards, bootstrap, gamma=0.99):  # an n-step return over a Python list of rewards
    g = bootstrap
    for r in reversed(rewards):
        g = r + gamma * g
    return g


def n_step_padded(rewards, mask, bootstrap, gamma=0.99):  # the printed fix, applied: one padded tensor, a mask
    discounts = gamma ** torch.arange(rewards.numel(), dtype=torch.float32)
    n = mask.sum()
    return (rewards * mask * discounts).sum() + gamma**n * bootstrap


def test_a_list_of_numbers_whose_length_varies_is_told_to_be_one_padded_tensor_never_a_code_path():
    lists = [[1.0, 0.5, 0.2], [0.3, 0.1], [1.0], [0.2, 0.2, 0.2, 0.2], [0.5, 0.5, 0.5, 0.5, 0.5]]
    f = torch.compile(n_step_target, backend="aot_eager")
    table = watched(lambda: [f(r, torch.tensor(2.0)) for r in lists])
    told = [c for r in table.rows for c in r.causes if c.kind == "length"]
    assert not any("which heads run" in c.fix for c in told), told
    told = [c for c in told if "grows at every compile" not in c.words]  # 4 then 5: a growth, its own fix
    assert told and all("pass the numbers as one tensor padded" in c.fix for c in told), told
    torch._dynamo.reset()
    g = torch.compile(n_step_padded, backend="aot_eager")
    padded = [
        (torch.tensor(r + [0.0] * (5 - len(r))), torch.tensor([1.0] * len(r) + [0.0] * (5 - len(r)))) for r in lists
    ]
    assert watched(lambda: [g(r, m, torch.tensor(2.0)) for r, m in padded]).total_compiles == 1


def test_eager_mode_qat_breaks_are_told_as_skipped_on_purpose_never_to_move_torchs_own_calls():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    model.train()
    model.qconfig = torch.ao.quantization.get_default_qat_qconfig("fbgemm")  # the eager-mode QAT tutorial's steps
    qat = torch.ao.quantization.prepare_qat(model)
    table = watched(lambda: torch.compile(qat, backend="aot_eager")(torch.randn(2, 4)).sum().backward())
    inside = [b for b in table.breaks if "torch/ao/" in b.words]
    assert inside and all(b.fix.startswith("eager-mode quantization modules") for b in inside), table.breaks
    assert not any("weight_fake_quant" in b.fix for b in table.breaks)
