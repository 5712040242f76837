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
    set back to None said as a sequence's state, on both."""
    filled: dict[object, set[str]] = {}
    emptied: dict[object, set[str]] = {}
    for f, r in rows:
        for c in r.causes:
            if m := _FILLED.match(c.words):
                filled.setdefault(f, set()).add(m["name"])
            if m := _EMPTIED.match(c.words):
                emptied.setdefault(f, set()).add(m["name"])
    for f, r in rows:
        both = filled.get(f, set()) & emptied.get(f, set())
        if both:
            r.causes = [_said(c, both) for c in r.causes]


def _said(cause: Any, names: set[str]) -> Any:
    m = _FILLED.match(cause.words) or _EMPTIED.match(cause.words)
    return dataclasses.replace(cause, fix=SEQUENCE_FIX.format(m["name"])) if m and m["name"] in names else cause
