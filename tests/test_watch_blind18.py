"""tl.watch() checked blind, eighteenth round: a size fix offered where an int from 1 forced the compile
anyway (Llama's repeat_kv, whose mark_dynamic then raised), a loop over ``.tolist()`` told its break only
moves (capture_scalar_outputs removes it: the loop's length is the tensor's size), and two flags told
against the graph that differs in one of them. Checked against Dynamo's own records too."""

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def repeat_kv(hidden_states, n_rep):  # Llama's grouped-query attention: kv heads repeated n_rep times
    batch, heads, length, dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    expanded = hidden_states[:, :, None].expand(batch, heads, n_rep, length, dim)
    return expanded.reshape(batch, heads * n_rep, length, dim)


def attention(q, k, v, n_rep):
    return F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep))


def test_a_size_changed_with_an_int_from_1_is_told_nothing_could_skip_this_compile(dynamo):
    f = torch.compile(attention, backend=BACKEND)
    with tl.watch() as w:
        for kv_heads in (8, 4, 2):
            q, kv = torch.randn(1, 8, 3, 4), torch.randn(1, kv_heads, 3, 4)
            f(q, kv, kv, 8 // kv_heads)
    check_against_dynamo(w, dynamo, also=("n_rep == 1", "size mismatch"))
    second = [c for c in w.table.rows[1].causes if c.kind not in ("first", "dynamic")]
    assert second[0].words.startswith("Python int n_rep changed (was 1)") and second[0].count == 1
    sizes = [c for c in second if c.kind == "size"]
    assert sizes and all(c.count == 0 and "mark_dynamic" not in c.fix for c in sizes), [c.fix for c in sizes]
    assert all("needs a graph of its own anyway: a new value of n_rep, was 1" in c.fix for c in sizes), [
        c.fix for c in sizes
    ]


class BucketEncoder(torch.nn.Module):  # fairseq/ESPnet: sequences sorted by length, each its own slice
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, mask):
        sorted_len, order = torch.sort(mask.sum(1), descending=True)
        x, out = x[order], []
        for length in sorted_len.tolist():
            out.append(self.lin(x[len(out), :length]).mean(0))
        return torch.stack(out)


def test_a_loop_over_tolist_whose_body_never_branches_keeps_dynamos_capture_hint(dynamo):
    f = torch.compile(BucketEncoder(), backend=BACKEND)
    with tl.watch() as w:
        for step in range(2):
            mask = torch.zeros(3, 6, dtype=torch.long)
            for i, n in enumerate((6, 3 + step, 2)):
                mask[i, :n] = 1
            f(torch.randn(3, 6, 4), mask)
    check_against_dynamo(w, dynamo)
    (brk,) = w.table.breaks
    assert "capture_scalar_outputs = True" in brk.fix and "decides Python control flow" not in brk.fix
    named = [c for r in w.table for c in r.causes if "tolist()" in c.words]
    assert named and named[0].words.startswith("Python int sorted_len.tolist()[1] changed (was 3)")
    assert "sorted_len.tolist()[1] == 3" in [c.shown_guard for r in w.table for c in r.causes]
    assert "carried" not in str(w.table)


class Block(torch.nn.Module):  # DINO's attention maps: need_weights, then per-head weights, for visualisation
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, need_weights=False, per_head=False):
        return self.attn(x, x, x, need_weights=need_weights, average_attn_weights=not per_head)


def test_a_second_flag_is_told_against_the_graph_that_differs_in_it_alone(dynamo):
    f = torch.compile(Block(), backend=BACKEND)
    x = torch.randn(1, 3, 8)
    with tl.watch() as w:
        f(x)
        f(x, need_weights=True)  # a visualisation step, then back to training
        f(x)  # Dynamo now checks the graph without weights first
        f(x, need_weights=True, per_head=True)
    check_against_dynamo(w, dynamo, also=("need_weights", "per_head"))
    assert [r.signature.removeprefix("self: Block (train), ") for r in w.table.rows] == [
        "x: f32[1, 3, 8], need_weights: False, per_head: False",
        "x: f32[1, 3, 8], need_weights: True, per_head: False",
        "x: f32[1, 3, 8], need_weights: True, per_head: True",
    ]
    assert w.table.rows[2].causes[0].words == "the flag per_head was False (each value is its own graph)"


class CTCHead(torch.nn.Module):  # ESPnet/torchaudio: CTC loss on lengths passed as Python lists
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 5)

    def forward(self, feats, targets, input_lengths, target_lengths):
        log_probs = self.proj(feats).log_softmax(-1).transpose(0, 1)
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, zero_infinity=True)


def test_an_operator_dynamo_cannot_capture_is_told_to_move_out_not_capture_dynamic_output_shape_ops(dynamo):
    f = torch.compile(CTCHead(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 10, 8), torch.randint(1, 5, (7,)), [10, 9], [4, 3])
    check_against_dynamo(w, dynamo)
    (brk,) = w.table.breaks
    assert brk.fix.startswith("call ctc_loss outside the compiled function") and "= True" not in brk.fix


def test_contract_fake_tensor_rules_for_data_dependent_shapes_are_readable():
    """The one private read behind that fix (``sources/dynamo_catalog.shape_op_captured``): torch's fake-tensor
    rules. If this fails, torch moved ``torch._subclasses.fake_impls.op_implementations_dict``."""
    from tpu_lab.compile.sources.dynamo_catalog import shape_op_captured

    assert shape_op_captured("aten.nonzero.default") is True, torch.__version__
    assert shape_op_captured("aten._unique2.default") is True, torch.__version__
    assert shape_op_captured("aten._ctc_loss.default") is False, torch.__version__
    assert shape_op_captured("aten.no_such_op.default") is None


class MLMHead(torch.nn.Module):  # HF's masked-LM loss on the active tokens only (boolean indexing: a break)
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)

    def forward(self, hidden, labels):
        active = labels.view(-1) != -100
        active_logits = self.lin(hidden).view(-1, 6)[active]
        return F.cross_entropy(active_logits, labels.view(-1)[active])


def test_a_value_carried_over_a_break_on_an_indexing_line_is_named_as_assigned(dynamo):
    f = torch.compile(MLMHead(), backend=BACKEND)
    with tl.watch() as w:
        labels = torch.full((2, 5), -100)
        labels[:, :2] = 1
        f(torch.randn(2, 5, 4), labels)
    check_against_dynamo(w, dynamo)
    resumed = [r for r in w.table if "after the graph break" in r.function]
    assert any(r.signature.startswith("active_logits: f32[4, 6]") for r in resumed), [r.signature for r in resumed]
    assert "carried" not in str(w.table)


def selective_scan(u, delta, A, B, C):  # Mamba's selective_scan_ref: a Python loop over the sequence length
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    delta_b_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    x, ys = u.new_zeros(u.shape[0], A.shape[0], A.shape[1]), []
    for i in range(u.shape[2]):
        x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, i]))
    return torch.stack(ys, dim=2)


def test_a_size_several_inputs_share_and_the_code_fixes_is_said_shared(dynamo):
    f = torch.compile(selective_scan, backend=BACKEND)
    with tl.watch() as w:
        A = -torch.rand(2, 3)
        for length in (3, 4, 5, 6):
            f(
                torch.randn(1, 2, length),
                torch.rand(1, 2, length),
                A,
                torch.randn(1, 3, length),
                torch.randn(1, 3, length),
            )
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    # the inputs share the size, and the line that fixes it reads it from u: said by that line, on every pin
    pinned = [c for r in w.table for c in r.causes if c.kind == "size"]
    loop = selective_scan.__code__.co_firstlineno + 4
    assert pinned and all(f"line {loop} (for i in range(u.shape[2]):) takes u.shape[2]" in c.words for c in pinned)
