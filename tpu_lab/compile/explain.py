"""Why something compiled, in words: Dynamo's guard text mapped to a sentence a user can act on, the
inputs that changed since the function last compiled, and, for the generation session, the cause judged
from the shape signatures compiled before. Pure: strings in, strings out."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tpu_lab.compile.signature import ShapeSignature

# Guard failures, in Dynamo's words (torch 2.11-2.15).
_SIZE = re.compile(r"tensor '(?P<name>.+?)' size mismatch at index (?P<i>\d+)\. expected (?P<a>\d+), actual (?P<b>\d+)")
_DTYPE = re.compile(r"tensor '(?P<name>.+?)' dtype mismatch\. expected (?P<a>\w+), actual (?P<b>\w+)")
_RANK = re.compile(r"tensor '(?P<name>.+?)' rank mismatch\. expected (?P<a>\d+), actual (?P<b>\d+)")
_GRAD = re.compile(r"tensor '(?P<name>.+?)' requires_grad mismatch\. expected requires_grad=(?P<a>\d)")
_VALUE = re.compile(r"^(?:\d+/\d+: )?(?P<name>L\[.+?\]|[A-Za-z_]\w*) == (?P<value>-?[\d.e+-]+|True|False)\s")
_OBJ_ID = re.compile(r"___check_obj_id\((?P<name>[^,]+),")
_GLOBAL = re.compile(r"G\['(?P<name>[^']+)'\]")
LIMIT_TEXT = (
    "recompile limit reached: Dynamo gave up on this function, so this and later new shapes run "
    "UNCOMPILED (only a log line says so). Bound the shapes with buckets."
)
TPU_DYNAMIC = "torch_tpu's tpu backend rejects dynamic shapes: pad to buckets instead"


def explain(reason: str | None, *, limit_hit: bool = False) -> str:
    """One sentence for a recompile reason (Dynamo's guard text or a source's own words)."""
    if limit_hit:
        return LIMIT_TEXT
    if not reason:
        return "first compile"
    m = _SIZE.search(reason)
    if m:
        name, i, a, b = m["name"], m["i"], m["a"], m["b"]
        if "input_ids" in name and i == "1":
            return f"input length changed {a} -> {b}: a new prompt length (or prefill <-> decode)"
        if ("cache" in name or "keys" in name or "values" in name) and i == "2":
            return (
                f"static cache length changed {a} -> {b}: the cache grows to fit each prompt; "
                "fix max_cache_len so every call shares one size"
            )
        if "attention_mask" in name:
            return f"attention mask length changed {a} -> {b}"
        return f"new shape: {_local(name)} dimension {i} changed {a} -> {b}"
    if "NoneType" in reason and "mask" in reason:
        return (
            "attention mask is None instead of a tensor: the prompt filled its bucket exactly, no padding, "
            "so transformers dropped the mask (a second graph for the same shape)"
        )
    return explain_guard(reason) or reason.strip().splitlines()[0].split(" # ")[0].strip()


def explain_guard(reason: str) -> str | None:
    """Dynamo's other guard failures in words; None when the text is not one of them."""
    if m := _RANK.search(reason):
        return f"new shape: {_local(m['name'])} has {m['b']} dimensions, was {m['a']}"
    if m := _DTYPE.search(reason):
        return f"dtype change: {_local(m['name'])} was {m['a']}, now {m['b']}"
    if m := _GRAD.search(reason):
        was = "True" if m["a"] == "1" else "False"
        return f"requires_grad change: {_local(m['name'])}.requires_grad was {was}"
    if "grad_mode" in reason:
        return "grad mode changed (torch.no_grad() / enable_grad around the call)"
    if ".training" in reason:
        return "train/eval change: a module's .training flag differs from the compiled graph's"
    if m := _GLOBAL.search(reason):
        return f"a global changed: {m['name']} (the graph baked in its old value)"
    if "___check_obj_id" in reason or "ID_MATCH" in reason:
        m = _OBJ_ID.search(reason)
        which = f"{_local(m['name'])} is " if m else ""
        return (
            f"a different object: {which}not the one the graph was compiled for (a module instance, parameter, "
            "function or other Python object)"
        )
    if m := _VALUE.search(reason.strip()):
        return (
            f"a Python number specialised per value: {_local(m['name'])} was {m['value']}; "
            "each new value compiles again (pass it as a tensor, or make it a constant)"
        )
    return None


def signature_changes(old: Sequence[tuple[str, str]], new: Sequence[tuple[str, str]]) -> list[str]:
    """What differs between two input signatures (from ``frames.describe_inputs``), in words."""
    before, after = dict(old), dict(new)
    out = []
    for name in after:
        a, b = before.get(name), after[name]
        if a is None or a == b:
            continue
        if "[" in a and "[" in b:  # tensors: dtype[shape] (requires_grad)
            (da, sa), (db, sb) = a.split("[", 1), b.split("[", 1)
            if da != db:
                out.append(f"dtype change: {name} {da} -> {db}")
            if sa.split("]")[0] != sb.split("]")[0]:
                out.append(f"new shape: {name} [{sa.split(']')[0]}] -> [{sb.split(']')[0]}]")
            if ("requires_grad" in a) != ("requires_grad" in b):
                out.append(
                    f"requires_grad change: {name}.requires_grad {'requires_grad' in a} -> {'requires_grad' in b}"
                )
        elif a.split(" ")[0] in ("int", "float") and a.split(" ")[0] == b.split(" ")[0]:
            out.append(
                f"a Python {a.split(' ')[0]} specialised per value: {name} {a.split(' ')[1]} -> {b.split(' ')[1]}"
            )
        elif " len=" in a and " len=" in b:  # a transformers cache: its length is part of the graph
            out.append(
                f"static cache length changed {a.split('len=')[1]} -> {b.split('len=')[1]}: the cache is sized per "
                "prompt and only grows; a fixed max_cache_len gives every call one size"
            )
        elif a.endswith(("(train)", "(eval)")) and b.endswith(("(train)", "(eval)")):
            out.append(f"train/eval change: {name} {a.rsplit('(', 1)[1][:-1]} -> {b.rsplit('(', 1)[1][:-1]}")
        else:
            out.append(f"{name} changed: {a} -> {b}")
    if before.get("grad mode") != after.get("grad mode"):
        out.append(f"grad mode changed: {'off' if 'grad mode' in before else 'on'} -> {after.get('grad mode', 'on')}")
    return out


def _local(source: str) -> str:
    """Dynamo's source text for an input (``L['x']``, ``kwargs['input_ids']``) as the user wrote it."""
    return re.sub(r"^L\['([^']+)'\]", r"\1", source)


def explain_new_shape(sig: ShapeSignature, compiled: Sequence[ShapeSignature]) -> str | None:
    """Why ``sig`` needed a compile, from the signatures compiled before it. None when it can't tell
    (then Dynamo's own guard text is the explanation)."""
    if sig in compiled:
        return None  # compiled before: something else changed (dtype, a reset, another guard)
    same = [c for c in compiled if c.phase == sig.phase]
    if not same:
        return f"first {sig.phase} compile" + (": one graph serves every decode step" if sig.phase == "decode" else "")
    if any((c.length, c.cache, c.batch) == (sig.length, sig.cache, sig.batch) and c.mask != sig.mask for c in same):
        return (
            "attention mask is None instead of a tensor: the prompt filled its bucket exactly, so transformers "
            "dropped the mask, and that is a second graph for the same shape"
        )
    batches = sorted({c.batch for c in same})
    new_batch = (
        f"new batch size {sig.batch} (compiled so far: {', '.join(map(str, batches))}); batch buckets bound these"
    )
    if sig.phase == "prefill" and all(c.length != sig.length for c in same):
        seen = ", ".join(str(n) for n in sorted({c.length for c in same})) or "none"
        also = f"; {new_batch}" if sig.batch not in batches else ""
        return f"new prompt length {sig.length} (compiled so far: {seen}); buckets bound these{also}"
    same_shape = [c for c in same if (c.length, c.batch) == (sig.length, sig.batch)]
    if sig.cache is not None and same_shape and all(c.cache != sig.cache for c in same_shape):
        return (
            f"static cache length changed to {sig.cache} (was {same_shape[-1].cache}): the cache is sized "
            "per prompt and only grows; a fixed max_cache_len gives every call one size"
        )
    if sig.batch not in batches:
        return new_batch
    if not same_shape:
        pairs = ", ".join(sorted({f"{c.batch}x{c.length}" for c in same}))
        return (
            f"new (batch, length) pair {sig.batch}x{sig.length}: each pair is its own graph (compiled so far: {pairs})"
        )
    return None


def innermost_message(e: BaseException) -> str:
    """The first line of the innermost exception: Dynamo wraps what a compile callback raised."""
    while (e.__cause__ or e.__context__) is not None:
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return str(e).splitlines()[0] if str(e) else type(e).__name__
