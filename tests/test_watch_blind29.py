"""tl.watch() checked blind, twenty-ninth round: torch's global settings in one guard (the float32 matmul
precision beside grad mode and deterministic algorithms) are each said, never the whole guard left as
Dynamo's text; hooks a library installs as it runs (transformers' output capturing) are said to be its
own, with no fix to register them earlier, and never "undone" because their model was freed; a hook of the
user's that sets an attribute breaks in the user's code, not in torch's Module.__setattr__; a break whose
explanation is only "Dynamo does not support this" is said by what it is; a warnings.warn passed its category
is never told to be reordered, which Dynamo refuses for it; a value carried over a break into an attribute
(self.rng_state = torch.get_rng_state()) is named by it. Checked
against Dynamo's records."""

import warnings

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "aot_eager"


def test_the_matmul_precision_beside_grad_mode_is_said_not_left_as_dynamos_text(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    f = torch.compile(model, backend=BACKEND)
    x, before = torch.randn(4, 16), torch.get_float32_matmul_precision()
    try:
        with tl.watch() as w:
            torch.set_float32_matmul_precision("high")
            f(x).sum().backward()  # training, TF32-style
            torch.set_float32_matmul_precision("highest")
            with torch.no_grad():  # evaluation, full precision
                f(x)
    finally:
        torch.set_float32_matmul_precision(before)
    check_against_dynamo(w, dynamo)
    (state,) = [c for r in w.table for c in r.causes if c.kind == "global_state"]
    assert "the float32 matmul precision changed (torch.set_float32_matmul_precision)" in state.words, state.words
    assert "grad mode changed" in state.words and "not translated" not in w.table.to_text()


def probe():  # a probing loop that asks a compiled GPT-2 for its hidden states on some calls
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64)
    model = torch.compile(GPT2LMHeadModel(config).eval(), backend=BACKEND)
    ids = torch.randint(0, 100, (1, 12))
    with torch.no_grad():
        model(input_ids=ids)
        model(input_ids=ids, output_hidden_states=True)


def test_hooks_a_library_installs_as_it_runs_are_its_own_and_never_undone_by_a_freed_model(dynamo):
    with tl.watch() as w:
        probe()  # the model is freed as it returns
    # transformers' hook installer recompiles per layer and output kind: logged with its first guard only
    check_against_dynamo(w, dynamo, also=("index == ", "check_type_id(module"))
    notes = [c for r in w.table for c in r.causes if c.kind == "hooks"]
    assert notes and all(c.words.startswith("transformers added hooks to ") for c in notes), notes
    assert all("(its own, not yours)" in c.words and "undone" not in c.words for c in notes), notes
    assert all(c.fix.startswith("expected (transformers installs them as it runs)") for c in notes), notes


class CamNet(torch.nn.Module):  # Grad-CAM, hand-rolled: a gradient hook registered inside forward
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
        self.fc, self.gradients = torch.nn.Linear(8, 5), None

    def save_grad(self, g):
        self.gradients = g

    def forward(self, x):
        a = self.features(x)
        a.register_hook(self.save_grad)
        return self.fc(a.mean((2, 3)))


def test_a_hook_of_the_users_that_sets_an_attribute_is_the_users_break_not_torchs(dynamo):
    f = torch.compile(CamNet(), backend=BACKEND)
    with tl.watch() as w:
        out = f(torch.randn(1, 3, 16, 16))
        out[0, out.argmax()].backward()
    check_against_dynamo(w, dynamo)
    (brk,) = w.table.breaks
    assert "library code" not in brk.words and "module.py" not in brk.words, brk.words  # Module.__setattr__
    assert "register that hook outside the compiled call" in brk.fix, brk.fix


def smooth_ce(logits, target, eps=0.1):  # label smoothing with F.one_hot, the class count read from the data
    onehot = torch.nn.functional.one_hot(target).float() * (1 - eps) + eps / logits.shape[-1]
    return -(onehot * torch.nn.functional.log_softmax(logits, -1)).sum(-1).mean()


def test_a_break_whose_explanation_has_no_subject_is_said_by_its_type_line(dynamo):
    f = torch.compile(smooth_ce, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(32, 10), torch.arange(32) % 10)
    check_against_dynamo(w, dynamo)
    (brk,) = w.table.breaks
    assert brk.words.startswith("Attempted to use `torch.nn.functional.one_hot` with data-dependent output shape")
    assert "num_classes" in brk.fix


def attend(q, k, scale_attn=None):  # a deprecated keyword warned about inside forward, as transformers does
    if scale_attn is not None:
        warnings.warn("`scale_attn` is deprecated and will be removed in v5", FutureWarning)  # noqa: B028 (as written)
    return (q @ k.transpose(-1, -2)).softmax(-1)


def test_a_warning_with_its_category_is_never_told_to_be_reordered(dynamo):
    f = torch.compile(attend, backend=BACKEND)
    with tl.watch() as w, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(torch.randn(2, 4, 8), torch.randn(2, 4, 8), scale_attn=True)
    check_against_dynamo(w, dynamo)
    (brk,) = w.table.breaks
    assert "_warnings.warn" in brk.words and "reorderable_logging_functions" not in brk.fix, brk.fix  # it stays


class RevBlock(torch.nn.Module):  # RevNet / Reformer: the RNG state saved in forward to replay dropout
    def __init__(self, d):
        super().__init__()
        self.f, self.g = torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x1, x2):
        self.rng_state = torch.get_rng_state()
        y1 = x1 + torch.nn.functional.dropout(self.f(x2), 0.1, self.training)
        torch.set_rng_state(self.rng_state)
        return y1, x2 + torch.nn.functional.dropout(self.g(y1), 0.1, self.training)


def test_a_value_carried_over_a_break_into_an_attribute_is_named_by_it(dynamo):
    f = torch.compile(RevBlock(16), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(4, 16), torch.randn(4, 16))
    check_against_dynamo(w, dynamo)
    resumed = [r for r in w.table.rows if "after the graph break at line" in r.function]
    assert any(r.signature.startswith("self.rng_state: uint8[") for r in resumed), [r.signature for r in resumed]
    assert "the carried value" not in w.table.to_text()
