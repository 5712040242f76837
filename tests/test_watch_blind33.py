"""tl.watch() checked blind, thirty-third round: a stride change along a size-1 dimension (a slice of a
growing sequence) is no layout change, and its fix is a clone that resets strides; a number torch's C++
ops take as a Python float (scaled_dot_product_attention's dropout_p, on a call written over two lines) and
a number used as a dict key are never told to become tensors; Dynamo's ``___stack0`` in a break's words is
named by the call on the line; allow_rnn's fix says what it costs; a list item's own length is no last
batch; sympy's long size expressions are not quoted; items of one list changed read as values; a generator
passed in is said in words (a list traces); a size made after a break is never marked "before the first
call"; a bug in explaining a compile never ends the run. Each is checked against Dynamo's records, and each
printed fix that can be run is run."""

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def scores(p):  # speculative decoding: the target's probabilities, sliced from a sequence that grows
    return p.softmax(-1).argmax(-1)


def test_a_stride_on_a_size_one_dimension_is_no_layout_change_and_the_printed_clone_keeps_one_graph(dynamo):
    f = torch.compile(scores, backend=BACKEND)
    with tl.watch() as w:
        for n in (10, 20):
            f(torch.randn(1, n, 11)[:, :3])  # contiguous both times: only dim 0's stride (n * 11) differs
    check_against_dynamo(w, dynamo)
    (cause,) = [c for r in w.table for c in r.causes if c.kind == "stride"]
    assert cause.words.startswith("p's stride along its size-1 dimension 0 changed (110 -> 220): the same layout")
    assert "changed to contiguous" not in cause.words and ".contiguous()" not in cause.fix.split("(")[0]
    assert "p.clone(memory_format=torch.contiguous_format)" in cause.fix, cause.fix
    torch._dynamo.reset()
    with tl.watch() as fixed:
        for n in (10, 20, 30):
            f(torch.randn(1, n, 11)[:, :3].clone(memory_format=torch.contiguous_format))  # the fix as printed
    assert fixed.table.total_compiles == 1, fixed.table.to_text()


class Attention(torch.nn.Module):  # nanoGPT's CausalSelfAttention: dropout_p from a float attribute
    def __init__(self, dropout=0.1):
        super().__init__()
        self.qkv, self.dropout = torch.nn.Linear(8, 24), dropout

    def forward(self, x):
        q, k, v = self.qkv(x).split(8, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)


def test_a_float_a_cpp_op_takes_on_a_call_written_over_two_lines_is_never_told_to_become_a_tensor(dynamo):
    model = Attention()
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        for p in (0.1, 0.2, 0.3):  # a dropout schedule
            model.dropout = p
            f(torch.randn(2, 4, 8))
    check_against_dynamo(w, dynamo)
    held = [c for r in w.table for c in r.causes if "F.scaled_dot_product_attention needs it" in c.words]
    assert held, [c.words for r in w.table for c in r.causes]
    assert all("a tensor in its place would not do: F.scaled_dot_product_attention takes" in c.fix for c in held)
    assert all("dropout_p=self.dropout if self.training else 0.0, is_causal=True)" in c.words for c in held)


_MASKS = {}  # fairseq's buffered_future_mask: a causal mask cached per length


def masked(x, T):
    if T not in _MASKS:
        _MASKS[T] = torch.triu(torch.full((T, T), float("-inf")), 1)
    return (x[:, :T, :T] + _MASKS[T]).softmax(-1)


_LONGEST = torch.triu(torch.full((12, 12), float("-inf")), 1)


def masked_fixed(x, T):  # the fix as printed: one entry at the largest T, sliced to T inside
    return (x[:, :T, :T] + _LONGEST[:T, :T]).softmax(-1)


def test_a_number_used_as_a_dict_key_is_told_so_and_the_printed_fix_shares_one_graph(dynamo):
    _MASKS.clear()
    f = torch.compile(masked, backend=BACKEND)
    with tl.watch() as w:
        for T in (4, 6, 8, 10):
            f(torch.randn(2, 12, 12), T)
    check_against_dynamo(w, dynamo, also=("_MASKS", "T == "))
    keyed = [c for r in w.table for c in r.causes if "it is a key of the dict _MASKS" in c.words]
    assert keyed and all("slice it to T inside (mask[:T, :T])" in c.fix for c in keyed), keyed
    assert not any("math.exp" in c.fix or "torch.exp" in c.fix for r in w.table for c in r.causes)
    torch._dynamo.reset()
    g = torch.compile(masked_fixed, backend=BACKEND)
    with tl.watch() as fixed:
        for T in (4, 6, 8, 10):
            g(torch.randn(2, 12, 12), T)
    assert fixed.table.total_compiles == 2 < w.table.total_compiles, fixed.table.to_text()  # then T is dynamic


class Stats(torch.nn.Module):
    @torch.compiler.disable
    def forward(self, h):  # debug statistics kept out of the graph
        return h


class Encoder(torch.nn.Module):  # fairseq/torchaudio style: ragged sequences padded inside, a GRU over them
    def __init__(self):
        super().__init__()
        self.emb, self.rnn, self.stats = torch.nn.Embedding(30, 8), torch.nn.GRU(8, 8, batch_first=True), Stats()

    def forward(self, *, seqs):
        x = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True)
        h, _ = self.rnn(self.stats(self.emb(x)))
        return h.mean(1)


def test_a_carried_callable_is_named_by_its_line_allow_rnn_says_its_cost_and_a_list_items_length_is_no_batch(dynamo):
    torch.manual_seed(0)
    f = torch.compile(Encoder(), backend=BACKEND)
    with tl.watch() as w:
        for lengths in ([5, 3], [4, 4], [6, 2]):
            f(seqs=[torch.randint(1, 30, (n,)) for n in lengths])
    resumed = any("after the graph break" in r.function for r in w.table)  # torch 2.13 gives up on the frame
    check_against_dynamo(w, dynamo, also=("seqs[",) if resumed else ())
    rnn = [b for b in w.table.breaks if "RNN, GRU, or LSTM" in b.words]
    assert rnn and all("___stack" not in b.words for b in rnn), rnn
    assert all(
        "allow_rnn=True" in b.fix and "each new sequence length compiles a graph of its own" in b.fix for b in rnn
    )
    if not resumed:
        return
    assert all("when calling `self.rnn`" in b.words for b in rnn), rnn
    items = [c for r in w.table for c in r.causes if c.kind == "size" and "seqs[" in c.words]
    assert items and all("each item of seqs has its own length" in c.fix for c in items), [c.fix for c in items]
    assert not any("drop_last" in c.fix or "last, smaller batch" in c.fix for r in w.table for c in r.causes)


def windows(x, ws=4):  # torchvision's shifted_window_attention: pad to a multiple of the window, then fold
    _, H, W, C = x.shape
    x = F.pad(x, (0, 0, 0, (ws - W % ws) % ws, 0, (ws - H % ws) % ws))
    pH, pW = x.shape[1], x.shape[2]
    x = x.view(1, pH // ws, ws, pW // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
    x = x.softmax(1).reshape(1, pH // ws, pW // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(1, pH, pW, C)
    return x[:, :H, :W, :].contiguous()


def test_sympys_long_size_expressions_are_named_by_their_sizes_not_quoted(dynamo):
    f = torch.compile(windows, backend=BACKEND)
    with tl.watch() as w:
        for n in (7, 8, 9, 3):
            f(torch.randn(1, n, n, 8))
    check_against_dynamo(w, dynamo, also=("x.size()", "size mismatch"))
    words = [c.words for r in w.table for c in r.causes]
    assert all(len(part) < 400 for text in words for part in text.split("; ")), words
    assert not any("torch.sym_max" in t or "% 4)) % 4)) //" in t for t in words), words
    assert all("drop_last" not in c.fix for r in w.table for c in r.causes)


def pick(x, rows):  # a brute-force matcher's cost of one assignment (DETR's matcher, scipy-free)
    return sum(x[r, j] for j, r in enumerate(rows))


def test_items_of_one_list_that_changed_at_once_read_as_their_earlier_values(dynamo):
    f = torch.compile(pick, backend=BACKEND)
    with tl.watch() as w:
        for rows in ([0, 5], [1, 0]):
            f(torch.randn(6, 2), rows)
    check_against_dynamo(w, dynamo, also=("rows[",))
    (cause,) = [c for r in w.table for c in r.causes if "items of rows changed" in c.words]
    assert cause.words.startswith("2 items of rows changed (rows[0] was 0, rows[1] was 5): each is"), cause.words


def test_a_bug_in_explaining_a_compile_never_ends_the_users_run_and_the_compile_is_counted(monkeypatch):
    import tpu_lab.compile.watching.fold as fold
    from tpu_lab.testing.dynamo_account import DynamoAccount
    from tpu_lab.testing.watch_invariants import violations

    def broken(*args, **kwargs):
        raise ValueError("min() arg is an empty sequence")

    monkeypatch.setattr(fold, "capture_causes", broken)
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 2, backend=BACKEND)
    with DynamoAccount() as account, tl.watch() as w:
        f(torch.ones(2))
        f(torch.ones(2, 3))  # a recompile: its fold raises
    assert f(torch.ones(2)).tolist() == [2.0, 2.0]  # the user's code went on
    assert w.table.total_compiles == 2 == len(account.compiled()), w.table.to_text()
    internal = [c.words for r in w.table for c in r.causes if c.kind == "internal"]
    assert internal and internal[0].startswith("tpu_lab could not explain this compile (ValueError: min() arg"), (
        internal
    )
    assert internal[0] in w.table.to_text()
    assert internal[0] in violations(w.table, account)["c_guards"]  # a test or corpus run fails on it


def has_overflow(params):  # DeepSpeed's loss scaler: any gradient not finite
    for p in params:  # noqa: SIM110 (the loop, as DeepSpeed writes it, is what Dynamo walks)
        if p.grad is not None and not torch.isfinite(p.grad).all():
            return True
    return False


def test_a_generator_passed_in_is_said_in_words_and_the_printed_list_compiles(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
    model(torch.randn(2, 4)).sum().backward()
    with tl.watch() as w:
        torch.compile(has_overflow, backend=BACKEND)(model.parameters())
    check_against_dynamo(w, dynamo)
    (said,) = w.table.breaks
    assert "SourcelessBuilder" not in said.words  # torch 2.13 words it as iterating over a generator
    assert said.fix.startswith("pass a list in place of a generator (list(model.parameters()))"), said.fix
    torch._dynamo.reset()
    with tl.watch() as fixed:
        torch.compile(has_overflow, backend=BACKEND)(list(model.parameters()))  # the fix as printed
    (own,) = [r for r in fixed.table if r.function.startswith("has_overflow (")]  # the function itself compiles
    assert own.compiles == 1 and not own.failed, fixed.table.to_text()


def criterion(cost):  # DETR's matcher on the host, then the loss on the matched pairs
    row = cost.detach().numpy().argmin(0)
    print("matched")  # logging between the two: a graph break
    return cost[torch.as_tensor(row), torch.arange(cost.shape[1])].sum()


def test_a_size_one_made_after_a_break_is_never_told_to_be_marked_before_the_first_call(dynamo):
    f = torch.compile(criterion, backend=BACKEND)
    with tl.watch() as w:
        for n in (2, 3, 1):
            f(torch.randn(6, n))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    resumed = [
        c for r in w.table if "after the graph break" in r.function for c in r.causes if "mark_unbacked" in c.fix
    ]
    assert resumed, [(r.function, c.fix) for r in w.table for c in r.causes]
    for c in resumed:
        assert "mark_unbacked(row" not in c.fix and "removing the graph break at line" in c.fix, c.fix
