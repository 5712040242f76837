"""A graph with no operation in it (a graph break comes before any work), said on its row with where the
work then runs: in a part after the break that compiled (nothing to say), in the functions it calls, each
compiled as a graph of its own while it ran (a compiled optimizer step: torch's wrapper breaks, its step
compiles), or eagerly on every call."""

from __future__ import annotations

from collections.abc import Iterable

from tpu_lab.compile.sources.frames import RESUME, FunctionKey
from tpu_lab.compile.watching.watch_table import RowCause

EMPTY_GRAPH = (
    "the graph holds no operation: a graph break comes before any work (see the graph breaks) and no part after "
    "it compiled, so this function's work runs eagerly on every call"
)
EMPTY_FIX = "fix the graph break it stops at (its fix is with the graph breaks): until then compiling it does nothing"


NO_OPS = (
    "the graph holds no operation: on these inputs the function does only Python work (checks, bookkeeping), "
    "with no graph break, so its compiled code runs no tensor op"
)
NO_OPS_FIX = "none needed: there is no tensor work here for a graph to speed up"


def empty_note(broke: bool = True) -> RowCause:
    """The note on a graph with no operation: stopped at a graph break (``broke``), or no tensor work at all."""
    return RowCause(EMPTY_GRAPH, "", EMPTY_FIX, "empty", 0) if broke else RowCause(NO_OPS, "", NO_OPS_FIX, "no_ops", 0)


def as_now(causes: list[RowCause], key: FunctionKey, resumed: bool, callees: Iterable[FunctionKey]) -> list[RowCause]:
    """``causes`` with the empty-graph note as it stands now: gone where a part after the break compiled
    (``resumed``, or a resumed part of the same function among the ``callees``: a resume function calls the
    next); else naming the functions it calls that compiled graphs of their own."""
    base = key.name.removeprefix(RESUME).rsplit("_at_", 1)[0] if key.name.startswith(RESUME) else key.name
    later = f"{RESUME}{base.rsplit('.', 1)[-1]}_at_"
    callees = list(callees)
    if resumed or any(k.name.startswith(later) and k.filename == key.filename for k in callees):
        return [c for c in causes if c.kind != "empty"]
    names = ", ".join(sorted({str(k) for k in callees}))
    if not names:
        return causes
    words = (
        "the graph holds no operation: a graph break comes before any work (see the graph breaks); the work is in "
        f"what it calls, compiled as graphs of their own ({names}), and only its own lines run eagerly"
    )
    fix = f"none needed where its own lines do little (the work is in {names}); else fix the graph break it stops at"
    return [RowCause(words, c.guard, fix, c.kind, c.count) if c.kind == "empty" else c for c in causes]
