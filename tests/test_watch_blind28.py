"""tl.watch() checked blind, twenty-eighth round: a training loop inside a function (its model and optimizer
freed when it returns, and with them Dynamo's guards of their graphs) is told from the guards each graph
had, read as soon as it was installed: an LR scheduler's float lr, which each compiled optimizer step pins to
one value, is never told "made dynamic, later values reuse this graph"; no_grad after inference_mode is
the mode that changed, never "a tensor subclass"; a graph with no operation whose work compiled in the
functions it calls (or in its next resumed part) is never said to run eagerly; progressive unfreezing (a param
group added, a frozen group's first gradient) is expected, with no fix that names the wrong object or cannot
apply inside torch's optimizer, whose own graph_break() is torch's; a partial whose function became a builtin,
a meta-device dry run, an enum's identity guard and a numpy scalar are each said as what they are; labels'
layout is never labels's. Checked against Dynamo's records."""

import enum

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "aot_eager"  # as torch.compile's default: the step specialises the lr again (eager keeps it dynamic)


def train(steps: int) -> None:  # the PyTorch tutorial's compiled optimizer step with an LR scheduler
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)

    @torch.compile(backend=BACKEND)
    def opt_step():
        opt.step()

    x = torch.randn(16, 8)
    for _ in range(steps):
        model(x).pow(2).mean().backward()
        opt_step()
        sched.step()
        opt.zero_grad()


def test_a_scheduled_lr_in_a_loop_that_returned_is_told_as_one_graph_per_value(dynamo):
    with tl.watch() as w:
        train(5)  # its optimizer is freed here, before the watch reads anything
    check_against_dynamo(w, dynamo, also=("len(self.state", "['lr'] == 0.1"))  # logged beside the first failed guard
    lr = [c for r in w.table for c in r.causes if c.kind == "lr"]
    assert lr and sum(c.count for c in lr) == 3, str(w.table)  # steps 2 to 4 each got a graph for their lr
    assert all("made it dynamic" not in c.words and "a Python float is baked into the graph" in c.words for c in lr)
    assert all(c.fix.startswith("hold the learning rate in a tensor") for c in lr), [c.fix for c in lr]
    assert "none needed: later values reuse" not in w.table.to_text()


def test_no_grad_after_inference_mode_is_the_mode_not_a_tensor_subclass(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    f = torch.compile(model, backend=BACKEND)
    x = torch.randn(4, 8)
    with tl.watch() as w:
        f(x).sum().backward()  # a training step
        with torch.inference_mode():  # validation, as Lightning runs it
            f(x)
        with torch.no_grad():  # a metric computed elsewhere
            f(x)
    check_against_dynamo(w, dynamo, also=("grad_mode",))  # the no_grad row was compiled for grad mode off too
    (mode,) = [c for r in w.table for c in r.causes if "dispatch key" in c.guard]
    assert mode.kind == "inference" and mode.words == (
        "input is seen with autograd again: the graph was compiled under torch.inference_mode(), the call ran "
        "outside it (no_grad or training)"
    ), mode.words
    assert "not both" in mode.fix and "tensor subclass" not in w.table.to_text()


def test_an_empty_graph_whose_work_compiled_in_what_it_calls_is_never_said_to_run_eagerly(dynamo):
    with tl.watch() as w:
        train(2)
    check_against_dynamo(w, dynamo, also=("len(self.state", "['lr'] == 0.1"))
    (outer,) = w.table.by_function("opt_step")  # breaks at torch's skipped step wrapper, before any work
    (empty,) = [c for c in outer.causes if c.kind == "empty"]
    assert "runs eagerly on every call" not in empty.words, empty.words  # was: the optimizer's work would
    assert "the work is in what it calls, compiled as graphs of their own (step (" in empty.words, empty.words
    assert empty.fix.startswith("none needed where its own lines do little")


class PackedRNN(torch.nn.Module):  # the PyTorch NLP tutorial's text classifier over padded batches
    def __init__(self):
        super().__init__()
        self.emb, self.rnn, self.fc = (
            torch.nn.Embedding(50, 16),
            torch.nn.LSTM(16, 32, batch_first=True),
            torch.nn.Linear(32, 3),
        )

    def forward(self, tokens, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            self.emb(tokens), lengths, batch_first=True, enforce_sorted=False
        )
        _, (h, _) = self.rnn(packed)
        return self.fc(h[-1])


def test_an_empty_resumed_part_whose_next_part_compiled_has_no_empty_note(dynamo):
    f = torch.compile(PackedRNN(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randint(0, 50, (4, 10)), torch.tensor([10, 7, 5, 3])).sum().backward()
    check_against_dynamo(w, dynamo)
    assert len(w.table.breaks) == 2 and "holds no operation" not in w.table.to_text(), str(w.table)


def unfreeze(groups_first: bool) -> None:  # ULMFiT / fastai progressive unfreezing with a compiled step
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    head, body = list(model[2].parameters()), list(model[0].parameters())
    for p in body:
        p.requires_grad_(False)
    groups = [{"params": head, "lr": torch.tensor(1e-3)}, {"params": body, "lr": torch.tensor(1e-4)}]
    opt = torch.optim.AdamW(groups if groups_first else groups[:1])

    @torch.compile(backend=BACKEND)
    def opt_step():
        opt.step()

    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    for epoch in range(2):
        if epoch == 1:  # unfreeze the body
            for p in body:
                p.requires_grad_(True)
            if not groups_first:
                opt.add_param_group(groups[1])
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt_step()
        opt.zero_grad(set_to_none=True)


def test_progressive_unfreezing_is_expected_per_group_and_torchs_own_break_is_torchs(dynamo):
    with tl.watch() as w:
        unfreeze(groups_first=False)
    check_against_dynamo(w, dynamo)
    (added,) = [c for r in w.table for c in r.causes if "param_groups" in c.guard]
    assert added.words.startswith("the optimizer has another number of param groups (was 1; add_param_group")
    assert added.fix.startswith("expected once per group added: nothing to change"), added.fix
    text = w.table.to_text()
    assert "User-inserted" not in text and "torch's own code breaks the graph on purpose" in text, text
    assert "without it being passed in" not in text


def test_a_frozen_groups_first_gradient_is_expected_and_never_set_by_hand(dynamo):
    with tl.watch() as w:
        unfreeze(groups_first=True)
    check_against_dynamo(w, dynamo, also=("grad",))  # each of the group's parameters got its gradient
    grads = [c for r in w.table for c in r.causes if c.kind == "none"]
    assert grads and all(c.fix.startswith("expected once per parameter group that starts training") for c in grads)
    assert "model.param_groups" not in w.table.to_text()  # was the fix: model is not the optimizer


def mlp(x, w1, w2, act):  # timm's act_layer, passed as a functools.partial built per call
    return act(x @ w1) @ w2


def test_a_partial_whose_function_became_a_builtin_is_named_not_left_as_dynamos_accessor_text(dynamo):
    import functools

    f = torch.compile(mlp, backend=BACKEND)
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 8)
    with tl.watch() as w:
        for _ in range(2):  # a fresh partial with the same arguments: no recompile
            f(x, w1, w2, functools.partial(torch.nn.functional.leaky_relu, negative_slope=0.2))
        f(x, w1, w2, functools.partial(torch.nn.functional.gelu, approximate="tanh"))
    check_against_dynamo(w, dynamo)
    (cause,) = [c for r in w.table for c in r.causes if "__code__" in c.guard]
    assert cause.words.startswith("act.func is now another function, one without Python code"), cause.words
    assert "not translated" not in w.table.to_text() and cause.fix.startswith("expected once per function")


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


def run_block(block, x):
    return block(x)


def test_a_meta_device_dry_run_is_told_to_run_uncompiled_not_to_enter_the_mode_first(dynamo):
    f = torch.compile(run_block, backend=BACKEND)
    with tl.watch() as w:
        with torch.device("meta"):  # torchtitan / FSDP: shapes and parameter counts on the meta device first
            f(Residual(), torch.empty(4, 8))
        f(Residual(), torch.randn(4, 8))
    check_against_dynamo(w, dynamo)
    (mode,) = [c for r in w.table for c in r.causes if "function_mode_stack" in c.guard]
    assert "dry run is a mode of its own: run it uncompiled" in mode.fix and "before the first" not in mode.fix


class Pooling(enum.Enum):  # sentence-transformers' pooling modes
    MEAN, CLS = 1, 2


def pool(hidden, mode):
    return hidden[:, 0] if mode is Pooling.CLS else hidden.mean(1)


def test_an_enum_members_identity_guard_reads_with_its_class_not_dynamos_type_text(dynamo):
    f = torch.compile(pool, backend=BACKEND)
    with tl.watch() as w:
        for mode in (Pooling.MEAN, Pooling.CLS):
            f(torch.randn(2, 6, 8), mode)
    check_against_dynamo(w, dynamo)
    (row,) = [r for r in w.table.rows if "Pooling.CLS" in r.signature]
    assert (
        row.cause.startswith("mode is another Pooling member")
        and row.shown_guard == "mode is the same object (a Pooling)"
    )


def weighted_loss(pred, target, w_aux):  # a loss weight read from a numpy schedule (np.cos warmup arrays)
    return (pred - target).pow(2).mean() + w_aux * pred.abs().mean()


def test_a_numpy_scalar_is_shown_as_numpy_and_its_dynamic_value_said_as_numpys(dynamo):
    import numpy as np

    f = torch.compile(weighted_loss, backend=BACKEND)
    schedule = 0.5 * (1 + np.cos(np.linspace(0, np.pi, 4)))
    with tl.watch() as w:
        for weight in schedule:
            f(torch.randn(4, 3), torch.randn(4, 3), weight)
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows  # Dynamo reads a numpy scalar as a tensor: one graph for every value
    assert "w_aux: np.float64 1.0" in row.signature, row.signature
    assert "w_aux dynamic from the first compile (a numpy scalar, which Dynamo reads as a tensor)" in row.cause
    assert "mark_dynamic" not in row.cause


def lm_loss(logits, labels):  # HF's causal-LM loss on shifted views, then on contiguous copies
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))


def test_a_name_ending_in_s_takes_a_plain_apostrophe(dynamo):
    f = torch.compile(lm_loss, backend=BACKEND)
    logits, labels = torch.randn(2, 7, 11), torch.randint(0, 11, (2, 7))
    with tl.watch() as w:
        f(logits[:, :-1], labels[:, 1:])
        f(logits[:, :-1].contiguous(), labels[:, 1:].contiguous())
    check_against_dynamo(w, dynamo, also=("stride mismatch",))
    text = w.table.to_text()
    assert "labels' memory layout changed to contiguous" in text and "labels's" not in text, text


def test_a_failure_to_read_the_frame_never_fails_the_users_compile(monkeypatch):
    # a bug in describing one input once raised through Dynamo's callback: every compile failed inside a watch
    from tpu_lab.compile.sources import dynamo_source

    def broken(code, values):
        raise UnboundLocalError("a bug in the watch")

    monkeypatch.setattr(dynamo_source, "describe_inputs", broken)
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 2, backend=BACKEND)
    with tl.watch() as w:
        assert torch.equal(f(torch.ones(3)), torch.full((3,), 2.0))
    assert w.table.total_compiles == 1


class Features(torch.nn.Module):  # Grad-CAM style: features captured by a hook on a submodule
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def test_a_hook_added_then_removed_before_the_table_is_read_is_still_told(dynamo):
    model = Features()
    f = torch.compile(model, backend=BACKEND)
    x, acts = torch.randn(2, 3, 8, 8), {}
    with tl.watch() as w:
        f(x)
        feature_hook = model.features.register_forward_hook(lambda m, i, o: acts.__setitem__("feat", o))
        f(x)  # the graph compiled before the hook never runs it
        top_hook = model.register_forward_hook(lambda m, i, o: acts.__setitem__("out", o))
        f(x)  # the top module's hook runs outside the graph: its lambda compiles, a compile that sees the hooks
        feature_hook.remove()
        top_hook.remove()
    check_against_dynamo(w, dynamo)
    assert "feat" not in acts and "out" in acts
    (note,) = [c for r in w.table for c in r.causes if c.kind == "hooks"]
    assert note.words.startswith("a hook was added to self.features after this graph was compiled"), note.words
    assert note.words.endswith(
        "seen at a later compile and undone since: the calls in between ran the graph as compiled"
    )
