"""tl.watch() checked blind, round 38's leftovers: a size a loop of the user's code runs over is named by that
line (YOLOv5's ``range(t.shape[0])`` after a break is in test_watch_blind38.py), a module attribute set to
None between calls, a size change in a compile a grad mode forces, one ``if`` as one break, a break inside an
assignment's target. Checked against Dynamo's records."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


def row_counts(x, w):  # a plain function whose loop runs over a size Dynamo traced dynamic
    out = x.sum(1)
    for i in range(x.shape[0]):
        out = out + w[i % 4] * i
    return out


def test_a_loop_over_a_size_is_named_by_its_line_with_no_mark_dynamic(dynamo):
    f = torch.compile(row_counts, backend="eager")
    with tl.watch() as w:
        for n in (3, 5, 7, 9):
            f(torch.randn(n, 2), torch.randn(4))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sized = [c for r in w.table for c in r.causes if c.kind == "size"]
    loop = row_counts.__code__.co_firstlineno + 2
    looped = [
        c for c in sized if f"line {loop} (for i in range(x.shape[0]):) takes x.shape[0] as the length" in c.words
    ]
    assert looped, w.table.to_text()
    assert all(
        c.fix.startswith(f"vectorise the loop at line {loop}") and "mark_dynamic(" not in c.fix for c in looped
    ), looped


def test_a_modules_attribute_set_to_none_between_calls_is_named_as_the_module_names_it(dynamo):
    torch.manual_seed(0)  # torch.optim.swa_utils.update_bn sets each BatchNorm's momentum to None, for one pass
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.LazyLinear(2)
    )
    model(torch.randn(2, 3, 6, 6))
    loader = [torch.randn(8, 3, 6, 6) for _ in range(3)]

    def train_then_update_bn(compiled, swa_model):
        for x in loader:
            compiled(x).sum().backward()
        torch.optim.swa_utils.update_bn(loader, swa_model)

    compiled = torch.compile(model, backend="eager")
    with tl.watch() as w:
        train_then_update_bn(compiled, compiled)
    check_against_dynamo(w, dynamo, also=("momentum",))
    shown = " ".join(r.signature for r in w.table)
    assert "self[1].momentum: None" in shown and "_modules" not in shown, w.table.to_text()
    nones = [c for r in w.table for c in r.causes if "self[1].momentum is now None" in c.words]
    assert nones and all("uncompiled module" in c.fix and "in place of None" not in c.fix for c in nones), nones
    torch._dynamo.reset()
    model[1].momentum = 0.1
    with tl.watch() as fixed:  # the fix as printed: the one-off pass on the uncompiled module
        train_then_update_bn(torch.compile(model, backend="eager"), model)
    assert fixed.table.total_compiles < w.table.total_compiles, (fixed.table.to_text(), w.table.to_text())


def test_a_size_change_in_a_compile_a_new_grad_mode_forces_gets_no_advice_to_skip_it(dynamo):
    net = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    f = torch.compile(net, backend="eager")
    with tl.watch() as w:
        f(torch.randn(8, 6)).sum().backward()
        with torch.no_grad():  # evaluation at another batch size: the grad mode alone needs a graph
            f(torch.randn(5, 6))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sized = [c for r in w.table for c in r.causes if c.kind == "size"]
    assert sized and all("to skip even this one" not in c.fix and "pad it to" not in c.fix for c in sized), sized
    assert all("this compile needs a graph of its own anyway: grad mode changed" in c.fix for c in sized), sized


def safe_cholesky(a):  # GPyTorch's psd_safe_cholesky, cut down: compiled on its own and inlined into a caller
    chol, info = torch.linalg.cholesky_ex(a)
    if not torch.any(info):
        return chol
    return torch.linalg.cholesky(a + 1e-4 * torch.eye(a.shape[0]))


def neg_log_likelihood(x):
    return safe_cholesky(x @ x.T + torch.eye(x.shape[0])).diagonal().log().sum()


def test_one_if_is_one_break_with_its_origin_whether_its_frame_or_its_callers_hit_it(dynamo):
    f, g = torch.compile(neg_log_likelihood, backend="eager"), torch.compile(safe_cholesky, backend="eager")
    with tl.watch() as w:
        g(torch.eye(3) * 2)
        f(torch.randn(4, 2))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    line = safe_cholesky.__code__.co_firstlineno + 2
    at = [b for b in w.table.breaks if b.where.endswith(f":{line}")]
    assert len(at) == 1 and at[0].count >= 2, w.table.breaks
    assert "computed from line" in at[0].words, at[0]


def zero_listed(x, idx):  # a subscript assignment whose index breaks: the value and the target wait on the stack
    x = x * 2
    x[idx.tolist()] = 0.0
    return x.sum()


def test_a_break_inside_an_assignments_target_names_what_waits_on_the_stack(dynamo):
    f = torch.compile(zero_listed, backend="eager")
    with tl.watch() as w:
        for n in (2, 3):
            f(torch.randn(6), torch.arange(n))
    check_against_dynamo(w, dynamo, also=("len(", "size mismatch", "== "))
    resumed = [r for r in w.table if "after the graph break" in r.function]
    assert resumed and all(r.signature.startswith("the value stored in x: float 0.0") for r in resumed), (
        w.table.to_text()
    )
