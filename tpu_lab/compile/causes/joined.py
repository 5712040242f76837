"""Causes that are one change, said as one: inputs failing alike (``batch['a'], batch['b'] dimension 0 changed
2 -> 4``), a size following the KV cache, an argument by keyword now. Pure: causes in, causes out."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.causes.guard_derived import derived_joined, derived_key
from tpu_lab.compile.causes.guard_members import members_joined
from tpu_lab.compile.causes.guard_sizes import (
    MODULE_PARAMETER_FIX,
    PARAMETER_FIX,
    PREFILL_DECODE_FIX,
    STATIC_WORDS,
    prompt_length_words,
    with_note,
)


def calling_style(causes: list[Cause]) -> list[Cause]:
    """Fewer positional arguments and keywords passed, at once, is one change: the same input passed
    by keyword now (``model(input=x)`` after ``model(x)``)."""
    args = next((c for c in causes if c.kind == "args"), None)
    keywords = next((c for c in causes if c.kind == "kwargs" and c.words.startswith("keyword arguments")), None)
    if args is None or keywords is None:
        return causes
    passed = re.search(r"\((.+?)\);", keywords.words)
    joined = Cause(
        "kwargs",
        f"{passed[1] if passed else 'an argument'} passed by keyword now, positionally before "
        "(each way of calling is its own graph)",
        f"{args.guard}\n{keywords.guard}",
        "call it the same way every time",
    )
    return [joined if c is keywords else c for c in causes if c is not args]


def followers_joined(causes: list[Cause]) -> list[Cause]:
    """A size change that follows the KV cache's length (the attention mask spans the cache), or a size or
    rank change that follows a parameter's (its gradient, its optimizer state), is part of that cause, not
    one of its own: its guard joins the leader's."""
    lead = next((c for c in causes if c.kind == "cache_length" or c.fix in (PARAMETER_FIX, MODULE_PARAMETER_FIX)), None)
    change = _CHANGE.search(lead.words) if lead else None
    if lead is None or change is None:
        return causes
    follows = [c for c in causes if c.kind in ("size", "rank") and c is not lead and _changed(c) == change[0]]
    if not follows:
        return causes
    guards = "\n".join([lead.guard, *(c.guard for c in follows)])
    names = [
        "the attention mask"
        if c.words.startswith("attention mask")
        else re.split(r" dimension | ha(?:s|ve) ", c.words)[0]
        for c in follows
    ]
    also = f"{', '.join(names)} follow{'s' * (len(names) == 1 and ', ' not in names[0])} it"
    joined = dataclasses.replace(lead, words=f"{lead.words} ({also})", guard=guards)
    return [joined if c is lead else c for c in causes if c not in follows]


def per_sample_list(causes: list[Cause], now: dict[str, str]) -> list[Cause]:
    """A list whose length changed with the batch dimension (2 -> 3 both: torchvision's ``image_sizes``, one
    item per image) is one change: Dynamo fixes a list's length into the graph, so every batch size compiles a
    graph of its own and marking the batch dimension dynamic saves nothing. ``now``: the new call's inputs."""
    for c in causes:
        m = _LENGTH.match(c.words) if c.kind == "length" else None
        held = re.search(r"\blen=(\d+)", now.get(m[1], "")) if m else None
        if m is None or held is None:
            continue
        change = f"dimension 0 changed {m[2]} -> {held[1]}"
        batch = next((s for s in causes if s.kind == "size" and change in s.words), None)
        if batch is None or m[1] in batch.words:  # no batch change alike, or it names the list already
            continue
        words = (
            f"{batch.words.split(';')[0]}, and {m[1]} with it (one item per sample: length {m[2]} -> {held[1]}): "
            "Dynamo fixes a list's length into the graph, so each batch size is a graph of its own, marked or not"
        )
        one = (  # a list of dicts (DETR's targets) or of tensors is no tensor: torch.tensor() raises on it
            f"where the code only reads the values (no loop over the items), pass them as one tensor (torch.tensor("
            f"{m[1]})) in place of the list, so sizes can share a graph; "
            if not re.search(r" of dicts|\(\w+\[", now.get(m[1], ""))
            else ""
        )
        fix = (
            "expected once per batch size: keep batch sizes few (pad the last batch to the full size, or "
            f"drop_last=True in the DataLoader); {one}a mark on the batch dimension saves nothing while the list is there"
        )
        joined = Cause("length", words, f"{batch.guard}\n{c.guard}", fix)
        return [joined if x is batch else x for x in causes if x is not c]
    return causes


_LENGTH = re.compile(r"^(\S+) has a different length \(was (\d+)")


_CHANGE = re.compile(r"\d+ -> \d+|\d+ dimensions?, was \d+")


def _changed(c: Cause) -> str:
    return m[0] if (m := _CHANGE.search(c.words)) else ""


def maybe_marked(fix: str) -> str:
    """A mark on an input of a function with a graph break: the part after the break may combine that input
    with a tensor of fixed size, so mark_dynamic would raise there (ConstraintViolationError) and
    maybe_mark_dynamic only keeps a graph per size."""
    if "torch._dynamo.maybe_mark_dynamic(" not in fix or "not mark_dynamic" in fix:
        return fix
    said = ", not mark_dynamic, which raises where the code after this function's graph break fixes that size"
    marks = r"(torch\._dynamo\.maybe_mark_dynamic\([^)]*\)(?:; torch\._dynamo\.maybe_mark_dynamic\([^)]*\))*)"
    return re.sub(marks, lambda m: m[1] + said, fix, count=1)  # after the last of the marks said together


def merged(found: Sequence[tuple[str, Cause]]) -> list[Cause]:
    """Causes that differ only in the input they name, as one (``batch['a'], batch['b'] dimension 0
    changed 2 -> 4``): several inputs failing the same way is one change; their guards are kept, one
    per line. The fix keeps the first name and says it applies to the others too."""
    groups: dict[tuple[str, str, str], list[tuple[str, Cause]]] = {}
    for name, cause in found:
        size = _SIZE.search(cause.guard) if cause.kind == "size" else None
        if size:  # input_ids and attention_mask grow alike, though their words differ ("prompt length")
            i, a, b = size.groups()
            i = "length" if i != "0" and any(k in name for k in _TOKENS) else i  # a 4-D mask's length is dim 3
            key = (cause.kind, f"size {i} {a} {b}", str(STATIC_WORDS in cause.words))
        elif cause.kind == "derived":  # a scale and a zero point computed on one line: one change
            key = (cause.kind, derived_key(cause), "")
        elif cause.kind in _BRANCHES and (c := _CROSSED.match(cause.words)) and c["verb"] == "crossed":
            key = (cause.kind, c["numbers"], "")  # one number, many conditions (a view's arithmetic): one
        elif cause.kind in ("value", "flag") and name and (item := _ITEM.fullmatch(name)):  # a list's items: one
            key = ("value", f"{item[1]}[]", "")
        elif cause.kind == "members":  # values come into a list and leave it: one change
            key = (cause.kind, cause.fix, "")
        elif cause.kind in _ONE_PER_INPUT:  # a reordered dict fails one key guard per position
            key = (cause.kind, _dict_or_tensor(cause.guard), "")
        elif name:
            key = (cause.kind, _hole(cause.words, name), _hole(cause.fix, name))
        else:
            key = (cause.kind, cause.words, cause.words)
        groups.setdefault(key, []).append((name, cause))
    out: list[Cause] = []
    layouts: dict[tuple[str, str], list[tuple[str, Cause]]] = {}  # per tensor first, then alike ones as one
    slot: dict[tuple[str, str], int] = {}
    for same in groups.values():
        first, names = same[0][1], list(dict.fromkeys(n for n, _ in same if n)) or [""]  # a relation: no one input
        guards = "\n".join(dict.fromkeys(c.guard for _, c in same))
        if first.kind == "derived":
            out.append(derived_joined([c for _, c in same]))
            continue
        if first.kind in ("number_branch", "specialised") and len(same) > 1:
            out.append(dataclasses.replace(first, words=_crossed_words([c for _, c in same]), guard=guards))
            continue
        if first.kind == "members":
            out.append(members_joined([c for _, c in same]))
            continue
        if first.kind in ("value", "flag") and len(names) > 1 and (item := _ITEM.fullmatch(names[0])):
            out.append(_items_changed(item[1], same, guards))
            continue
        if len(names) < 2:  # one input, or words that name none (each parameter's optimizer state)
            cause = dataclasses.replace(first, guard=guards)
            if first.kind == "stride" and names[0]:  # the layers of a KV cache: their layouts changed alike
                alike = (_hole(first.words, names[0]), _hole(first.fix, names[0]))
                layouts.setdefault(alike, []).append((names[0], cause))
                if alike in slot:
                    continue
                slot[alike] = len(out)
            out.append(cause)
            continue
        also = f" (the same for {_join(names[1:])})" if names[0] in first.fix else ""
        if also and "mark_unbacked(" in first.fix:  # DETR's matched boxes: each unbacked, l1_loss compares them
            also += "; marked unbacked each, sizes the code then compares or broadcasts together break the graph there"
        if mark := re.search(rf"([\w.]*mark_dynamic)\({re.escape(names[0])}, (\d+)\)", first.fix):  # mark each one
            also, every = "", "; ".join(f"{mark[1]}({n}, {mark[2]})" for n in names)  # statements: `and` runs one
        # the fix of a model input the batch builds (input_ids), where one is named: the user acts on that
        batch = first.kind == "size" and any(k in n for n in names for k in _TOKENS[:2])  # a tokenizer built it
        token = next((c.fix for n, c in same if any(k in n for k in _TOKENS)), None) if batch else None
        own = re.search(rf"{re.escape(mark[1])}\([^()]+, {mark[2]}\)", token) if token and mark else None
        token = token.replace(own[0], every) if token and own else token  # a collator's batch: every key marked
        marked = first.fix.replace(mark[0], every) if mark else first.fix + also
        fix = next((c.fix for _, c in same if c.fix == PREFILL_DECODE_FIX), token or marked)
        out.append(Cause(first.kind, _merged_words(names, same), guards, fix, first.where))
    for held, tensors in layouts.items():
        if len(tensors) > 1:
            names, first = [n for n, _ in tensors], tensors[0][1]
            also = f" (the same for {_join(names[1:])})" if names[0] in first.fix else ""
            guards = "\n".join(c.guard for _, c in tensors)
            out[slot[held]] = Cause(first.kind, _merged_words(names, tensors), guards, first.fix + also, first.where)
    return out


_ITEM = re.compile(r"(.+?)(?:\[\d+\])+")  # every index off: a list of lists' items are one list's


def _items_changed(base: str, same: Sequence[tuple[str, Cause]], guards: str) -> Cause:
    """Items of one list baked into the graph, several changed at once (``ids.tolist()[0]``, ``[1]``, ...):
    one change, said once with the first few values."""
    first = same[0][1]
    values = [
        (n, c.flag[1] if c.flag else m[1] if (m := re.search(r"\(was ([^;(),:]+)", c.words)) else "") for n, c in same
    ]
    was = [f"{n} was {v}" for n, v in values if v]  # its value alone
    limit = re.search(r", at most \d+", first.words)
    flags = sum(c.kind == "flag" for _, c in same)
    what = "bool" if flags == len(same) else "value" if flags else "number"
    words = (
        f"{len(same)} items of {base} changed ({', '.join(was[:3])}{', ...' if len(was) > 3 else ''}): each is a "
        f"Python {what} baked into the graph, so each new set of values compiles a graph of its own"
        + (limit[0] if limit else "")
    )
    fix = (
        f"keep {base}'s values in a tensor (where they come from a tensor's .tolist(), compute them from that "
        "tensor with tensor ops, or index a lookup tensor with it, not a Python dict or list), or do that work "
        "outside the compiled function and pass the result in as a tensor"
    )
    return Cause("value", words, guards, fix, first.where)


_CROSSED = re.compile(
    r"^(?P<numbers>.+?) (?P<verb>crossed|no longer meets) a (?P<what>condition|bound) the graph assumed "
    r"\((?P<condition>.*)\), set(?P<at>.*?)(?P<tail>: each side of it is a graph of its own)?$"
)


def _crossed_words(causes: list[Cause]) -> str:
    """Several conditions on one number, or bounds on sizes, crossed at once (a reshape's arithmetic on a
    number, one branch on two sizes), said as one: the shortest by name, the count, the lines that set them."""
    found = [m for c in causes if (m := _CROSSED.match(c.words))]
    if not found:  # worded otherwise: each says its own
        return "; ".join(dict.fromkeys(c.words for c in causes))
    shortest = min((m["condition"] for m in found), key=len)
    at = list(dict.fromkeys(m["at"] for m in found))
    where = at[0] + (f", and {len(at) - 1} more line{'s' * (len(at) > 2)}" if len(at) > 1 else "")
    tail = ": each side of them is a graph of its own" if found[0]["tail"] else ""
    return f"{found[0]['numbers']} {found[0]['verb']} {len(found)} {found[0]['what']}s the graph assumed ({shortest}, and {len(found) - 1} more), set{where}{tail}"


_ONE_PER_INPUT = ("dict_keys", "stride")
_BRANCHES = ("number_branch", "specialised")
_TOKENS = ("input_ids", "attention_mask", "position_ids", "cache_position", "token_type_ids", "labels")


def _dict_or_tensor(guard: str) -> str:
    """The dict or tensor a key-order or stride guard is about."""
    m = re.search(
        r"dict\.keys\((.+?)\)|___dict_contains\(.+, ([LG]\[[^\]]+\]\S*?|[\w.]+)\)|tensor '(.+?)'|^(\S+)\.stride\(\)",
        guard,
    )
    return next((g for g in m.groups() if g), guard) if m else guard


_KV = re.compile(r"^\S*cache\S*\.layers\[\d+\]\.(?:keys|values)$")
_MASKS = re.compile(r"^(\w*attention_mask)\['\w+'\]$")
_SIZE = re.compile(r"size mismatch at index (\d+)\. expected (\d+), actual (\d+)")


def _join(names: list[str]) -> str:
    """Names, one after another; past four (a whole model cast), the first three and a count."""
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} and {len(names) - 3} more"


def _hole(text: str, name: str) -> str:
    """``text`` with the input ``name`` as a whole name (never inside a word: ``a`` in "changed") left out."""
    return re.sub(rf"(?<![\w.\[']){re.escape(name)}(?![\w\[(])", "\0", text)


def _merged_words(names: list[str], same: Sequence[tuple[str, Cause]]) -> str:
    joined = _join(names)
    first = same[0][1]
    size = _SIZE.search(first.guard) if first.kind == "size" else None
    if size is None:
        words = _hole(first.words, same[0][0])
        plural = words.replace("\0 is ", "\0 are ").replace("\0 has ", "\0 have ").replace("\0's ", "\0: their ")
        plural = plural.replace("\0 was ", "\0 were ")
        plural = plural.replace("parameter \0", "parameters \0")
        return plural.replace("\0", joined)
    i, a, b = size.groups()
    names = list(dict.fromkeys(_KV.sub("the KV cache", n) for n in names))  # one entry per layer's keys, values
    # transformers' mask per attention type ({'full_attention': ..., 'sliding_attention': ...}) is the mask
    names = list(dict.fromkeys(_MASKS.sub(r"\1", n) for n in names))
    joined = _join(names)
    if i == "0" and any(k in n for n in names for k in ("input_ids", "attention_mask", "position_ids")):
        words = f"batch size changed {a} -> {b} in {joined}"
    elif i != "0" and any("input_ids" in n for n in names):
        sequences = any("labels" in n for n in names) or first.words.startswith("sequence length")
        words = prompt_length_words(a, b, f" in {joined}", training=sequences)
    else:
        words = f"{joined} dimension {i} changed {a} -> {b}"
    return with_note(words, STATIC_WORDS) if STATIC_WORDS in first.words else words


_WAS = re.compile(
    r"(?P<head>[^;]+? (?:changed|grows at every compile)) \(was (?P<was>[^;()]+)(?P<tail>(?:;[^()]*)?\)(?:[: ].*)?)"
)  # before and after it, brackets too: a quoted line of code, a note on whose graph it was told against
"""One cause told against an earlier value: ``self.p changed (was 0.0; ...)``, ``h grows at every compile (was 1)``."""


def said_once(causes: Sequence[Any]) -> str:
    """Causes (``words``, ``count``) in words; ``(x2)`` where one cause made several compiles; one that recurs
    with each earlier value (``self.p changed (was 0.0``, then ``(was 0.1``) said once, with the values."""
    said: dict[str, list[str]] = {}
    for c in causes:
        m = _WAS.fullmatch(c.words)
        key = f"{m['head']}\0{m['tail']}" if m and c.count <= 1 else c.words + (f" (x{c.count})" * (c.count > 1))
        said.setdefault(key, []).append(m["was"] if m and c.count <= 1 else "")
    return "; ".join(
        k
        if "\0" not in k
        else k.replace("\0", f"{_times(k, len(v))} (was {', '.join(v)}" if len(v) > 1 else f" (was {v[0]}")
        for k, v in said.items()
    )


def _times(key: str, n: int) -> str:  # "grows at every compile" says how often already
    return "" if key.partition("\0")[0].endswith("every compile") else f" {n} times"
