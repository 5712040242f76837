"""Why something compiled, in words: Dynamo's guard text mapped to a sentence a user can act on, and the
inputs that changed since the function last compiled. Pure: strings in, strings out."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tpu_lab.compile.causes import guard_words
from tpu_lab.compile.causes.cause import Cause, local_name
from tpu_lab.compile.causes.guard_sizes import (
    PREFILL_DECODE_FIX,
    STATIC_WORDS,
    prompt_length_words,
    with_note,
    without_note,
)
from tpu_lab.compile.causes.guard_values import static_number_fix
from tpu_lab.compile.causes.resumed import in_resumed_frame
from tpu_lab.compile.sources.frames import RESUME, Capture, FunctionKey, renamed, where_label

LIMIT_TEXT = (
    "recompile limit reached: Dynamo gave up on this function, so calls that need a new graph run "
    "UNCOMPILED (only a log line says so)."
)
TPU_DYNAMIC = "torch_tpu's tpu backend rejects dynamic shapes: pad to buckets instead"
Signature = Sequence[tuple[str, str]]


def explain(reason: str | None, *, limit_hit: bool = False) -> str:
    """One sentence for a recompile reason (Dynamo's guard text or a source's own words)."""
    if limit_hit:
        return LIMIT_TEXT
    if not reason:
        return "first compile"
    if "NoneType" in reason and "mask" in reason:
        return (
            "attention mask is None instead of a tensor: the prompt filled its bucket exactly, no padding, "
            "so transformers dropped the mask (a second graph for the same shape)"
        )
    failures = guard_words.parse([reason])
    if not failures or not failures[0].graph:
        return reason.strip().splitlines()[0]  # a source's own words (torch_tpu's cache miss)
    return "; ".join(dict.fromkeys(guard_words.words(f).words for f in failures))


def causes_of(
    reasons: Sequence[str],
    graphs: Sequence[tuple[str, Signature]],
    signature: Signature,
    *,
    tpu: bool = False,
    static: bool = False,
    names: Sequence[tuple[str, str]] = (),
    caller: str = "",
    dynamic: frozenset[str] = frozenset(),
    limit: int | None = None,
    subjects: tuple[tuple[str, str], ...] = (),
) -> list[Cause]:
    """Why a compile happened: the guards that failed against the compiled graph closest to the new
    inputs. Dynamo checks every graph it holds; a guard failing only against a far graph (a dtype
    compiled long ago, a size a later dynamic graph covers) is no cause. Closest: fewest distinct
    failures, then fewest differing input tokens, ties to the most recent graph (Dynamo lists it first).
    ``names``: Dynamo's input names -> the user's; ``caller``: the library that called the function;
    ``dynamic``: Python numbers (by Dynamo's source) that automatic dynamic shapes made symbolic in the
    new graph; ``limit``: the recompile limit, for numbers whose every value is a graph."""
    failures = guard_words.parse(reasons)
    if not failures:
        return []
    marks = ((n, re.search(r"mark_static\[([\d, ]+)\]", d)) for n, d in signature)
    pinned = frozenset(f"{n}/{i.strip()}" for n, m in marks if m for i in m[1].split(","))
    cache = next((d.split()[0] for _, d in signature if d.split()[0].endswith("Cache")), "")
    now = dict(signature) | {local_name(source): d for source, d in subjects}  # what the guards checked, now
    per_graph: dict[str, list[Cause]] = {}
    for graph in dict.fromkeys(f.graph for f in failures):
        found = [
            (f, guard_words.words(f, tpu=tpu, static=static, cache=cache, pinned=pinned, caller=caller, inputs=now))
            for f in failures
            if f.graph == graph
        ]
        per_graph[graph] = [
            dataclasses.replace(c, words=renamed(c.words, names), fix=renamed(c.fix, names))
            for c in _calling_style(_cache_first(_merged([_next_values(f, c, dynamic, limit) for f, c in found])))
        ]
    for causes in per_graph.values():  # the note on automatic dynamic shapes, said once per compile
        said = [i for i, c in enumerate(causes) if STATIC_WORDS in c.words]
        for i in said[1:]:
            causes[i] = dataclasses.replace(causes[i], words=without_note(causes[i].words, STATIC_WORDS))
    inputs, order = dict(graphs), list(per_graph)
    far = len(signature) * 64 + 64  # a graph whose inputs this process did not see
    best = min(
        order,
        key=lambda g: (
            # a graph compiled for inputs that look the same as now is nearest: what differs from it is
            # what the table cannot show (a string's value, a list's order), not what another graph names
            g not in inputs or _distance(inputs[g], signature) > 0,
            len(per_graph[g]),
            _distance(inputs[g], signature) if g in inputs else far,
            order.index(g),
        ),
    )
    return [_keywords_named(c, inputs.get(best), signature) for c in per_graph[best]]


def _keyword(name: str) -> str:
    """``kwargs['attention_mask']`` -> ``attention_mask`` (a keyword through **kwargs); else the input."""
    m = re.match(r"^\w+\['([^']+)'\]", name)
    return m[1] if m else name.split("[")[0].split(".")[0]


def _keywords_named(cause: Cause, before: Signature | None, now: Signature) -> Cause:
    """A change in the number of keyword arguments, said by name where the graph's inputs are known:
    ``attention_mask is now passed`` (generate passes it for a padded batch only)."""
    if not cause.words.startswith("a keyword argument was added or dropped (") or before is None:
        return cause  # the words already name it, or the graph's inputs are unknown
    was, new = ({_keyword(n) for n, _ in sig} for sig in (before, now))
    added, dropped = sorted(new - was), sorted(was - new)
    if not (added or dropped):
        return cause
    said = [f"{', '.join(added)} now passed"] if added else []
    said += [f"{', '.join(dropped)} no longer passed"] if dropped else []
    return dataclasses.replace(cause, words=f"a keyword argument was added or dropped: {'; '.join(said)}")


def first_compile_words(function: FunctionKey, earlier: FunctionKey | None, *, after_reset: bool) -> str:
    """A first compile; a function a re-run notebook cell defined again says so (``earlier``: the previous
    definition, seen compiling): Dynamo keys graphs by code object, so the new definition starts afresh."""
    if after_reset:
        return "first compile after torch._dynamo.reset()"
    cell, before = (where_label(k.filename, k.line).split(",")[0] for k in (function, earlier or function))
    if earlier is None or not (cell.startswith("cell ") and before.startswith("cell ")):
        return "first compile"
    name = function.name
    return f"first compile: {name} was defined again in {cell} (a re-run cell), so its graphs are new; those of the {name} in {before} are not reused"


_BAKED = "; its value is baked into the graph)"


def _next_values(f: guard_words.Failure, cause: Cause, dynamic: frozenset[str], limit: int | None) -> tuple[str, Cause]:
    """(the input a guard is about, its cause) with what happens to the next values of a Python number:
    made dynamic by this recompile (later values reuse this graph), or one graph per value (up to the limit)."""
    name = guard_words.subject(f)
    source = local_name(f.guard.split(" == ", 1)[0])  # Dynamo writes L['n'] or n, by torch version
    if cause.kind == "lr" and source in {local_name(d) for d in dynamic}:
        was = re.search(r"\(was ([^;]+);", cause.words)
        words = f"the optimizer's learning rate changed (was {was[1] if was else '?'}): Dynamo made it dynamic, so later values reuse this graph"
        fix = "none needed: later values reuse this graph (an lr held in a tensor, lr=torch.tensor(0.01), avoids even this one)"
        return name, dataclasses.replace(cause, words=words, fix=fix)
    if cause.kind != "value" or not cause.words.endswith(_BAKED):
        return name, cause
    if source in {local_name(d) for d in dynamic}:
        words = cause.words.removesuffix(_BAKED) + f"): Dynamo made {name} dynamic, so later values reuse this graph"
        fix = "none needed: later values reuse this graph"
        return name, dataclasses.replace(cause, kind="value_dynamic", words=words, fix=fix)
    if limit:
        words = cause.words.removesuffix(")") + f": each new value compiles a graph of its own, at most {limit})"
        fix = cause.fix
        if fix.startswith("usually none"):  # Dynamo kept it static, so the general hope does not apply
            fix = static_number_fix(name)
        return name, dataclasses.replace(cause, words=words, fix=fix)
    return name, cause


def capture_causes(
    capture: Capture, *, tpu: bool = False, dynamic: frozenset[str] = frozenset(), limit: int | None = None
) -> list[Cause]:
    """``causes_of`` for one compile as the Dynamo source heard it."""
    found = causes_of(
        capture.reasons,
        capture.graphs,
        capture.signature,
        tpu=tpu,
        static=capture.static,
        names=capture.names,
        caller=capture.caller,
        dynamic=dynamic,
        limit=limit,
        subjects=capture.subjects,
    )
    return in_resumed_frame(found, capture.function) if capture.function.name.startswith(RESUME) else found


def _calling_style(causes: list[Cause]) -> list[Cause]:
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


def _cache_first(causes: list[Cause]) -> list[Cause]:
    """A size change that follows the KV cache's length (the attention mask spans the cache) is part of
    that cause, not one of its own: its guard joins the cache's."""
    cache = next((c for c in causes if c.kind == "cache_length"), None)
    change = re.search(r"\d+ -> \d+", cache.words) if cache else None
    if cache is None or change is None:
        return causes
    follows = [c for c in causes if c.kind == "size" and f"changed {change[0]}" in c.words]
    if not follows:
        return causes
    guards = "\n".join([cache.guard, *(c.guard for c in follows)])
    names = [
        "the attention mask" if c.words.startswith("attention mask") else c.words.split(" dimension ")[0]
        for c in follows
    ]
    also = f"{names[0]} follows it" if len(names) == 1 else f"{', '.join(names)} follow it"
    joined = dataclasses.replace(cache, words=f"{cache.words} ({also})", guard=guards)
    return [joined if c is cache else c for c in causes if c not in follows]


def _merged(found: Sequence[tuple[str, Cause]]) -> list[Cause]:
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
        elif cause.kind in _ONE_PER_INPUT:  # a reordered dict fails one key guard per position
            key = (cause.kind, _dict_or_tensor(cause.guard), "")
        elif name:
            key = (cause.kind, cause.words.replace(name, "\0"), cause.fix.replace(name, "\0"))
        else:
            key = (cause.kind, cause.words, cause.words)
        groups.setdefault(key, []).append((name, cause))
    out = []
    for same in groups.values():
        first, names = same[0][1], list(dict.fromkeys(n for n, _ in same))
        guards = "\n".join(dict.fromkeys(c.guard for _, c in same))
        if len(names) < 2:  # one input, or words that name none (each parameter's optimizer state)
            out.append(dataclasses.replace(first, guard=guards))
            continue
        also = f" (the same for {_join(names[1:])})" if names[0] in first.fix else ""
        fix = next((c.fix for _, c in same if c.fix == PREFILL_DECODE_FIX), first.fix + also)
        out.append(Cause(first.kind, _merged_words(names, same), guards, fix, first.where))
    return out


_ONE_PER_INPUT = ("dict_keys", "stride")
_TOKENS = ("input_ids", "attention_mask", "position_ids", "cache_position")


def _dict_or_tensor(guard: str) -> str:
    """The dict or tensor a key-order or stride guard is about."""
    m = re.search(r"dict\.keys\((.+?)\)|___dict_contains\(.+?, (.+?)\)|tensor '(.+?)'|^(\S+)\.stride\(\)", guard)
    return next((g for g in m.groups() if g), guard) if m else guard


_KV = re.compile(r"^\S*cache\S*\.layers\[\d+\]\.(?:keys|values)$")
_MASKS = re.compile(r"^(\w*attention_mask)\['\w+'\]$")
_SIZE = re.compile(r"size mismatch at index (\d+)\. expected (\d+), actual (\d+)")


def _join(names: list[str]) -> str:
    """Names, one after another; past four (a whole model cast), the first three and a count."""
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} and {len(names) - 3} more"


def _merged_words(names: list[str], same: Sequence[tuple[str, Cause]]) -> str:
    joined = _join(names)
    first = same[0][1]
    size = _SIZE.search(first.guard) if first.kind == "size" else None
    if size is None:
        words = first.words.replace(same[0][0], "\0")
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
        words = prompt_length_words(a, b, f" in {joined}")
    else:
        words = f"{joined} dimension {i} changed {a} -> {b}"
    return with_note(words, STATIC_WORDS) if STATIC_WORDS in first.words else words


def _distance(old: Signature, new: Signature) -> float:
    """How many shape, dtype and value tokens differ between two input signatures; among numbers that
    differ, nearer ones count a little less (a prompt of 96 is nearer the graph for 48 than for 1)."""
    a, b = dict(old), dict(new)
    total = 0.0
    for name in a.keys() | b.keys():
        ta, tb = re.findall(r"[\w.?-]+", a.get(name, "")), re.findall(r"[\w.?-]+", b.get(name, ""))
        total += abs(len(ta) - len(tb))
        for x, y in zip(ta, tb, strict=False):
            if x != y:
                near = x.isdigit() and y.isdigit() and max(int(x), int(y)) > 0
                total += 1 - (min(int(x), int(y)) / max(int(x), int(y))) * 0.5 if near else 1
    return total


def signature_changes(old: Signature, new: Signature) -> list[str]:
    """Inputs that differ between two signatures (``x: f32[4] -> f32[8]``): evidence beside a cause."""
    before, after = dict(old), dict(new)
    return [f"{n}: {before.get(n)} -> {d}" for n, d in after.items() if n in before and before[n] != d]
