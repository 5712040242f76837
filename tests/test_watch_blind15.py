"""tl.watch() checked blind, fifteenth round: a hand-written beam search step (fairseq-style) walks the
candidates with ``for t in token.tolist()`` and records finished beams with ``.item()``. Dynamo's hint,
capture_scalar_outputs, only moves the break to the branch on those values (the reviewer applied it: the
whole function then ran eagerly), so it must not be the fix. Checked against Dynamo's own records too."""

import functools
import re

import numpy as np
import torch
from _dynamo_oracle import check_against_dynamo, only_causes

import tpu_lab as tl

BACKEND = "eager"
EOS = 2


def beam_step(lprobs, beam_scores, num_beams, finished):
    vocab = lprobs.size(-1)
    scores = (lprobs + beam_scores.unsqueeze(-1)).view(-1)
    top_scores, top_idx = torch.topk(scores, 2 * num_beams)
    beam_idx, token = top_idx // vocab, top_idx % vocab
    keep = []
    for i, t in enumerate(token.tolist()):  # Python control flow on the tensor's values
        if t == EOS:
            finished.append((beam_idx[i].item(), top_scores[i].item()))
        elif len(keep) < num_beams:
            keep.append(i)
    keep = torch.tensor(keep)
    return top_scores[keep], beam_idx[keep], token[keep]


def test_a_value_that_drives_python_control_flow_is_not_told_to_use_capture_scalar_outputs(dynamo):
    step = torch.compile(beam_step, backend=BACKEND)
    torch.manual_seed(0)
    with tl.watch() as w:
        scores = torch.zeros(3)
        for _ in range(3):
            scores = step(torch.log_softmax(torch.randn(3, 8), -1), scores, 3, [])[0]
    check_against_dynamo(w, dynamo)
    loop = beam_step.__code__.co_firstlineno + 6
    texts = [(b.where, b.fix) for b in w.table.breaks]
    texts += [(r.function, c.fix) for r in w.table for c in r.causes if c.kind == "failed"]
    assert texts and any(where.endswith(f":{loop}") for where, _ in texts)  # the .tolist() loop's break
    for _, fix in texts:
        assert "capture_scalar_outputs = True" not in fix and "TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS" not in fix
        assert fix.startswith("the value decides Python control flow (a loop or branch)")


@functools.cache
def mel_filters(n_mels):  # whisper's audio.mel_filters: a cached filterbank loaded through NumPy
    f = np.random.RandomState(n_mels).rand(n_mels, 9).astype(np.float32)
    return torch.from_numpy(f)


def log_mel(magnitudes, n_mels=4):
    return (mel_filters(n_mels) @ magnitudes).clamp(min=1e-10).log10()


def test_a_numpy_array_read_as_a_tensor_is_named_by_its_own_name(dynamo):
    f = torch.compile(log_mel, backend=BACKEND)
    with tl.watch() as w:
        f(torch.rand(9, 3))
        f(torch.rand(9, 3), n_mels=6)  # large-v3's 128 mel bins after 80
    check_against_dynamo(w, dynamo)  # its invariants: no internal name (___from_numpy) in any cause or fix
    sized = [c for r in w.table for c in r.causes if "___from_numpy" in c.guard]
    assert sized and all(c.words.startswith("f ") for c in sized)


def _log_mel_once(dynamo):
    f = torch.compile(log_mel, backend=BACKEND)
    mel_filters.cache_clear()  # a cached filterbank would skip the breaks
    with tl.watch() as w:
        f(torch.rand(9, 3))
    check_against_dynamo(w, dynamo)
    return w


def test_a_class_dynamo_cannot_construct_is_named_as_the_line_writes_it_not_by_dynamos_polyfill(dynamo):
    # Dynamo's hint was "Avoid calling `type.__new__` in your code": its own polyfill's call, not the user's
    w = _log_mel_once(dynamo)
    texts = [f"{b.words} {b.fix}" for b in w.table.breaks]
    assert texts and not any("__new__" in t for t in texts)
    made = next(b for b in w.table.breaks if "creating" in b.words)
    assert "np.random.RandomState" in made.words and made.fix.startswith("create the RandomState outside")
    rand = next(b for b in w.table.breaks if "`rand`" in b.words)
    assert rand.fix.startswith("call `RandomState.rand` outside the compiled function")


def test_autocast_switched_off_and_its_dtype_changed_are_two_causes_each_on_its_compile(dynamo):
    # timm's validate() under amp_autocast (bfloat16), a float16 benchmark, then validation without amp
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    f = torch.compile(model, backend=BACKEND)
    x = torch.randn(2, 4)
    with tl.watch() as w, torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            f(x)
        with torch.autocast("cpu", dtype=torch.float16):
            f(x)
        f(x)
    check_against_dynamo(w, dynamo)
    said = sorted(c.words for c in only_causes(w, "Sequential.forward"))
    assert said == [
        "autocast on cpu was switched on or off (torch.autocast around the call)",
        "autocast's dtype on cpu changed (torch.autocast(..., dtype=...) around the call)",
    ]


class BoxPostprocess(torch.nn.Module):  # torchvision's RoIHeads.postprocess_detections, its thresholding
    def __init__(self):
        super().__init__()
        self.cls_score = torch.nn.Linear(16, 5)

    def forward(self, box_features):
        scores = torch.softmax(self.cls_score(box_features), -1)[:, 1:].reshape(-1)
        inds = torch.where(scores > 0.05)[0]
        scores = scores[inds]
        keep = torch.where(scores > 0.2)[0]
        return scores[keep]


def test_an_index_tensor_made_by_torch_where_is_named_by_its_variable_and_not_told_to_drop_a_batch(dynamo):
    f = torch.compile(BoxPostprocess(), backend=BACKEND)
    torch.manual_seed(0)
    with tl.watch() as w:
        for n in (20, 31, 12):  # proposals per image after the RPN's NMS
            f(torch.randn(n, 16))
    check_against_dynamo(w, dynamo, also=("___stack0[0]",))  # the carried index changes with scores: said too
    made = [c for r in w.table for c in r.causes if "___stack0[0]" in c.guard and c.kind == "size"]
    assert made and all(re.match(r"(inds|keep) dimension 0 changed", c.words) for c in made)
    assert not any("drop_last" in c.fix or "or pad to a few sizes" in c.fix for c in made)


def recurrent_mask(inputs_embeds, attention_mask):  # transformers' create_recurrent_attention_mask, its shape
    if attention_mask is None:
        return None
    return attention_mask[:, None, :] * inputs_embeds.new_ones(1)


def test_a_recompile_dynamo_then_skips_shows_the_guard_that_failed(dynamo):
    f = torch.compile(recurrent_mask, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(1, 5, 4), torch.ones(1, 5))
        f(torch.randn(1, 5, 4), None)  # no tensor work on this path: Dynamo skips the recompile
    check_against_dynamo(w, dynamo)  # every recompile Dynamo logged has its guard shown
    (skipped,) = [c for r in w.table for c in r.causes if c.kind == "failed"]
    assert "(on these inputs: attention_mask is now None, was a tensor) and skipped it" in skipped.words
    assert "attention_mask" in skipped.guard


class CachedAttention(torch.nn.Module):  # minGPT-style incremental decoding: past=None, then torch.cat
    def __init__(self, d=16, h=2):
        super().__init__()
        self.qkv, self.h = torch.nn.Linear(d, 3 * d), h

    def forward(self, x, past=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
        present = (k, v)
        q, k, v = (t.view(B, -1, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        return y.transpose(1, 2).reshape(B, T, C), present


def test_a_cache_that_was_none_counts_the_compile_and_the_size_change_with_it_is_not_told_to_mark(dynamo):
    # the reviewer applied mark_unbacked(x, 1) as told: still 3 compiles (past None -> a value forces one)
    step = torch.compile(CachedAttention().eval(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        _, past = step(torch.randn(1, 5, 16))  # the prompt, no cache
        for _ in range(3):
            _, past = step(torch.randn(1, 1, 16), past)
    check_against_dynamo(w, dynamo, also=("past is None", "'past[1]' size mismatch", "stride mismatch"))
    second = [c for c in w.table.rows[1].causes if c.kind not in ("first", "dynamic")]
    assert second[0].kind == "none" and second[0].count == 1 and second[0].words.startswith("past is now")
    size = next(c for c in second if c.kind == "size")
    assert size.count == 0 and size.fix.startswith(
        "none for this compile, which needs a graph of its own anyway (past is now a tuple, was None)"
    )
    assert "mark" not in size.fix.split("; if this changes again later: ")[0]
    layout = [c for r in w.table for c in r.causes if c.kind == "stride"]
    assert layout and all("x." not in c.fix and "channels_last" not in c.fix for c in layout)  # 3-D, named past[i]
    assert any("past[0].contiguous()" in c.fix for c in layout)  # both layers named, alike ones as one change
    assert {"past[0]", "past[1]"} <= {n for c in layout for n in re.findall(r"past\[\d\]", c.fix)}


def test_a_cache_marked_each_step_under_dynamic_false_is_said_marked_and_its_view_offset_is_translated(dynamo):
    # the prompt step's cache is a view from split() (offset > 0); later ones come from torch.cat (offset 0)
    step = torch.compile(CachedAttention().eval(), backend=BACKEND, dynamic=False)
    with tl.watch() as w, torch.no_grad():
        _, past = step(torch.randn(1, 5, 16))
        for _ in range(4):
            for t in past:
                torch._dynamo.maybe_mark_dynamic(t, 1)
            _, past = step(torch.randn(1, 1, 16), past)
    check_against_dynamo(w, dynamo, also=("past is None", "storage_offset()"))
    causes = [c for r in w.table for c in r.causes]
    marked = [c for c in causes if c.kind == "dynamic"]
    assert marked and all("as your code marked them" in c.words and "automatic" not in c.fix for c in marked)
    (offset,) = [c for c in causes if c.kind == "offset"]  # past[0] and past[1]: one change
    assert offset.words.startswith(
        "the storage offset of past[0], past[1] changed (the graph assumed offset 2 or more)"
    )
    assert ".clone() it" in offset.fix and not any(c.kind == "verbatim" for c in causes)


def test_two_breaks_on_one_line_resume_at_the_call_left_there_and_carry_values_named_by_their_call(dynamo):
    w = _log_mel_once(dynamo)
    line = (
        mel_filters.__wrapped__.__code__.co_firstlineno + 2
    )  # (its decorator first) np.random.RandomState(n_mels).rand(...).astype(...)
    resumed = {r.function.split(" (")[0]: r.signature for r in w.table if r.function.startswith("mel_filters after")}
    assert (
        resumed
        == {
            f"mel_filters after the graph break at line {line}, resuming at .rand(...) in line {line}": (
                "np.random.RandomState(n_mels): RandomState, n_mels: int 4"
            ),
            f"mel_filters after the graph break at line {line}, resuming at .astype(...) in line {line}": (
                "np.random.RandomState(n_mels).rand(n_mels, 9): ndarray f64[4, 9]"  # its dtype and shape: Dynamo reads it as a tensor
            ),
        }
    )


def test_a_break_in_a_loop_header_resumes_in_that_header_and_its_list_is_named_by_the_call(dynamo):
    step = torch.compile(beam_step, backend=BACKEND)
    torch.manual_seed(0)  # an EOS among the candidates: the .item() that Dynamo gives up on inside the loop
    with tl.watch() as w:
        step(torch.log_softmax(torch.randn(3, 8), -1), torch.zeros(3), 3, [])
    check_against_dynamo(w, dynamo)
    loop = beam_step.__code__.co_firstlineno + 6
    (row,) = [r for r in w.table if "after the graph break" in r.function]
    assert f"after the graph break at line {loop}, resuming in the for loop's header at line {loop}" in row.function
    assert "token.tolist()[0]: int" in row.signature and "carried value" not in row.signature
    (failed,) = [c for c in row.causes if c.kind == "failed"]
    assert failed.words.endswith(f"beam_step from line {loop} on, the loop included")


def test_contract_dynamo_keeps_each_resume_functions_original_code():
    """The private read behind the carried values' names (sources/resume_code.py), checked for its shape."""
    from torch._dynamo.resume_execution import ContinueExecutionCache

    from tpu_lab.compile.sources.resume_code import carried_slots

    torch._dynamo.reset()
    torch.compile(mel_filters.__wrapped__, backend=BACKEND)(4)
    resumed = (getattr(v, "__code__", v) for k, v in globals().items() if k.startswith("__resume"))
    made = [c for c in resumed if c.co_name.startswith("torch_dynamo_resume_in_mel_filters")]
    assert made, f"torch {torch.__version__}: Dynamo's resume functions are no longer globals of their module"
    metadata = ContinueExecutionCache.generated_code_metadata
    assert all(metadata.get(c) is not None for c in made), f"torch {torch.__version__}: generated_code_metadata moved"
    originals = {metadata.get(c).code for c in made}
    assert originals == {mel_filters.__wrapped__.__code__}, f"torch {torch.__version__}: the resume metadata's code"
    assert {carried_slots(c, {})["___stack0"] for c in made} == {
        "np.random.RandomState(n_mels)",
        "np.random.RandomState(n_mels).rand(n_mels, 9)",
    }


class Tagger(torch.nn.Module):  # run_ner.py's token classifier, as Trainer calls it: model(**batch)
    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(50, 8), torch.nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask, labels):
        logits = self.head(self.embed(input_ids) * attention_mask.unsqueeze(-1))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def test_a_padded_training_batch_is_one_sequence_length_change_with_its_labels(dynamo):
    f = torch.compile(Tagger(), backend=BACKEND)
    with tl.watch() as w:
        for length in (7, 11):  # DataCollatorForTokenClassification pads each batch to its longest
            ids = torch.randint(1, 50, (2, length))
            f(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.zeros_like(ids)).backward()
    check_against_dynamo(w, dynamo, also=("input_ids", "attention_mask", "labels"))
    (size,) = only_causes(w, "Tagger.forward")
    said, _, names = size.words.partition(" in ")  # in the order Dynamo checked them
    assert said == "sequence length changed 7 -> 11" and set(names.split(", ")) == {
        "input_ids",
        "attention_mask",
        "labels",
    }
