"""tl.watch() checked blind, twenty-fourth round: a size condition kept by its remainder (odd lengths) said as
that remainder, never as "each value a graph"; a NumPy random draw compared in a branch after a graph break
said as a number crossing the branch, and the draw on the break's own line named as such; an enum that picks
a code path told as expected, not to be swapped for an int; a backend that met a 0-d tensor index told in
words with a fix that works, never fullgraph=False where it is False already; a padding mask's neutral value
is all False; an error of tpu_lab's own while putting a guard in words never ends the user's block. Checked
against Dynamo's records."""

import enum
import logging
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo, printed_setting_applied

import tpu_lab as tl
from tpu_lab.compile.causes import guard_objects

BACKEND = "eager"


def pairs(x):  # pad an odd length by one, then sum neighbouring frames (a stride-2 pooling by hand)
    if x.shape[1] % 2 != 0:
        x = F.pad(x, (0, 0, 0, 1))
    return x.reshape(x.shape[0], -1, 2, x.shape[2]).sum(2)


def test_a_size_condition_kept_by_its_remainder_is_said_as_that_remainder(dynamo):
    f = torch.compile(pairs, backend=BACKEND)
    with tl.watch() as w:
        for n in (5, 7, 9, 8):
            f(torch.randn(2, n, 4))
    check_against_dynamo(w, dynamo, also=("% 16) == 0", "// 2)) == 0"))
    causes = [c for r in w.table for c in r.causes]
    assert "verbatim" not in {c.kind for c in causes}, causes
    (odd,) = [c for c in causes if c.guard.strip() == "(x.size()[1] % 2) != 0"]
    assert odd.words.startswith("a size no longer meets a condition the graph assumed (x.size()[1] % 2 == 1)")
    (reuse,) = [c for c in causes if c.kind == "size"]  # the graph for odd lengths: each odd length reuses it
    assert "while x.size()[1] % 2 == 1 holds" in reuse.fix and "each value of it is a graph" not in reuse.fix


def noisy_gain(wave):  # audiomentations-style: NumPy draws inside the compiled function
    gain_db = np.random.uniform(-6, 6)
    wave = wave * (10 ** (gain_db / 20))
    if np.random.rand() < 0.5:
        wave = wave + 0.005 * torch.randn_like(wave)
    return wave.clamp(-1, 1)


def test_a_numpy_draw_compared_after_a_break_is_a_number_crossing_the_branch(dynamo):
    f = torch.compile(noisy_gain, backend=BACKEND)
    np.random.seed(0)
    with tl.watch() as w:
        for _ in range(6):
            f(torch.rand(2, 64) * 2 - 1)
    check_against_dynamo(w, dynamo)
    causes = [c for r in w.table for c in r.causes]
    assert "verbatim" not in {c.kind for c in causes}, causes
    (crossed,) = [c for c in causes if c.kind == "number_branch"]
    assert "crossed a condition the graph assumed" in crossed.words and "if np.random.rand() < 0.5:" in crossed.words
    drawn = {b.where.rsplit(":", 1)[1]: b for b in w.table.breaks}
    assert "the number comes from line" in drawn[str(noisy_gain.__code__.co_firstlineno + 1)].words
    branch = drawn[str(noisy_gain.__code__.co_firstlineno + 3)]
    assert "a NumPy random draw" in branch.words and branch.fix.startswith("make it branchless with a tensor draw")
    assert "make the choice outside the compiled function and pass it in as a bool" in branch.fix  # not the number


class Act(enum.Enum):
    GELU = "gelu"
    SILU = "silu"


class EnumMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act = torch.nn.Linear(8, 8), Act.GELU

    def forward(self, x):
        h = self.fc(x)
        return F.gelu(h) if self.act is Act.GELU else F.silu(h)


def test_an_enum_that_picks_a_code_path_is_expected_per_value_not_swapped_for_an_int(dynamo):
    model = EnumMLP()
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for act in (Act.GELU, Act.SILU, Act.GELU):
            model.act = act
            f(torch.randn(2, 8))
    check_against_dynamo(w, dynamo)
    (member,) = [c for r in w.table for c in r.causes if c.kind == "enum"]
    assert member.fix.startswith("expected once per value, and nothing to do for a few values"), member.fix
    assert "an int in its place would too" in member.fix and "pass an int" not in member.fix


class IndexedMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act_id = torch.nn.Linear(8, 8), torch.tensor(0)

    def forward(self, x):
        h = self.fc(x)
        return torch.stack([F.gelu(h), F.silu(h)])[self.act_id]  # a 0-d tensor as an index


def test_a_backend_that_met_a_zero_d_index_says_so_and_never_offers_fullgraph_false(dynamo):
    f = torch.compile(IndexedMLP(), backend="aot_eager")
    with tl.watch() as w, torch.no_grad():
        f(torch.randn(2, 8))
    check_against_dynamo(w, dynamo)
    (row,) = [r for r in w.table if r.failed]
    (gave_up,) = [c for c in row.causes if "Dynamo gave up" in c.words]
    assert "aten._local_scalar_dense" not in gave_up.words and "a 0-d tensor as an index" in gave_up.words
    assert "fullgraph=False" not in gave_up.fix and "torch.index_select or torch.gather" in gave_up.fix


def test_a_padding_mask_passed_only_sometimes_is_told_its_neutral_value_is_all_false():
    assert "an all-False mask: True marks padding" in guard_objects.always_pass("key_padding_mask")
    assert "all ones where 1 keeps a position" in guard_objects.always_pass("attention_mask")


def test_an_error_of_its_own_while_putting_a_guard_in_words_never_ends_the_users_block(dynamo, monkeypatch):
    from tpu_lab.compile.causes import guard_words

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in tpu_lab")

    monkeypatch.setattr(guard_words, "none_words", broken)

    def step(x, mask=None):
        return x.sin() if mask is None else x.sin() * mask

    f = torch.compile(step, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(3))
        out = f(torch.randn(3), torch.ones(3))
    assert out.shape == (3,)  # the user's code ran and returned
    check_against_dynamo(w, dynamo)
    (said,) = [c for c in w.table.rows[-1].causes]
    assert said.kind == "verbatim" and "(RuntimeError: a bug in tpu_lab)" in said.words, said


class PositionalEncoder(torch.nn.Module):  # a model that warns and truncates past its longest length
    def __init__(self, max_len=32, d=16):
        super().__init__()
        self.max_len, self.pe, self.proj = max_len, torch.nn.Embedding(max_len, d), torch.nn.Linear(d, d)

    def forward(self, x):
        length = x.shape[1]
        if length > self.max_len:
            warnings.warn(f"sequence length {length} > max_len {self.max_len}; truncating")  # noqa: B028
            x = x[:, : self.max_len]
            length = self.max_len
        return self.proj(x + self.pe(torch.arange(length)))


def test_a_warning_is_told_the_setting_that_moves_it_past_the_graph_and_every_mark_is_the_same(dynamo):
    # Dynamo moves only a call without keyword arguments (a stacklevel= would stop it): this one has none
    f = torch.compile(PositionalEncoder(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for length in (20, 40, 24, 48):
            f(torch.randn(2, length, 16))
    check_against_dynamo(w, dynamo)
    fixes = [c.fix for r in w.table for c in r.causes]
    assert not [x for x in fixes if "torch._dynamo.mark_dynamic(x" in x], fixes  # the break's part fixes the size
    assert [x for x in fixes if "maybe_mark_dynamic(x, 1), not mark_dynamic" in x], fixes
    (warned,) = w.table.breaks
    setting = "torch._dynamo.config.reorderable_logging_functions.add(warnings.warn)"
    assert warned.fix.startswith(f"{setting} before the first call"), warned.fix
    with printed_setting_applied(setting), tl.watch() as w, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for length in (20, 40, 24, 48):
            f(torch.randn(2, length, 16))
    assert w.table.breaks == (), w.table


def test_the_guard_managers_own_word_for_a_failed_type_check_is_said_as_a_type_change():
    # seen re-checking every guard of transformers' dory: two ModelOutput dataclasses' generated __init__
    from tpu_lab.compile.causes import guard_words
    from tpu_lab.compile.causes.cause import Failure

    said = guard_words.words(Failure("0/3", "TYPE_MISMATCH(L['self'])", "", "", ()), inputs={"self": "CausalLMOutput"})
    assert said.kind == "type" and said.words == "self is now a CausalLMOutput (a check of its type failed)", said


def test_a_dict_with_fewer_keys_is_one_change_said_once_with_both_guards(dynamo):
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def task_loss(params, x, y):  # first-order MAML: torch.func.functional_call with the params dict given
        return F.mse_loss(torch.func.functional_call(net, params, (x,)), y)

    f = torch.compile(task_loss, backend=BACKEND)
    every = dict(net.named_parameters())
    head = {k: v for k, v in every.items() if k.startswith("2.")}  # adapt the head only
    with tl.watch() as w:
        f(every, torch.randn(5, 1), torch.randn(5, 1))
        f(head, torch.randn(5, 1), torch.randn(5, 1))
    check_against_dynamo(w, dynamo, also=("len(params) != 4", "list(dict.keys(params))["))
    (keys,) = [c for c in w.table.rows[-1].causes]
    assert keys.words.startswith("dict params has another number of keys (was 4; now '2.weight', '2.bias')"), keys
    assert "list(params)[0] == '0.weight'" in keys.shown_guard and "'s keys" not in str(w.table)


def early_out(x, w):
    sel = x.sum(-1) > 0
    if not sel.any():  # the common early-out of mixture-of-depths code
        return x
    return x + torch.where(sel[..., None], x @ w, 0)


def test_a_refusal_quotes_the_users_line_without_its_comment(dynamo):
    f = torch.compile(early_out, backend=BACKEND, fullgraph=True)
    with tl.watch() as w:
        try:
            f(torch.randn(2, 4), torch.randn(4, 4))
        except Exception:
            pass  # fullgraph refuses the branch: the call raises, as the row says
    check_against_dynamo(w, dynamo)
    (refused,) = [c for r in w.table for c in r.causes if c.kind == "failed"]
    assert "(if not sel.any():)" in refused.words and "early-out" not in refused.words, refused.words


def test_gradual_unfreezing_is_told_one_graph_per_stage_is_fine(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    for p in model[0].parameters():
        p.requires_grad_(False)  # the backbone frozen for the first stage
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(4, 8)).sum().backward()
        for p in model[0].parameters():
            p.requires_grad_(True)  # the next stage unfreezes it
        f(torch.randn(4, 8)).sum().backward()
    check_against_dynamo(w, dynamo, also=("requires_grad",))
    unfrozen = [c for r in w.table for c in r.causes if c.kind == "requires_grad"]
    assert unfrozen and all("gradual unfreezing compiles one per stage, which is fine" in c.fix for c in unfrozen)


def test_an_error_of_its_own_while_putting_a_break_in_words_never_ends_the_users_block(dynamo, monkeypatch):
    from tpu_lab.compile.causes import break_words

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in tpu_lab")

    monkeypatch.setattr(break_words, "logger_words", broken)
    log = logging.getLogger("tpu_lab_tests.broken")
    log.addHandler(logging.NullHandler())
    log.propagate = False

    def step(x):
        log.warning("step")
        return x.sin()

    with tl.watch() as w:
        assert torch.compile(step, backend=BACKEND)(torch.randn(3)).shape == (3,)  # the user's code ran
    check_against_dynamo(w, dynamo)
    (broke,) = w.table.breaks
    assert broke.words.endswith("(not put in words: RuntimeError: a bug in tpu_lab)"), broke.words
