"""tl.watch() checked blind, tenth round (second part): a fake-quant observer whose Python-float range
Dynamo made dynamic while the scale and zero point computed from it stay baked in; a tiny transformers
Llama called directly and then through generate(); a KV cache kept as Python lists; a detection head whose
last image has a single proposal. The words a blind reviewer found wrong are asserted right here, each run
also checked against Dynamo's records."""

import pytest
import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def causes(w):
    return [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")]


class FakeQuantize(torch.nn.Module):
    """A hand-written MinMax observer: min/max kept as Python floats on the module."""

    def __init__(self):
        super().__init__()
        self.min_val, self.max_val = float("inf"), float("-inf")

    def forward(self, x):
        scale = max(self.max_val - self.min_val, 1e-8) / 255.0
        zero_point = 0 - round(self.min_val / scale)
        return torch.fake_quantize_per_tensor_affine(x, scale, int(zero_point), 0, 255)


class QLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.act_fq = FakeQuantize()

    def forward(self, x):
        return self.act_fq(self.fc(x))


def test_a_number_made_dynamic_whose_derived_values_stay_baked_in_is_not_told_later_values_reuse_the_graph(dynamo):
    torch.manual_seed(0)
    model = QLinear()
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w, torch.no_grad(), torch._dynamo.config.patch(recompile_limit=4):
        for step in range(6):  # calibration: the observer's range widens between batches
            x = torch.randn(4, 8) * (1 + step)
            y = model.fc(x)
            model.act_fq.min_val = min(model.act_fq.min_val, y.min().item())
            model.act_fq.max_val = max(model.act_fq.max_val, y.max().item())
            f(x)
    # min_val changed with max_val; the scale (a float) with the zero point (an int): one cause each
    check_against_dynamo(w, dynamo, also=["act_fq'].min_val == ", "/ 255.0)) == "])
    text = w.table.to_text()
    found = causes(w)
    assert found and all("later values reuse this graph" not in c.words + c.fix for c in found)
    # the first recompile: Dynamo made min/max dynamic, but what is computed from them is baked in
    (first, *_) = [c for c in found if "self.act_fq.max_val changed" in c.words]
    assert "Dynamo made self.act_fq.max_val dynamic, but" in first.words
    assert "still compiles a graph of its own" in first.words
    # the later ones: the user's values and line, never Dynamo's symbolic expression
    derived = [c for c in found if c.kind == "derived"]
    assert derived
    for c in derived:
        assert "sym_max" not in c.words and "((-1)*" not in c.words and "sym_max" not in c.fix
        assert "computed from self.act_fq.max_val, self.act_fq.min_val" in c.words
        assert "test_watch_blind10b.py:31" in c.words and "fake_quantize_per_tensor_affine" in c.words
        assert "torch.tensor(" in c.fix
    assert "sym_max" not in text.split("causes and fixes:")[0].split("[")[0]
    # at the limit: the function kept recompiling on those values, so no "usually none"
    (limit,) = [c for r in w.table for c in r.causes if c.kind == "limit"]
    assert "usually none" not in limit.fix and "sym_max" not in limit.words


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    return transformers.LlamaForCausalLM(config).eval()


def test_a_direct_call_then_generate_is_the_calling_convention_not_a_size_and_keywords_are_shown_once(dynamo):
    model = _tiny_llama()
    compiled = torch.compile(model, backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for n in (5, 9):  # the second makes the prompt length dynamic
            ids = torch.randint(3, 64, (1, n))
            compiled(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        model.forward = torch.compile(model.forward, backend=BACKEND)
        prompt = torch.randint(3, 64, (1, 6))
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=1, do_sample=False)
    # the mask grew with the ids; use_cache changed with the keywords
    check_against_dynamo(w, dynamo, also=["kwargs['attention_mask']' size", "kwargs['use_cache'] == False"])
    rows = list(w.table)
    generate = rows[2]
    kinds = [c.kind for c in generate.causes]
    assert "kwargs" in kinds and "size" not in kinds
    assert all("prompt length" not in c.words for c in generate.causes)
    (kwargs,) = [c for c in generate.causes if c.kind == "kwargs"]
    assert "batch_size divides" not in kwargs.fix and "call the model the same way" in kwargs.fix
    for r in rows:  # a keyword through **kwargs is shown once, by its keyword
        assert "kwargs[" not in r.signature and r.signature.count("use_cache") == 1, r.signature
        assert r.signature.endswith("grad mode: off")


class ListCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(40, 16)
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, token, k_cache, v_cache):
        q, k, v = self.qkv(self.emb(token)).chunk(3, dim=-1)
        k_cache.append(k)
        v_cache.append(v)
        return F.scaled_dot_product_attention(q, torch.cat(k_cache, 1), torch.cat(v_cache, 1))


def test_a_capped_signature_says_how_many_inputs_more_and_keeps_grad_mode(dynamo):
    f = torch.compile(ListCache().eval(), backend=BACKEND)
    k_cache, v_cache = [], []
    with tl.watch() as w, torch.no_grad():
        for _ in range(7):  # the lists hold 0..6 tensors when passed
            f(torch.tensor([[1]]), k_cache, v_cache)
    check_against_dynamo(w, dynamo, also=["v_cache"])  # both lists grow
    rows = list(w.table)
    assert all(r.signature.endswith("grad mode: off") for r in rows)
    last = rows[-1].signature  # self, token, 6 + 6 items: 14 inputs, 12 shown
    assert "v_cache[3]: f32[1, 1, 16], ... and 2 more (v_cache[4], v_cache[5]), grad mode: off" in last
    assert all("more" not in r.signature for r in rows[:-1])


class BoxHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, box_features, proposals):
        x = self.fc(box_features.flatten(1))
        widths = proposals[:, 2] - proposals[:, 0]
        return x * widths[:, None]


def test_a_size_below_the_dynamic_graphs_range_is_dynamos_0_1_specialisation_not_a_size_change(dynamo):
    f = torch.compile(BoxHead().eval(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for n in (7, 12, 1):  # the last image has a single proposal
            f(torch.randn(n, 4, 2, 2), torch.rand(n, 4) * 50)
    check_against_dynamo(w, dynamo, also=["'box_features' size mismatch at index 0. expected 7, actual 12"])
    one = list(w.table)[-1]
    (cause,) = [c for c in one.causes if c.kind not in ("first", "dynamic")]
    assert cause.kind == "size_one" and "7 -> 1" not in cause.words
    assert "box_features dimension 0 is now 1" in cause.words
    assert "the graph held is dynamic there, for sizes 2 and up" in cause.words
    assert "Dynamo compiles sizes 0 and 1 as graphs of their own" in cause.words
    assert "DataLoader" not in cause.fix and "mark_unbacked(box_features, 0)" in cause.fix
