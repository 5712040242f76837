"""tl.watch() checked blind, thirty-first round: a hook removed after a compile, or added beside another, is
no silent change (Dynamo guards a hook dict it traced non-empty, and recompiles), and pruning's hook swapped
at each round is said as such; per-sample target dicts that differ in rows are told to be padded, not
dropped as a last batch; a module's own parameters passed in by functional_call's first call are told to be
copied, not tied; an operator Dynamo cannot capture in library code (CTC loss) is never told to capture it,
and a resumed part's fix never contradicts itself; eval() on a compiled library module is train/eval, not a
flag; a failure inside torch.func's transforms is told to run uncompiled. Checked against Dynamo's records."""

import pytest
import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "aot_eager"


def prune_rounds():  # the pruning tutorial, applied iteratively during training, then made permanent
    import torch.nn.utils.prune as prune

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    f = torch.compile(net, backend=BACKEND)
    x = torch.randn(4, 8)
    for rnd in range(3):
        f(x).sum().backward()
        if rnd < 2:
            prune.l1_unstructured(net[0], "weight", amount=0.2)
    prune.remove(net[0], "weight")
    with torch.no_grad():
        assert torch.equal(f(x), net(x))  # the graph from before pruning serves again: nothing silent


def test_pruning_hooks_are_said_replaced_and_a_removed_hook_is_no_silent_change(dynamo):
    with tl.watch() as w:
        prune_rounds()
    check_against_dynamo(w, dynamo, also=("_forward_pre_hooks", "weight"))
    hooks = [c for r in w.table for c in r.causes if c.kind == "hooks"]
    assert hooks and all(
        c.words.endswith("'s pruning hook was replaced (torch.nn.utils.prune adds or swaps one at each pruning round)")
        for c in hooks
    ), [c.words for c in hooks]
    assert all("prune.remove(module, 'weight')" in c.fix for c in hooks)
    assert "the graph still runs it" not in str(w.table) and "hooks added after a compile" not in str(w.table)


def detection_loss():  # DETR's SetCriterion: a list of per-image target dicts, each with its own box count
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 7)

    @torch.compile(backend=BACKEND)
    def criterion(feats, targets):
        out, loss = head(feats), 0.0
        for b, t in enumerate(targets):
            n = t["boxes"].shape[0]
            loss = loss + F.l1_loss(out[b, :n, :4].sigmoid(), t["boxes"]) + F.cross_entropy(out[b, :n, 4:], t["labels"])
        return loss / len(targets)

    for boxes in ([2, 3], [1, 4], [3, 3]):
        targets = [{"boxes": torch.rand(n, 4), "labels": torch.randint(0, 3, (n,))} for n in boxes]
        criterion(torch.randn(len(boxes), 6, 8), targets)


def test_per_sample_target_dicts_that_differ_in_rows_are_told_to_pad_not_to_drop_a_last_batch(dynamo):
    with tl.watch() as w:
        detection_loss()
    check_against_dynamo(w, dynamo, also=("size mismatch",))  # Dynamo logs one tensor of four
    sizes = [c for r in w.table for c in r.causes if c.kind == "size"]
    # a size Dynamo then made dynamic (named targets[1]['boxes'] dim 0 since the dynamic dims are named as the
    # guards name them) needs nothing more; every other size change gets the per-sample fix
    asked = [c for c in sizes if not c.fix.startswith("none needed: Dynamo made targets[")]
    assert asked and all(
        c.fix.startswith("each dict in targets is one sample with its own number of rows") for c in asked
    )
    assert not any("last, smaller batch" in c.fix or "drop_last" in c.fix for c in sizes)


def inner_loop(copied):  # first-order MAML with torch.func.functional_call (learn2learn-style)
    from torch.func import functional_call

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    @torch.compile(backend=BACKEND)
    def fwd(params, x):
        return functional_call(net, params, (x,))

    xs, ys = torch.randn(5, 4), torch.randn(5, 1)
    params = {k: v.clone() if copied else v for k, v in net.named_parameters()}
    for _ in range(2):
        loss = ((fwd(params, xs) - ys) ** 2).mean()
        grads = torch.autograd.grad(loss, list(params.values()))
        params = {k: (p - 0.01 * g).detach().requires_grad_() for (k, p), g in zip(params.items(), grads, strict=True)}


def test_a_modules_own_parameters_passed_in_once_are_told_to_be_copied_which_keeps_one_graph(dynamo):
    with tl.watch() as w:
        inner_loop(copied=False)
    check_against_dynamo(w, dynamo, also=(" is params[",))  # Dynamo logs one parameter of four
    aliasing = [c for r in w.table for c in r.causes if c.kind == "aliasing"]
    assert aliasing and all("is no longer net[" in c.words and "itself" in c.words for c in aliasing), aliasing
    assert all("v.clone()" in c.fix and "tie" not in c.fix for c in aliasing)
    torch._dynamo.reset()
    with tl.watch() as fixed:
        inner_loop(copied=True)
    assert sum(r.compiles for r in fixed.table if "(backward)" not in r.function) == 1, fixed.table.to_text()


ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)


def ctc_step(x, targets, in_lens, tgt_lens):  # torchaudio ASR: target lengths as lists from the collate_fn
    torch._dynamo.graph_break()  # as the acoustic model's GRU breaks (allow_rnn is off)
    lp = F.log_softmax(x, -1).transpose(0, 1)
    return ctc(lp, targets, in_lens, tgt_lens)


def test_an_operator_dynamo_cannot_capture_is_never_told_to_be_captured_and_no_fix_contradicts_itself(dynamo):
    f = torch.compile(ctc_step, backend=BACKEND)
    torch.manual_seed(0)
    with tl.watch() as w:
        for lens in ([3, 4], [5, 2], [4, 4]):
            f(torch.randn(2, 12, 6), torch.randint(1, 6, (sum(lens),)), [12, 11], lens)
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    loss = [b for b in w.table.breaks if "ctc_loss" in b.words]
    assert loss and all(b.fix.startswith("call ctc_loss outside the compiled function") for b in loss), loss
    assert not any("= True" in b.fix for b in loss)
    fixes = [c.fix for r in w.table for c in r.causes] + [b.fix for b in w.table.breaks]
    assert not any("to skip even this one: none needed" in fix for fix in fixes), fixes


def test_eval_on_a_compiled_library_module_is_train_eval_not_a_flag(dynamo):
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
    f = torch.compile(encoder, backend=BACKEND)
    x = torch.randn(2, 5, 16)
    with tl.watch() as w:
        f(x)
        encoder.eval()
        f(x)
    check_against_dynamo(w, dynamo, also=(".training == True",))
    kinds = {c.kind for r in w.table for c in r.causes}
    assert "training" in kinds and "flag" not in kinds, [(c.kind, c.words) for r in w.table for c in r.causes]


def test_a_failure_inside_torch_funcs_transforms_is_told_to_run_uncompiled(dynamo):
    from torch.func import functional_call, hessian, vmap

    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    params = {k: v.detach() for k, v in net.named_parameters()}

    def u(p, x):
        return functional_call(net, p, (x,)).squeeze()

    @torch.compile(backend=BACKEND)
    def residual(p, xs):  # a PINN's u_xx
        return vmap(hessian(u, argnums=1), in_dims=(None, 0))(p, xs).pow(2).mean()

    raised = None
    with tl.watch() as w:
        try:
            residual(params, torch.rand(8, 1))
        except Exception as e:
            raised = e
    failed = [c for r in w.table for c in r.causes if c.kind == "failed" and "torch/_functorch/" in c.words]
    if raised is None or not failed:
        pytest.skip(f"torch {torch.__version__} compiles (or breaks on) this transform without failing inside it")
    assert all(
        c.fix.startswith("run this function uncompiled: Dynamo failed inside torch.func's transform") for c in failed
    )


class Rotary(torch.nn.Module):  # transformers <= 4.35 Llama: cos/sin buffers registered again when outgrown
    def __init__(s, dim=16, max_pos=16):
        super().__init__()
        s.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)
        s._set_cos_sin_cache(max_pos)

    def _set_cos_sin_cache(s, seq_len):
        s.max_seq_len_cached = seq_len
        emb = torch.cat([torch.outer(torch.arange(seq_len, dtype=s.inv_freq.dtype), s.inv_freq)] * 2, -1)
        s.register_buffer("cos_cached", emb.cos(), persistent=False)
        s.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(s, x):
        seq_len = x.shape[1]
        if seq_len > s.max_seq_len_cached:
            s._set_cos_sin_cache(seq_len)
        return x * s.cos_cached[:seq_len] + x * s.sin_cached[:seq_len]


def test_a_buffer_the_module_regrows_is_told_to_be_built_once_at_the_largest_size_not_marked(dynamo):
    f = torch.compile(Rotary(), backend="eager")  # as the reviewer ran it
    with tl.watch() as w:
        for length in (8, 8, 24, 24, 8):
            f(torch.randn(2, length, 16))
    check_against_dynamo(w, dynamo, also=("cos_cached", "sin_cached", "max_seq_len_cached"))
    grown = [c for r in w.table for c in r.causes if c.kind == "size" and "cos_cached" in c.words]
    assert grown and all("at the largest size" in c.fix and "mark_dynamic(" not in c.fix for c in grown), grown


class QATNet(torch.nn.Module):  # the quantization-aware training tutorial: stubs around two linear layers
    def __init__(s):
        super().__init__()
        import torch.ao.quantization as tq

        s.q, s.fc1, s.relu, s.fc2, s.dq = (
            tq.QuantStub(),
            torch.nn.Linear(8, 8),
            torch.nn.ReLU(),
            torch.nn.Linear(8, 4),
            tq.DeQuantStub(),
        )

    def forward(s, x):
        return s.dq(s.fc2(s.relu(s.fc1(s.q(x)))))


def test_a_resumed_part_is_never_said_to_leave_its_work_eager_where_a_later_part_of_it_compiled_work(dynamo):
    import torch.ao.quantization as tq

    torch.manual_seed(0)
    model = QATNet().train()
    model.qconfig = tq.get_default_qat_qconfig("fbgemm")
    tq.prepare_qat(model, inplace=True)
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(4, 8)).pow(2).mean().backward()
    check_against_dynamo(w, dynamo, also=("requires_grad", "size mismatch"))  # Dynamo logs the first of three
    resumed = [r for r in w.table if r.function.startswith("forward after the graph break")]
    assert any(r.compiles and "(backward)" not in r.function for r in resumed), [r.function for r in w.table]
    assert not any("no part after it compiled" in r.cause for r in resumed), [r.cause for r in resumed]
