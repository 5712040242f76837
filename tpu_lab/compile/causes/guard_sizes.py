"""Tensor sizes in words, with the fix for the backend and the compile: buckets on a TPU; mark_dynamic,
drop_last or padding elsewhere; with automatic dynamic off, what still makes a size dynamic; a size the
code fixes (a loop over it) is never told to mark_dynamic. Pure: strings in, ``Cause`` out."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tpu_lab.compile.causes.cause import CARRIED, Cause, local_name

_BATCHED = ("input_ids", "attention_mask", "position_ids", "cache_position", "inputs_embeds", "labels")
STATIC_WORDS = (
    "automatic dynamic shapes off, by torch.compile(dynamic=False) or "
    "torch._dynamo.config.automatic_dynamic_shapes = False: every size is its own graph"
)


def with_note(words: str, note: str) -> str:
    """``note`` in the words' closing parenthesis, or in one of its own: one aside, not two."""
    return f"{words[:-1]}; {note})" if words.endswith(")") else f"{words} ({note})"


def without_note(words: str, note: str) -> str:
    return words.replace(f"; {note})", ")").replace(f" ({note})", "")


ONE_TOKEN_FIX = (
    "expected once: a 1-token call and longer ones are separate graphs (Dynamo compiles size 1 apart from other sizes)"
)
PREFILL_DECODE_FIX = (
    "expected: prefill and decode are separate graphs (a static cache with a fixed max_cache_len keeps "
    "decode to one graph)"
)


def prompt_length_words(a: str, b: str, where: str = "", training: bool = False) -> str:
    """The token dimension of input_ids changed: a decode step (1 token) after a prefill, a prompt after a
    1-token graph, or a new prompt length; ``where``: the inputs that changed alike (`` in input_ids, ...``);
    ``training``: a batch with labels, or a call with no KV cache, whose tokens are sequences, not prompts."""
    if training:
        return f"sequence length changed {a} -> {b}{where}"
    if b == "1" and a != "1":
        return f"a decode step (1 token per call){where}, where the graph held was compiled for a {a}-token prompt (prefill -> decode)"
    if a == "1" and b != "1":
        return f"a {b}-token prompt (prefill){where}, where the graph held was compiled for 1 token (a decode step or a 1-token prompt)"
    return f"prompt length changed {a} -> {b}{where}"


DROP_LAST = "DataLoader(drop_last=True) if you use one"  # whether the inputs came through one is not known


def size_words(
    m: re.Match,
    g: str,
    tpu: bool,
    static: bool,
    cache: str = "",
    caller: str = "",
    pipeline: bool = False,
    sequences: bool = False,
    inputs: Mapping[str, str] | None = None,
) -> Cause:
    """``cache``: the class of the KV cache among the inputs (``StaticCache``, ``DynamicCache``), if any;
    ``caller``: the library that called the compiled function (``transformers``), when not the user;
    ``sequences``: the tensor is an item of a list of 1-D tensors (token sequences, each its own length)."""
    name, i, a, b = local_name(m["name"]), m["i"], m["a"], m["b"]
    if is_parameter(m["name"], g):
        return Cause(
            "parameter_shape",
            f"parameter {name} has another shape (dimension {i}: {a} -> {b}): another parameter, or a model of another size",
            g,
            MODULE_PARAMETER_FIX if name.startswith("self.") else PARAMETER_FIX,
        )
    if name.startswith("self.") and not name.startswith("self.cache"):  # not passed in: the module keeps it
        return Cause(
            "size",
            f"{name}, a tensor the module keeps between calls, changed size (dimension {i}: {a} -> {b})",
            g,
            "the compiled code reads it from self, so its size is part of the graph: build it inside each call "
            "instead of keeping it between calls, pass it in as an argument, or (a cache that grows) allocate it "
            "once at the largest size it will need",
        )
    bucket = "pad to a few bucket sizes (tl.recommend_buckets): torch_tpu rejects dynamic shapes"
    if name == CARRIED:  # computed before the break (boolean masking, nonzero, ...): nothing the user can mark
        return Cause(
            "size",
            f"{CARRIED} changed size (dimension {i}: {a} -> {b}): the code before the break made it",
            g,
            "remove the graph break (see its fix) and this recompile goes with it; "
            + (
                "or pad before the break to a few sizes"
                if tpu
                else "else none needed once Dynamo makes the size dynamic"
            ),
        )
    if ("cache" in name or "past_key" in name or re.search(r"\.(?:keys|values)\b", name)) and i == "2":  # a cache's
        if "cross_attention" in name:  # an encoder-decoder's: one entry per encoder token, filled once per prompt
            return Cause(
                "cache_length",
                f"prompt (encoder input) length changed {a} -> {b}: the cross-attention cache holds one entry "
                "per encoder token",
                g,
                "pad prompts to a few lengths (tokenizer padding='max_length', or pad_to_multiple_of=...); a static "
                "cache does not keep this to one size: its cross-attention part is sized by the prompt",
            )
        if cache and not cache.startswith("Static"):
            return Cause(
                "cache_length",
                f"KV cache length changed {a} -> {b} ({'an' if cache[:1] in 'AEIOU' else 'a'} {cache} grows by one token per step)",
                g,
                "expected until Dynamo makes the length dynamic; for one decode graph use a static cache of one "
                "size: generate(..., cache_implementation='static', max_cache_len=N)",
            )
        if cache.startswith("Static"):
            return Cause(
                "cache_length",
                f"static cache length changed {a} -> {b}",
                g,
                "fix max_cache_len so every call shares one cache size",
            )
        return Cause(  # the cache's class is not among the inputs (inside an encoder-decoder's, a kwargs dict)
            "cache_length",
            f"KV cache length changed {a} -> {b}",
            g,
            "expected until Dynamo makes the length dynamic (a cache that grows per token); with a static cache, "
            "generate(..., cache_implementation='static', max_cache_len=N) keeps one size",
        )
    if i == "0" and any(k in name for k in _BATCHED):
        words = f"batch size changed {a} -> {b} ({name})"
    elif "input_ids" in name and i == "1":  # without a KV cache no call generates: sequences, not prompts
        words = prompt_length_words(a, b, training=not cache)
        if b == "1" and a != "1":  # prefill -> decode: padding prompts never merges those two
            return Cause("size", words, g, PREFILL_DECODE_FIX if cache else ONE_TOKEN_FIX)
    elif "attention_mask" in name:
        words = f"attention mask length changed {a} -> {b}"
    else:
        words = f"{name} dimension {i} changed {a} -> {b}"
    # maybe_: mark_dynamic raises (ConstraintViolationError) where another tensor of fixed size pins the dim
    dynamic = f"mark the dimension dynamic before the first call (torch._dynamo.maybe_mark_dynamic({name}, {i}))"
    if not re.fullmatch(r"[A-Za-z_][\w.]*(?:\[(?:\d+|'[\w.-]*')\])*(?:\.[A-Za-z_]\w*)*", name):
        # not an expression the user can write (a cache keyed by a device object): nothing to mark, pad instead
        dynamic = (
            "nothing to mark: it is built inside the compiled code; where its size follows an input, pad that input to "
            "a few sizes; where it follows the data (nonzero, a masked selection), keep it at a fixed size (a fixed "
            "number of slots, padded, with a mask of which are used)"
        )
        if "1" in (a, b) or "0" in (a, b):  # built from the data (nonzero, a routing): padding its source is no help
            dynamic = (
                "nothing to mark: it is built inside the compiled code, and sizes 0 and 1 always compile graphs of "
                "their own (Dynamo's 0/1 rule), so each costs one graph at most; to avoid even those, keep it at a "
                "fixed size (a fixed number of slots, padded, with a mask of which are used)"
            )
    elif (inputs or {}).get(name, "").startswith("ndarray"):  # Dynamo builds a tensor from it each call
        dynamic = (
            f"pass torch.from_numpy({name}) where the code takes a tensor too, and mark that tensor dynamic before the "
            "first call (a NumPy array itself cannot be marked: maybe_mark_dynamic takes a tensor)"
        )
    elif "1" in (a, b) or "0" in (a, b):  # sizes 0 and 1 are always graphs of their own: mark_dynamic keeps them so
        dynamic = (
            f"sizes 0 and 1 always compile graphs of their own: torch._dynamo.decorators.mark_unbacked({name}, {i}) "
            "before the first call shares one graph where no code compares that size to a number or another size "
            "(else a call raises a runtime assertion on it: then drop the mark and keep the extra graph)"
        )
    if caller == "torch.func":  # vmap and grad trace each size as a constant: mark_dynamic on it fails
        fix = (
            f"vmap/grad fix each size into the graph, so every size compiles one: keep it fixed "
            f"(pad the last batch to {a}, or drop it: {DROP_LAST})"
        )
        return Cause("size", words, g, fix if not tpu else f"{fix}; on a TPU: {bucket}")
    batched = any(k in name for k in _BATCHED)  # a model's own inputs (input_ids, ...), built from the batch
    if caller and batched and i == "0":  # the user never holds this tensor: mark_dynamic is out of reach
        beams = (
            " (under generate(), num_beams and num_return_sequences multiply it)"
            if caller == "transformers" and not pipeline
            else ""
        )
        fixed = "the batch size and those settings" if beams else "the batch size"
        padded = (
            "call the pipeline with one batch_size, on lists of a multiple of it"
            if pipeline
            else "pad the list of prompts to a few batch sizes"
        )
        dynamic = f"{caller} builds this input from your batch{beams}: keep {fixed} fixed ({padded}){UNTIL_DYNAMIC}"
    elif caller and batched:
        dynamic = (
            f"{caller} builds this input, so mark_dynamic is out of reach: pad your inputs to a few lengths "
            "(tokenizer padding='max_length' or pad_to_multiple_of=...), or compile with dynamic=True"
        )
    elif caller:  # a tensor the library's code computes (a submodule's input): its size follows the data
        small = (
            "sizes 0 and 1 always compile graphs of their own; for others, " if "1" in (a, b) or "0" in (a, b) else ""
        )
        dynamic = f"it comes from {caller} code, not from your call, so mark_dynamic is out of reach: {small}" + (
            "compile with the default dynamic=None so Dynamo can make this size dynamic, or dynamic=True"
            if static
            else "none needed once Dynamo makes this size dynamic; to skip even this one, compile with dynamic=True"
        )
    if tpu:
        fix = bucket
    elif dynamic.startswith("nothing to mark"):  # made inside: no batch of the user's to pad or drop
        fix = dynamic
    elif i == "0" and (sample := re.fullmatch(r"(\w+)\[\d+\]\['[^']+'\]", name)) and not caller:
        fix = (  # a list of per-sample dicts (detection targets): each sample its own number of rows
            f"each dict in {sample[1]} is one sample with its own number of rows (boxes per image): pad its tensors to "
            "a fixed maximum with a mask, or concatenate them with an index of which sample each row is, outside "
            "the compiled function; mark_dynamic on items whose sizes the code ties together can raise "
            "ConstraintViolationError"
        )
    elif i == "0" and sequences and (item := re.fullmatch(r"([\w.]+)\[\d+\]", name)) and not caller:
        indices = (inputs or {}).get(name, "").startswith(("i64", "i32"))  # DLRM's bags of indices: a pad adds rows
        pad = " with an index whose row adds nothing (an embedding's padding_idx)" if indices else ""
        fix = (
            f"each item of {item[1]} has its own length: pad them{pad} to a few lengths outside the compiled function "
            f"(or batch them, padded, into one tensor); else {dynamic}"
        )
    elif i == "0" and int(b) < int(a) and not caller and _evaluating(inputs):  # dropped, it leaves the metrics
        said = dynamic.replace(ON_TPU, "")  # bucketing would pad it
        fix = f"{said}; an evaluation's last, smaller batch is not one to drop or pad: either changes what is measured"
    elif i == "0" and int(b) < int(a) and not caller:
        fix = f"if this is the last, smaller batch: pad it to {a} or drop it ({DROP_LAST}); else {dynamic}"
    else:
        fix = dynamic if caller else f"{dynamic}, or pad to a few sizes"
    if static and not tpu:
        words = with_note(words, STATIC_WORDS)
        if caller:
            fix = dynamic
        elif "mark_dynamic(" in dynamic:  # mark_dynamic raises where the code fixes the size: maybe_ does not
            fix = (
                "pad to a few sizes, or mark the dimension dynamic where the code allows it: "
                f"torch._dynamo.maybe_mark_dynamic({name}, {i}) on every tensor you pass there (honoured with "
                "automatic dynamic off too, but only on the marked tensor: one made new each call, as a torch.cat "
                "KV cache is, needs the mark each call; where the code fixes that size, as a loop over it does, it "
                "keeps a graph per size where mark_dynamic would raise), or compile with the default dynamic=None"
            )
        else:
            fix = f"pad to a few sizes, or {dynamic}: it is honoured with automatic dynamic off too"
    if _BUFFER.search(m["name"]):  # a module's buffer replaced by one of another size: a cache grown as needed
        fix = (
            f"build {name} once at the largest size you use (in __init__, e.g. for max_position_embeddings), so it "
            "never changes size; a mark on it is lost when the code replaces it"
        )
    if not tpu:
        fix += ON_TPU
    return Cause("size", words, g, fix)


_BUFFER = re.compile(r"\._buffers\[|\['_buffers'\]\[")
UNTIL_DYNAMIC = ", else none needed once Dynamo makes the batch size dynamic"
ON_TPU = "; on a TPU: pad to buckets instead (torch_tpu rejects dynamic shapes)"


PARAMETER_FIX = (
    "expected once per parameter shape: Dynamo keeps a parameter's shape static, so a model of another size, or "
    "one function called on each parameter (a per-parameter optimizer update), compiles a graph per shape; "
    "torch._dynamo.config.force_parameter_static_shapes = False lets shapes share a graph, or update every "
    "parameter in one call (torch._foreach_add_ and the other _foreach ops, over lists)"
)

MODULE_PARAMETER_FIX = (  # the module's own layer replaced by one of another size: a sweep, not an update
    "expected once per model configuration: the module now holds a layer of another size, and Dynamo keeps a "
    "parameter's shape static, so each configuration compiles a graph of its own (a sweep: torch._dynamo.reset() "
    "between configurations frees the old graphs); torch._dynamo.config.force_parameter_static_shapes = False "
    "lets shapes share a graph only where nothing else about the module changed"
)


def is_parameter(raw: str, g: str) -> bool:
    """The guard is on a module's parameter (Dynamo says so), not on an input."""
    return "Guard failed on a parameter" in g or "._parameters[" in raw


def batch_side_fix(g: str, inputs: Mapping[str, str]) -> str:
    """The fix for a batch size that crossed a bound a library's check set (``2 <= x.size()[0] <= 15``): a short
    last batch below it is padded or dropped; a batch above it (16 images) is no last batch to pad."""
    m = re.search(r"(?P<name>[\w.\[\]']+)\.size\(\)\[0\] <= (?P<top>\d+)$", local_name(g).strip())
    now = re.match(r"\w+\[(\d+)", inputs.get(m["name"], "")) if m else None
    if m and now and int(now[1]) > int(m["top"]):
        return (
            f"expected once per side of that bound: this batch of {now[1]} is larger than the graph's sizes (up to "
            f"{m['top']}), so it compiles its own; to stay on one side, keep batches at most {m['top']} (split a "
            "larger one), or accept the one graph more that the larger sizes share"
        )
    return f"expected once per side of that bound; to stay on one side, pad a short last batch to the full size or drop it ({DROP_LAST})"


def _evaluating(inputs: Mapping[str, str] | None) -> bool:
    """The call runs with grad mode off and every module among ``inputs`` in eval mode: an evaluation pass."""
    shown = inputs or {}
    modules = [d for d in shown.values() if d.endswith(("(train)", "(eval)"))]
    return shown.get("grad mode", "").startswith("off") and all(d.endswith("(eval)") for d in modules)


# as a row describes a tensor (``value_text.describe``)


def ragged(name: str, inputs: Mapping[str, str], changes: frozenset[tuple[str, str, str]] = frozenset()) -> bool:
    """``name`` (``seqs[0]``) is an item of the user's list whose items are all 1-D tensors of lengths of their
    own (token sequences): lengths that differ now, or that changed differently (5 -> 4 beside 3 -> 4). A
    wrapper's ``args[0]`` is no such list, nor a batch's tuple holding a 2-D input; items of one length that
    change together (DLRM's per-table index lists) are a batch, not ragged items."""
    item = re.fullmatch(r"((?!args\b|kwargs\b)[\w.]+)\[\d+\]", name)
    mine = rf"{re.escape(item[1])}\[\d+\]" if item else ""
    items = [d for n, d in inputs.items() if mine and re.fullmatch(mine, n)]
    moved = {(a, b) for n, a, b in changes if mine and re.fullmatch(mine, n)}
    one_d = bool(items) and all(re.match(r"^\w+\[\d+\]", d) for d in items)
    return one_d and (len(set(items)) > 1 or len(moved) > 1)
