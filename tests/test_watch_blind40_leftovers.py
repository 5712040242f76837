"""tl.watch() after the fortieth blind round: what it left open (a per-parameter optimizer update whose gradient
and state follow the parameter), checked against Dynamo's records, with the fix as printed applied."""

import numpy as np
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


def lion_update(p, grad, exp_avg, lr, wd, beta1, beta2):  # lucidrains/lion-pytorch's update, one parameter
    p.mul_(1 - lr * wd)
    update = exp_avg.mul(beta1).add(grad, alpha=1 - beta1).sign_()
    p.add_(update, alpha=-lr)
    exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)


def lion_update_all(ps, grads, exp_avgs, lr, wd, beta1, beta2):  # the printed fix: every parameter in one call
    torch._foreach_mul_(ps, 1 - lr * wd)
    updates = torch._foreach_add(torch._foreach_mul(exp_avgs, beta1), grads, alpha=1 - beta1)
    torch._foreach_add_(ps, [u.sign() for u in updates], alpha=-lr)
    torch._foreach_mul_(exp_avgs, beta2)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - beta2)


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    model(torch.randn(4, 8)).sum().backward()
    return model, {p: torch.zeros_like(p) for p in model.parameters()}


def test_a_gradient_and_state_shaped_like_the_parameter_follow_it_with_no_fix_of_their_own(dynamo):
    model, state = _model()
    update = torch.compile(lion_update, backend="aot_eager")
    with tl.watch() as w, torch.no_grad():
        for p in model.parameters():
            update(p, p.grad, state[p], 1e-3, 0.01, 0.9, 0.99)
    check_against_dynamo(w, dynamo, also=("tensor 'grad'", "tensor 'exp_avg'"))
    causes = [c for r in w.table for c in r.causes if c.kind != "first"]
    told = "\n".join(f"{c.words} :: {c.fix}" for c in causes)
    assert len(causes) == 3 and all("(grad, exp_avg follow it)" in c.words for c in causes), told
    assert "once per rank" not in told and "mark_dynamic(grad" not in told, told  # p's shape is static anyway
    assert all("force_parameter_static_shapes = False" in c.fix for c in causes), told

    torch._dynamo.reset()
    model, state = _model()
    fixed_update = torch.compile(lion_update_all, backend="aot_eager")
    ps = list(model.parameters())
    with tl.watch() as fixed, torch.no_grad():
        fixed_update(ps, [p.grad for p in ps], [state[p] for p in ps], 1e-3, 0.01, 0.9, 0.99)
    assert fixed.table.total_compiles == 1 < w.table.total_compiles, fixed.table.to_text()


def rand_bbox(size, lam):  # clovaai/CutMix-PyTorch's box, drawn with NumPy
    W, H = size[2], size[3]
    cut_rat = np.sqrt(1.0 - lam)
    cut_w, cut_h = int(W * cut_rat), int(H * cut_rat)
    cx, cy = np.random.randint(W), np.random.randint(H)
    bbx1, bby1 = np.clip(cx - cut_w // 2, 0, W), np.clip(cy - cut_h // 2, 0, H)
    bbx2, bby2 = np.clip(cx + cut_w // 2, 0, W), np.clip(cy + cut_h // 2, 0, H)
    return bbx1, bby1, bbx2, bby2


def cutmix(input, target):
    lam = np.random.beta(1.0, 1.0)
    rand_index = torch.randperm(input.size()[0])
    bbx1, bby1, bbx2, bby2 = rand_bbox(input.size(), lam)
    input[:, :, bbx1:bbx2, bby1:bby2] = input[rand_index, :, bbx1:bbx2, bby1:bby2]
    return input, target, target[rand_index]


def test_a_box_read_back_after_a_break_is_told_at_its_own_line_not_as_an_earlier_draw(dynamo):
    np.random.seed(0)
    step = torch.compile(cutmix, backend="aot_eager")
    with tl.watch() as w:
        for _ in range(2):
            step(torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)))
    check_against_dynamo(w, dynamo, also=(" == ",))
    failed = [b for b in w.table.breaks if "Backend compiler" in b.words]
    assert failed, w.table.to_text()
    for b in failed:  # the box is read back on the line after the break, drawn inside rand_bbox: not lam's line
        assert "on line " in b.words and "input[:, :, bbx1:bbx2, bby1:bby2]" in b.words, b.words
        assert "lam = np.random.beta" not in b.words and "= rand_bbox(input.size(), lam)" in b.words, b.words
