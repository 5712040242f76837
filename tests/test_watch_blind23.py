"""tl.watch() checked blind, twenty-third round: a value carried over a break inside its line is named by the
call that broke (``item_ids.tolist()``), and its items changing at once are one cause; a graph with no
operation in it (a graph break before any work: dynamic int8 quantization) says the work runs eagerly.
Checked against Dynamo's records."""

import math

import numpy as np
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"

ITEM_FREQ = {i: (i % 7 + 1) / 100 for i in range(50)}


def in_batch_loss(emb, item_ids):  # two-tower logQ correction: item frequencies from a Python dict
    v = emb(item_ids)
    logq = torch.tensor([math.log(ITEM_FREQ[i]) for i in item_ids.tolist()])
    return (v.sum(-1) - logq).sum()


def test_items_read_back_with_tolist_are_named_as_such_and_their_change_said_once(dynamo):
    f, emb = torch.compile(in_batch_loss, backend=BACKEND), torch.nn.Embedding(50, 4)
    with tl.watch() as w:
        for ids in ([1, 2, 3, 9], [4, 5, 6, 9]):
            f(emb, torch.tensor(ids))
    check_against_dynamo(w, dynamo, also=("___stack2[",))  # Dynamo logs the first of the three items only
    text = str(w.table)
    assert "logq[" not in text, text  # the line assigns logq, but the value carried is item_ids.tolist()
    (cause,) = w.table.rows[-1].causes
    assert cause.words.startswith("3 items of item_ids.tolist() changed (item_ids.tolist()[0] was 1,"), cause.words
    assert "index a lookup tensor" in cause.fix and "item_ids.tolist()[1] == 2" in cause.shown_guard


def test_an_empty_graph_says_the_work_runs_eagerly(dynamo):
    fp32 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).eval()
    quantized = torch.ao.quantization.quantize_dynamic(fp32, {torch.nn.Linear}, dtype=torch.qint8)
    f = torch.compile(quantized, backend=BACKEND)
    with tl.watch() as w, torch.inference_mode():
        for batch in (4, 4, 7):
            f(torch.randn(batch, 8))
    check_against_dynamo(w, dynamo)
    rows = [r for r in w.table.rows if r.compiles]
    assert rows and all(any(c.kind == "empty" for c in r.causes) for r in rows)
    assert "the graph holds no operation" in str(w.table) and "runs eagerly on every call" in rows[0].cause


def test_a_break_logged_inside_a_call_then_cut_at_the_callers_loop_keeps_its_reason(dynamo):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)  # fine-tuning recipe: compile GPT-2, add tokens, resize the embeddings
    model = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=1, n_head=2))
    model.forward = torch.compile(model.forward, backend=BACKEND)
    ids = torch.randint(0, 100, (2, 8))
    with tl.watch() as w:
        model(input_ids=ids, labels=ids)
        model.resize_token_embeddings(104)
        model(input_ids=ids, labels=ids)
    check_against_dynamo(w, dynamo, also=("vocab_size == 100",))  # the loss's own guard, failed beside logits'
    cut = [b for b in w.table.breaks if "where Dynamo cannot resume" in b.words]
    assert cut and "stopped tracing at this instruction" not in str(w.table)
    logger, method = (
        "logger 'transformers.modeling_utils'",
        "logging.getLogger('transformers.modeling_utils').warning_once",
    )
    assert all(f"a logging call ({logger}, .warning_once)" in b.words and method in b.fix for b in cut), cut


def test_a_numpy_input_shows_its_dtype_and_shape_and_its_guard_reads_its_name(dynamo):
    policy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

    def act(obs):  # a policy fed gym observations as NumPy arrays
        return policy(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1)

    f, rng = torch.compile(act, backend=BACKEND), np.random.default_rng(0)
    with tl.watch() as w:
        f(rng.standard_normal(4))
        f(rng.standard_normal((3, 4)).astype(np.float32))
    check_against_dynamo(w, dynamo, also=("rank mismatch",))  # Dynamo logs the dtype only, the first it checks
    assert [r.signature for r in w.table.rows] == ["obs: ndarray f64[4]", "obs: ndarray f32[3, 4]"]
    assert "___from_numpy" not in str(w.table)


class AutoCorrelation(torch.nn.Module):  # Autoformer's time-delay aggregation: top-k delays as Python ints
    def forward(self, values, corr):
        top_k = int(math.log(values.shape[3]))
        mean_value = corr.mean(1).mean(1)
        index = torch.topk(mean_value.mean(0), top_k, dim=-1)[1]
        weights = torch.stack([mean_value[:, index[i]] for i in range(top_k)], dim=-1).softmax(-1)
        out = torch.zeros_like(values)
        for i in range(top_k):
            out = out + torch.roll(values, -int(index[i]), -1) * weights[:, i].view(-1, 1, 1, 1)
        return out


def test_a_tensor_element_used_as_an_int_is_said_in_words_and_told_to_index_with_the_tensor(dynamo):
    f = torch.compile(AutoCorrelation(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 2, 4, 24), torch.randn(2, 2, 4, 24))
    check_against_dynamo(w, dynamo)
    assert "aten._local_scalar_dense.default` has a non-Tensor output" not in str(w.table)
    assert w.table.breaks and all("capture_scalar_outputs = True" not in b.fix for b in w.table.breaks)
    assert all("index with the tensor itself (x[:, idx], torch.gather" in b.fix for b in w.table.breaks)
