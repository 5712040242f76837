"""tl.watch() checked blind, nineteenth round: an int Dynamo made dynamic whose computed values several ints
satisfy is not "baked" (Swin's window_partition), a recompile is told against the graph that took a number
or size dynamic (a branch flip, not a size change against the first static graph), many conditions one
line sets are one cause, the recompile limit met by one graph per value gets a fix, a packed RNN's break
gets the packing's fix (allow_rnn only moves it), and a branch that only raises is told to assert.
Checked against Dynamo's own records too."""

import collections

import torch
from _dynamo_oracle import check_against_dynamo
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import tpu_lab as tl

BACKEND = "eager"


def window_partition(x, window_size: int, stride: int):  # Swin / timm: windows by size arithmetic
    B, H, W, C = x.shape
    x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
    windows = x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window_size, window_size, C)
    return windows[:, ::stride].sum()


def test_an_int_several_values_of_satisfy_is_reused_and_a_crossed_view_is_one_cause(dynamo):
    f = torch.compile(window_partition, backend=BACKEND)
    with tl.watch() as w:
        for h, ws, st in [(8, 4, 1), (8, 4, 2), (8, 2, 1), (16, 4, 1), (8, 8, 1)]:
            f(torch.randn(1, h, h, 3), ws, st)
    check_against_dynamo(w, dynamo, also=("size mismatch", "window_size"))
    rows = {r.signature.split("window_size: ")[1]: r for r in w.table.rows}
    stride = rows["int 4, stride: int 2"].cause
    line = window_partition.__code__.co_firstlineno  # the def; its view is 2 lines on, its slice 4
    # stride != 1 and stride >= 1 (and on torch 2.13 (3 + stride) // stride != 0, which every stride from 1 meets):
    # together, stride >= 2
    assert "later values reuse this graph while stride >= 2 holds" in stride, stride
    assert f"(from your line {line + 4}" in stride and "stride != 1" not in stride, stride
    made = rows["int 2, stride: int 1"].cause
    assert "Dynamo made window_size dynamic, so later values reuse this graph while " in made
    assert "baked" not in made and f"more conditions on window_size pass (from your line {line + 2}" in made
    (crossed,) = rows["int 8, stride: int 1"].causes
    assert crossed.kind == "number_branch" and crossed.words.startswith("window_size crossed ")
    assert "conditions the graph assumed (" in crossed.words and "was 4" not in crossed.words
    assert "branch on a tensor" not in crossed.fix and "keep the value on one side" in crossed.fix


def pad_to_length(t, length):  # TRL's DPO: chosen and rejected padded to the longer of the two
    if t.size(-1) >= length:
        return t
    return torch.cat([t, torch.zeros(*t.shape[:-1], length - t.size(-1))], dim=-1)


def concatenated(chosen, rejected):
    longest = max(chosen.shape[1], rejected.shape[1])
    return torch.cat([pad_to_length(chosen, longest), pad_to_length(rejected, longest)]).sum(0)


def test_a_branch_flip_is_told_against_the_dynamic_graph_not_as_a_size_change_against_the_first(dynamo):
    f = torch.compile(concatenated, backend=BACKEND)
    with tl.watch() as w:
        for lc, lr in [(12, 9), (15, 20), (8, 8), (30, 11)]:
            f(torch.randn(2, lc), torch.randn(2, lr))
    check_against_dynamo(w, dynamo, also=("size mismatch", "max("))
    last = [c for c in w.table.rows[-1].causes if c.kind != "dynamic"]
    assert [c.kind for c in last] == ["specialised"], [c.words for c in last]
    assert "dimension 1 changed 12 -> 30" not in last[0].words
    assert "(if t.size(-1) >= length:)" in last[0].words


class MultiTask(torch.nn.Module):  # a multitask head per task name
    def __init__(self, tasks):
        super().__init__()
        self.encoder = torch.nn.Linear(4, 4)
        self.heads = torch.nn.ModuleDict({t: torch.nn.Linear(4, 2) for t in tasks})

    def forward(self, x, task: str):
        return self.heads[task](self.encoder(x))


def test_one_graph_per_value_past_the_limit_is_told_to_raise_it_or_compile_the_shared_part(dynamo):
    tasks = ["sst2", "mnli", "qqp", "rte"]
    f = torch.compile(MultiTask(tasks), backend=BACKEND)
    with torch._dynamo.config.patch(recompile_limit=2), tl.watch() as w:
        for task in tasks:
            f(torch.randn(2, 4), task)
    check_against_dynamo(w, dynamo)
    (limit,) = [c for r in w.table for c in r.causes if c.kind == "limit"]
    assert "raise the limit (where it is set, named here) to at least the number of values you use" in limit.fix
    assert "compile only the part every value shares" in limit.fix and "expected once" not in limit.fix


class Encoder(torch.nn.Module):  # the classic NLP tutorial: pack, LSTM, unpack
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 4, batch_first=True)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True)
        return out.sum(1) + h[-1] + c[-1]


def test_a_packed_rnns_break_is_told_to_keep_the_packing_outside_not_allow_rnn(dynamo):
    f = torch.compile(Encoder(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(3, 5, 4), torch.tensor([5, 3, 2]))
    check_against_dynamo(w, dynamo)
    (rnn,) = [b for b in w.table.breaks if "LSTM" in b.words]
    assert not rnn.fix.startswith("Set torch._dynamo.config.allow_rnn") and "even with allow_rnn=True" in rnn.fix
    assert "keep pack_padded_sequence, the RNN and pad_packed_sequence together outside" in rnn.fix
    assert "Set torch._dynamo.config.allow_rnn" not in str(w.table)  # nor where a torch gives the frame up


model = torch.nn.Linear(4, 1)


def checked_step(x, y):  # fairseq-style NaN guard in a compiled step
    loss = torch.nn.functional.mse_loss(model(x), y)
    if torch.isnan(loss):
        raise FloatingPointError("loss is NaN")
    return loss * 2


def test_a_branch_that_only_raises_is_told_to_assert_not_to_use_torch_cond(dynamo):
    f = torch.compile(checked_step, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 4), torch.randn(2, 1))
    check_against_dynamo(w, dynamo)
    (brk,) = w.table.breaks
    assert "torch.cond" not in brk.fix and "torch._assert_async(~torch.isnan(loss))" in brk.fix


Packed = collections.namedtuple("Packed", "data lengths")


def unpadded(x):  # a helper Dynamo cannot trace, returning a namedtuple and a pair (as an RNN does)
    torch._dynamo.graph_break()
    return Packed(x * 2, x.sum(-1)), (x.mean(0), x.amax(0))


def encode(x):
    out, (h, c) = unpadded(x)
    return out.data.sum(0) + h + c + out.lengths.sum()


def test_values_carried_over_a_break_are_named_by_nested_unpacking_and_namedtuple_fields(dynamo):
    f = torch.compile(encode, backend=BACKEND)
    with tl.watch() as w:
        for n in (3, 5):
            f(torch.randn(n, 4))
    check_against_dynamo(w, dynamo, also=("size mismatch",))  # Dynamo logs one of the two sizes
    first, row = [r for r in w.table if r.function.startswith("encode after the graph break")]  # a row per size
    assert first.signature == "out: Packed len=2 (f32[3, 4], ...), (h, c): tuple len=2 (f32[4], ...)"
    assert row.signature == "out: Packed len=2 (f32[5, 4], ...), (h, c): tuple len=2 (f32[4], ...)"
    assert "out.data, out.lengths dimension 0 changed 3 -> 5" in row.cause
    assert "Dynamo made out.data dim 0, out.lengths dim 0 dynamic" in row.cause
    assert "out.data" in row.shown_guard and "carried" not in str(w.table) and "stack0" not in str(w.table)


def test_an_encoder_decoders_generate_shows_its_cache_and_encoder_output_so_each_step_is_a_row(dynamo):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    model = T5ForConditionalGeneration(config).eval()
    model.forward = torch.compile(model.forward, backend=BACKEND)
    with tl.watch() as w:
        model.generate(input_ids=torch.randint(2, 64, (1, 6)), max_new_tokens=4, do_sample=False, eos_token_id=None)
    check_against_dynamo(w, dynamo, also=("is_updated", "is_initialized", "size mismatch"))
    assert len(w.table.rows) == w.table.total_compiles == 3  # prefill, the first decode step, the cache made dynamic
    for row, held in zip(w.table.rows, (0, 1, 2), strict=True):
        assert f"cache: EncoderDecoderCache len={held}" in row.signature
        assert (
            "encoder_outputs: BaseModelOutputWithPastAndCrossAttentions last_hidden_state=f32[1, 6, 16]"
            in row.signature
        )
    assert "an EncoderDecoderCache grows" in w.table.rows[2].cause and "Dynamo made the KV cache dim 2" in str(w.table)


def test_a_hook_added_to_a_submodule_after_its_compile_is_said_never_to_run(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    f = torch.compile(model, backend=BACKEND)
    seen = []
    with tl.watch() as w:
        f(torch.randn(2, 4))
        handle = model[1].register_forward_hook(lambda m, i, o: seen.append(o))  # feature capture, Captum-style
        f(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    assert not seen  # what the note says: Dynamo guards no hook of a submodule, so the graph never runs it
    (note,) = [c for r in w.table for c in r.causes if c.kind == "hooks"]
    assert note.words.startswith("a hook was added to self[1] after this graph was compiled: the graph never runs")
    assert "torch._dynamo.reset()" in note.fix and note.count == 0 and w.table.total_compiles == 1
    assert "hooks added after a compile (no recompile, no error" in str(w.table)
    handle.remove()
    assert not [c for r in w.table for c in r.causes if c.kind == "hooks"]  # as they were: nothing to say


net = torch.nn.Linear(4, 2)


def sample_loss(params, sample, target):
    out = torch.func.functional_call(net, params, (sample.unsqueeze(0),))
    return torch.nn.functional.cross_entropy(out, target.unsqueeze(0))


def per_sample_grads(params, data, targets):  # Opacus / torch.func's per-sample gradients
    return torch.func.vmap(torch.func.grad(sample_loss), in_dims=(None, 0, 0))(params, data, targets)


def test_a_size_vmap_fixes_is_told_as_vmaps_not_as_the_users_python_number(dynamo):
    f = torch.compile(per_sample_grads, backend=BACKEND)
    params = {k: v.detach() for k, v in net.named_parameters()}
    with tl.watch() as w:
        for batch in (4, 3, 5):
            f(params, torch.randn(batch, 4), torch.randint(0, 2, (batch,)))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sizes = [c for r in w.table for c in r.causes if c.kind == "size"]
    assert len(sizes) == 2 and all("torch.func.vmap, which this function calls" in c.words for c in sizes)
    assert not any("plain Python number" in c.words for c in sizes)
    assert all("mark_dynamic would raise here" in c.fix for c in sizes)
