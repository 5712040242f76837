"""The fix for a container whose length changed, by what it holds and where it comes from: read without being
passed in (a module's attribute, a global), walked by a loop the graph unrolls (a test-time augmentation's
transforms), a list of names or numbers picking a code path, or any other list. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tpu_lab.compile.causes.cause import Failure, local_name, shown_as_module


def length_fix(source: str, f: Failure, inputs: Mapping[str, str] | None) -> str:
    """The fix for ``len(source) == n`` failing (``f``), given the new call's ``inputs`` by name."""
    name = local_name(source)
    if _looped(f) and on_module(name, inputs):
        return _numbers_loop_fix(name, f) if _numbers(name, inputs) else _looped_fix(name, f)
    if source.startswith("G[") or on_module(name, inputs):
        return not_passed_fix(name)
    if (inputs or {}).get(name, "").endswith(" of objects"):  # logits processors, transforms: a configuration
        return _OBJECTS_FIX
    if _options(name, inputs):
        return _NUMBERS_FIX if _numbers(name, inputs) else _OPTIONS_FIX
    return LENGTH_FIX


_OBJECTS_FIX = (
    "expected once per configuration: the list holds objects the code runs in turn (logits processors, "
    "transforms), each unrolled into the graph, so each length and each set of classes is a graph of its own; "
    "keep the configurations few (or raise torch._dynamo.config.recompile_limit to their number)"
)
_OPTIONS_FIX = (
    "expected once per length: items that are not tensors (names, numbers, flags) pick a code path (which heads run), each "
    "length and each value a graph of its own; if they vary per call, pass a fixed set and a mask tensor of which apply"
)
_NUMBERS_FIX = (  # n-step rewards: numbers read item by item, no code path
    "each length is a graph of its own: a list of Python numbers is read item by item into the graph (its values "
    "too, until Dynamo makes them dynamic); where the length varies per call, pass the numbers as one tensor padded "
    "to a fixed length, with a mask tensor of which apply"
)


def _options(name: str, inputs: Mapping[str, str] | None) -> bool:
    """A container of Python strings or numbers, not tensors (task names): its items shown as such, or, where
    none is shown (the inputs spell out only tensors and numbers), the container alone by its length."""
    items = [d for n, d in (inputs or {}).items() if re.fullmatch(rf"{re.escape(name)}\[\d+\]", n)]
    if not items:
        return re.fullmatch(r"(?:list|tuple) len=\d+(?: of numbers)?", (inputs or {}).get(name, "")) is not None
    return all(d.split(" ", 1)[0] in ("str", "int", "float", "bool") or d.startswith("'") for d in items)


def _numbers(name: str, inputs: Mapping[str, str] | None) -> bool:
    """A container whose items, as the inputs show them, are all Python numbers (rewards, not task names)."""
    items = [d for n, d in (inputs or {}).items() if re.fullmatch(rf"{re.escape(name)}\[\d+\]", n)]
    if not items:  # read off an object: the container alone, with what it holds
        return (inputs or {}).get(name, "").endswith(" of numbers")
    return all(d.split(" ", 1)[0] in ("int", "float") for d in items)


def on_module(name: str, inputs: Mapping[str, str] | None) -> bool:
    """A container held on a module (``self.cache``, or ``s.cache`` where forward names its module ``s``)."""
    owner, dot, _ = name.partition(".")
    return bool(dot) and (owner == "self" or shown_as_module((inputs or {}).get(owner, "")))


def global_dict(source: str, inputs: Mapping[str, str] | None) -> bool:
    """A dict the compiled code reads from the module's globals (``G['_rope_cache']``), as it is now."""
    return source.startswith("G[") and (inputs or {}).get(local_name(source)) == "dict"


LENGTH_FIX = (
    "keep the list/tuple the same length, or pass one stacked tensor; where its tensors differ in size too (a "
    "list of images), each item is an input of its own whose sizes start static: batch them (pad and stack) "
    "outside the compiled function and compile what takes the batch"
)


def emptied_fix(name: str) -> str:
    """A container passed in empty at first and filled later (Transformer-XL's memories, empty before the first
    segment): two cases of the code, each a graph; a placeholder of another shape only moves the change."""
    return (
        f"expected once: calls with {name} empty (nothing held yet, as at a first step) and calls with it filled "
        "are a graph each, and later calls with as many items reuse this graph; placeholders passed in its place "
        "(torch.empty(0) per item) save nothing: their shapes then differ from the filled items' instead"
    )


def _looped(f: Failure) -> bool:
    """The guard's line walks the container (``for p in self.params:``, a zip or comprehension over it): the
    loop is unrolled into the graph, one copy of its body per item."""
    return bool(re.match(r"for .+ in ", f.code) or re.search(r"\b(?:zip|enumerate)\(|[\[(].+ for .+ in ", f.code))


def _looped_fix(name: str, f: Failure) -> str:
    """A container held on a module (a test-time augmentation's transforms) that a loop walks: a configuration."""
    return (
        f"expected once per length of {name}: the loop at {f.where.rpartition('/')[2]} ({f.code}) is unrolled into the graph, one "
        "copy of its body per item, so each length is a graph of its own (a configuration); to share one graph "
        "across lengths, compile only what the loop's body calls (the model) and keep the loop in Python"
    )


def _numbers_loop_fix(name: str, f: Failure) -> str:
    """A list of numbers held on a module (a loss's quantiles) that a loop walks, a graph per length."""
    return (
        f"hold the numbers in one tensor (torch.tensor({name}), made once where the list is set) and compute every "
        f"item at once in place of the loop at {f.where.rpartition('/')[2]} ({f.code}): broadcast over a new "
        "dimension of that length, so the loop is no longer unrolled into the graph; else one graph per length "
        "(and per set of values, until Dynamo makes them dynamic) is expected"
    )


def not_passed_fix(name: str) -> str:
    """A container the compiled code reads but is not given (a global log, an attribute): its length is
    baked into the graph, so the fix is to keep it out, not to pass it differently."""
    return (
        f"the compiled code reads {name} without it being passed in, so each length is a graph of its own: "
        "read it outside the compiled function and pass only what the code needs (or move that part into "
        "a torch.compiler.disable'd helper)"
    )
