"""State of a sequence held on a module: an attribute the compiled call fills at a sequence's first step (None,
then a tensor) and the user's code sets back to None between sequences (WaveNet's ``clear_buffer``, a decoder's
cache reset). Seen only across a function's rows: each row alone reads as a value set once, whose fix (set it
before the first call) would leave stale state of another batch size. Rows in, rows fixed in place."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

_FILLED = re.compile(r"^(?P<name>self[\w.\[\]']*) is now a tensor\b[^;]*?, was None\b")
_EMPTIED = re.compile(r"^(?P<name>self[\w.\[\]']*) is now None, was a tensor\b")

SEQUENCE_FIX = (
    "expected once each way: {0} is a sequence's state, which the compiled call fills at the first step and your "
    "code sets back to None between sequences, so a first step and the steps after it are a graph each; a value "
    "set before the first call would be left from another sequence (stale, and of another batch size): to keep "
    "one graph, allocate it outside the compiled call at the start of each sequence, zeros of the shape the later "
    "steps use, where the code starts from a zero buffer"
)


def reset_between_sequences(rows: Sequence[tuple[object, Any]]) -> None:
    """``rows`` ((function, row) pairs) with the fix of each attribute that one row saw filled and another saw
    set back to None, or that a method of the function's file sets back to None, said as a sequence's state."""
    filled: dict[object, set[str]] = {}
    emptied: dict[object, set[str]] = {}
    for f, r in rows:
        for c in r.causes:
            if m := _FILLED.match(c.words):
                filled.setdefault(f, set()).add(m["name"])
            if m := _EMPTIED.match(c.words):
                emptied.setdefault(f, set()).add(m["name"])
    for f, r in rows:
        # set back to None by a reset method of the file's (WaveNet's clear_buffer): where Dynamo reused the None
        # graph after it, no row saw it emptied
        reset = {n for n in filled.get(f, set()) if _reset_in(getattr(f, "filename", ""), n.rsplit(".", 1)[-1])}
        both = (filled.get(f, set()) & emptied.get(f, set())) | reset
        if both:
            r.causes = [_said(c, both) for c in r.causes]


def _reset_in(file: str, attr: str) -> bool:
    """A method other than ``__init__`` in ``file`` sets ``self.<attr>`` back to None."""
    import ast

    from tpu_lab.compile.causes.source_file import parsed_file

    tree = parsed_file(file) if file else None
    for fn in ast.walk(tree) if tree is not None else ():
        if not isinstance(fn, ast.FunctionDef) or fn.name == "__init__":
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and node.value.value is None
                and any(isinstance(t, ast.Attribute) and t.attr == attr for t in node.targets)
            ):
                return True
    return False


def _said(cause: Any, names: set[str]) -> Any:
    m = _FILLED.match(cause.words) or _EMPTIED.match(cause.words)
    return dataclasses.replace(cause, fix=SEQUENCE_FIX.format(m["name"])) if m and m["name"] in names else cause
