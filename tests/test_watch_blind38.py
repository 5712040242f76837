"""tl.watch() checked blind, thirty-eighth round: a mask's break whose code later takes the masked size in
``range()`` (YOLOv5's ``tc[range(t.shape[0]), c] = 1.0``) is never told capture_dynamic_output_shape_ops,
which makes that compile fail and the call raise; the fix names the range, and torch.arange in its place
stops each new size compiling a graph of its own. Checked against Dynamo's records."""

import pytest
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


def class_loss(p, t, arange=False):  # ultralytics/yolov5's ComputeLoss, its class term after anchor matching
    j = t[:, 2] < 0.8  # targets whose box ratio fits the anchor
    t = t[j]
    c = t[:, 1].long()
    tc = torch.zeros(t.shape[0], p.shape[1])
    tc[torch.arange(t.shape[0]) if arange else range(t.shape[0]), c] = 1.0
    return torch.nn.functional.binary_cross_entropy_with_logits(p[: t.shape[0]], tc)


def batches(arange):
    torch.manual_seed(0)
    for n in (6, 9, 12, 15):  # targets per batch
        t = torch.rand(n, 3)
        t[:, 1] = torch.randint(0, 4, (n,)).float()
        yield torch.randn(16, 4), t, arange


def test_a_masks_break_whose_size_later_goes_into_range_is_never_told_the_capture_setting(dynamo):
    f = torch.compile(class_loss, backend="eager")
    with tl.watch() as w:
        for args in batches(arange=False):
            f(*args)
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    masked = [b for b in w.table.breaks if "its output's shape depends on the mask's data" in b.words]  # t[mask]
    assert masked and all("leave capture_dynamic_output_shape_ops off here" in b.fix for b in masked), w.table.breaks
    assert all("range(t.shape[0])" in b.fix and "= True" not in b.fix for b in masked), [b.fix for b in masked]
    # the size range() takes after the break is named by that line, never "none needed once Dynamo makes it dynamic"
    resumed = [c for r in w.table if "after the graph break" in r.function for c in r.causes if c.kind == "size"]
    assert len(resumed) >= 2, w.table.to_text()
    assert all("takes t.shape[0] as a Python int in range()" in c.words for c in resumed), w.table.to_text()
    assert all("torch.arange(t.shape[0]) in place of range(t.shape[0])" in c.fix for c in resumed), resumed
    assert not any("once Dynamo makes the size dynamic" in c.fix for c in resumed), resumed
    torch._dynamo.reset()
    with tl.watch() as fixed:  # the fix as printed: torch.arange in place of range
        for args in batches(arange=True):
            f(*args)
    assert fixed.table.total_compiles < w.table.total_compiles, (fixed.table.to_text(), w.table.to_text())


@pytest.mark.skipif(
    torch.__version__ < "2.15", reason="torch 2.13 breaks the graph at range() again (the fix says both)"
)
def test_the_capture_setting_the_fix_leaves_off_does_fail_there_on_the_newest_torch():
    torch._dynamo.reset()
    f = torch.compile(class_loss, backend="eager")
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        raised = None
        try:
            for args in batches(arange=False):
                f(*args)
        except Exception as e:  # InternalTorchDynamoError: 'Proxy' object cannot be interpreted as an integer
            raised = e
    assert raised is not None


def kl_loss(mean_q, mean_p):  # DreamerV3's KL balancing, cut down: torch.distributions inside the loss
    dist = lambda logits: torch.distributions.Independent(torch.distributions.OneHotCategorical(logits=logits), 1)  # noqa: E731
    return torch.distributions.kl_divergence(dist(mean_q), dist(mean_p)).mean()


def test_a_librarys_own_memo_filled_at_the_first_call_is_said_so_and_one_eager_call_first_skips_it(dynamo):
    torch.distributions.kl._KL_MEMOIZE.clear()  # as in a fresh process: no pair of types looked up yet
    f = torch.compile(kl_loss, backend="eager")
    with tl.watch() as w:
        for _ in range(2):
            f(torch.randn(2, 4, 8), torch.randn(2, 4, 8))
    check_against_dynamo(w, dynamo)
    memo = [c for r in w.table for c in r.causes if "_KL_MEMOIZE" in c.words]
    assert memo and all("torch's own memo, filled at the first call" in c.words for c in memo), w.table.to_text()
    assert all(c.fix.startswith("expected once") and "pass only what" not in c.fix for c in memo), memo
    torch._dynamo.reset()
    torch.distributions.kl._KL_MEMOIZE.clear()
    kl_loss(torch.randn(2, 4, 8), torch.randn(2, 4, 8))  # the fix as printed: one eager call first
    with tl.watch() as fixed:
        for _ in range(2):
            f(torch.randn(2, 4, 8), torch.randn(2, 4, 8))
    assert fixed.table.total_compiles < w.table.total_compiles, (fixed.table.to_text(), w.table.to_text())
