"""A cause that makes a graph of its own whatever else changed (another case of the code: None vs a value, a
flag's new value, a new grad mode, a new parameter shape): it counts the compile, and a size change beside
it is told that its fix saves no compile here, only later ones. Pure: causes in, causes out."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar, Protocol, TypeVar

from tpu_lab.compile.causes.cause import BAKED
from tpu_lab.compile.causes.rewritten_state import FILLED_ARGUMENT_FIX, FILLED_FIX

OWN_GRAPH = "(each case is its own graph)"
_OWN_VALUE = "(each value is its own graph)"


class _Said(Protocol):  # a Cause, or a table's RowCause (both dataclasses)
    __dataclass_fields__: ClassVar[dict[str, Any]]
    kind: str
    words: str
    fix: str


_C = TypeVar("_C", bound=_Said)


class _Told(Protocol):  # read-only: a frozen Cause too
    @property
    def kind(self) -> str: ...
    @property
    def words(self) -> str: ...


_FROM_01 = re.compile(r"^Python int (?P<name>\S+) changed \((?:was (?P<was>[01])\b|was [^,)]+, now (?P<now>[01]):)")


def another_path(c: _Told) -> bool:
    """A cause that is another case of the code: None vs a value, a flag's new value, an int argument from or
    to 0 or 1 (Dynamo compiles those apart: no other value reuses their graph), unless every value of it is
    a graph anyway (an nn.Module's int attribute, a list item: Dynamo keeps those static)."""
    return (
        (c.kind in ("none", "type") and OWN_GRAPH in c.words)
        or (c.kind == "flag" and _OWN_VALUE in c.words)
        or (c.kind in ("value", "value_dynamic") and _FROM_01.match(c.words) is not None and _EACH not in c.words)
    )


_EACH = "each new value compiles a graph of its own"


_NUMBER = re.compile(r"^Python (?:int|float|bool) (?P<name>\S+) changed \(")


def each_value_a_graph(c: _Told) -> bool:
    """A Python number whose every value is a graph of its own (baked in, or made dynamic yet held to one value
    by how the code uses it): a new value compiles, whatever else changed."""
    items = re.match(r"^\d+ items of \S+ changed \(.*\): each is a Python \w+ baked into the graph", c.words)
    return c.kind == "value" and (
        (_NUMBER.match(c.words) is not None and (BAKED in c.words or "a graph of its own" in c.words))
        or items is not None  # FCOS's img_shape: a list's ints, each set of values a graph
    )


def forces_own_graph(c: _Told) -> bool:
    """A graph of its own whatever else changed: another case, a new string, train/eval, a new parameter shape or
    dtype, a new value of a number each value of which is a graph."""
    fix = getattr(c, "fix", "")
    static = c.kind in ("string", "training") or fix.startswith(("expected once per parameter shape", _CAST))
    static = static or fix in (FILLED_FIX, FILLED_ARGUMENT_FIX)  # a container the code fills: empty, then not
    # a number on the other side of a branch; an input number's first change (Dynamo makes it dynamic only now),
    # not a value carried over a graph break (named by its call: removing the break removes that compile)
    first_change = c.kind == "value_dynamic" and not re.match(r"Python \w+ \S*\(", c.words)
    static = static or c.kind == "number_branch" or first_change
    return another_path(c) or static or each_value_a_graph(c)


STRING_FIX = (  # a new string is a graph of its own: a mode, or text to work on outside
    "expected once per value where it names a mode (a few of them); where it changes per call (a prompt, a file "
    "name), each text is a graph of its own: do the work on it outside the compiled function (encode it) and "
    "pass the tensors in"
)
_CAST = "expected once per dtype; cast the model"  # the parameters' dtype: a graph of its own, whatever else

INSTANCES_SHARE = "instances share the compiled code's graphs"


def per_instance(c: _Told) -> bool:
    """A module's int attribute that differs per instance (HF's ``self.layer_idx``, each layer compiled on its
    own): Dynamo keeps it static, so every instance is a graph of its own, whatever else changed."""
    return c.kind == "value" and INSTANCES_SHARE in c.words and "Python int" in c.words


def _forced(case: _Told) -> str:
    """What forces the compile, in short (the words of the cause ``forces_own_graph`` picked)."""
    if m := _FROM_01.match(case.words):
        return f"a new value of {m['name']}, " + (f"was {m['was']}" if m["was"] else f"now {m['now']}")
    if m := _NUMBER.match(case.words):  # each value a graph: said in full on its own line
        return f"a new value of {m['name']}"
    return case.words.replace(OWN_GRAPH, "").replace(_OWN_VALUE, "").strip()


def own_graph_first(causes: list[_C]) -> list[_C]:
    """A value that is None on one call and not on the other (a KV cache's ``past=None`` prompt step), or a
    flag with a new value (a PEFT adapter switched off), or a new grad mode, makes a graph of its own whatever else changed: that
    cause comes first, so it counts the compile, and a size or grad-mode change in the same compile is told
    that its fix saves no compile here, only later ones."""
    if causes and per_instance(causes[0]):
        return causes  # an instance's own int (a layer's index) counts the compile: see explain._whose
    case = next((c for c in causes if c.kind in ("none", "type") and OWN_GRAPH in c.words), None)
    case = case or next((c for c in causes if forces_own_graph(c)), None)
    case = case or next((c for c in causes if c.kind == "global_state"), None)  # a new grad mode: never dynamic
    if case is None or len(causes) == 1:
        return causes
    said = _forced(case)
    moot = f"none for this compile, which needs a graph of its own anyway ({said})"
    skip = "; to skip even this one"  # a size made dynamic: nothing could have skipped this compile
    mark = "; to mark it, "  # a resumed frame's size: the same
    rest = [
        dataclasses.replace(c, fix=f"{moot}; if this changes again later: {c.fix.split(skip)[0]}")
        if c.kind in ("size", "global_state") and not c.fix.startswith("none")
        else dataclasses.replace(
            c, fix=f"{c.fix.split(skip)[0].split(mark)[0]} (this compile needs a graph of its own anyway: {said})"
        )
        if c.kind == "size" and c.fix.startswith("none needed") and (skip in c.fix or mark in c.fix)
        else c
        for c in causes
        if c is not case
    ]
    also = next((c for c in rest if forces_own_graph(c) or c.kind == "global_state"), None)
    if also is not None and "to keep one graph" in case.fix:  # DALL-E's eval call: no_grad and return_logits too
        fix = "expected once per case; a value in place of None saves nothing here: this compile needs a graph of its "
        fix += f"own anyway ({_forced(also)})"
        case = dataclasses.replace(case, fix=fix)
    return [case, *rest]
