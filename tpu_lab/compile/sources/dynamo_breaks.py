"""Every graph break Dynamo took, from ``graph_break_reasons`` (each with the user's stack; Dynamo's
counter misses data-dependent breaks, this list does not). A break Dynamo cannot resume from (inside a
loop) is listed there only as "step_unsupported" at the last point it could resume from; the break itself
is heard from Dynamo's graph-break log (raised to DEBUG for our handler alone where the user did not ask
for it, so nothing more is printed). Part of the Dynamo source seam."""

from __future__ import annotations

import collections
import functools
import logging
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from tpu_lab.compile.causes.source_file import enclosing_def
from tpu_lab.compile.sources import dynamo_source
from tpu_lab.compile.sources.dynamo_failures import value_sized_in
from tpu_lab.compile.sources.frames import RESUME
from tpu_lab.compile.sources.listening import outside_dynamo
from tpu_lab.compile.sources.stack_place import break_location


class GraphBreak(NamedTuple):
    """One graph break Dynamo took: its reason (with Dynamo's hints) and the user's file and line."""

    reason: str
    filename: str
    line: int
    library: str = ""  # file:line where it broke, when that is library code (torch, site-packages)
    stopped_at: int = 0
    """A break Dynamo could not resume from: the line it compiled the function up to (the rest runs eagerly)."""
    value_sized: tuple[str, int, str] = ("", 0, "")
    """A backend's failure on an op whose size depends on values: the user's line that makes it."""


_UNRESUMABLE = "Encountered graph break that we cannot resume from"
_TRACING = "Encountered graph break when attempting to trace"
_SKIPPED = "Failed to handle graph break gracefully"


class _Heard(NamedTuple):
    """A graph break Dynamo logged."""

    reason: str
    stack: list[traceback.FrameSummary]
    unresumable: bool
    at: tuple[int, int]
    """(breaks Dynamo had recorded, resets): the place in ``graph_break_reasons`` the compile it belongs to
    takes, so a break is paired only with the record that follows it."""
    logged_at: traceback.FrameSummary | None = None
    """Where Dynamo's log places it ("in user code at file:line")."""
    value_sized: tuple[str, int, str] = ("", 0, "")
    compile_id: str = ""
    """The compile that logged it (``resets:frame/attempt``), '' where torch does not say."""


_heard: collections.deque[_Heard] = collections.deque(maxlen=64)  # newest last
_LOCATED = re.compile(r"in user code at (.+):(\d+)\n")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.M)


class _Unresumable(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _emitted()(record)


@functools.cache
def _emitted() -> Callable[[logging.LogRecord], None]:
    return outside_dynamo(_emit)


def _emit(record: logging.LogRecord) -> None:
    try:
        text = record.getMessage()
    except Exception:  # a record we cannot format is not ours to read
        return
    if "Graph Break Reason: " not in text:
        return
    head, _, stack = text.partition("User code traceback:")
    reason = head.partition("Graph Break Reason: ")[2]
    unresumable = _UNRESUMABLE in reason
    if unresumable:
        reason = reason.partition("Graph break encountered:")[2]
    elif reason.startswith(_TRACING):  # "...trace CALL: a function call, e.g. f(x, y):", then the break
        reason = reason.partition("\n\n")[2]
    frames = [traceback.FrameSummary(f, int(n), name) for f, n, name in _FRAME.findall(stack)]
    logged_at = traceback.FrameSummary(at[1], int(at[2]), "") if (at := _LOCATED.search(text)) else None
    if not frames and logged_at:  # a repeat: Dynamo logs only where it is
        frames = [logged_at]
    import torch._dynamo.utils as dynamo_utils

    recorded = len(getattr(dynamo_utils, "graph_break_reasons", ()))
    compile_id, restarted = _note_retry(_SKIPPED in head, _break_type(reason))
    if restarted:  # the record this attempt adds repeats the one the restarted attempt added
        if len(_restarted) > 4096:
            _restarted.clear()
        _restarted.add((recorded, dynamo_source.resets))
    if (first := _first.get(_last_broke[0])) is not None and not first[0]:
        _first[_last_broke[0]] = (reason.strip(), frames)
    sized = value_sized_in(sys.exc_info()[1])  # logged while Dynamo handles the error: still in flight
    _heard.append(
        _Heard(
            reason.strip() or head, frames, unresumable, (recorded, dynamo_source.resets), logged_at, sized, compile_id
        )
    )


_last_broke = ("", "")  # the compile that logged the latest break (with the resets before it), and its type
_last_attempt = 0  # the attempt of that compile which logged it (Dynamo restarts a compile's analysis)
_restarted: set[tuple[int, int]] = set()  # (index in graph_break_reasons, resets): a restarted attempt's again
_retried: set[str] = set()  # compiles that gave up and logged the break they had just logged again (bounded)


def _break_type(reason: str) -> str:
    """The first line of the break a message reports (its registry type), whatever Dynamo says around it."""
    core = reason.partition("Graph break encountered:")[2] or reason
    return next((line.strip() for line in core.splitlines() if line.strip()), "")


def _note_retry(skipped: bool, kind: str) -> tuple[str, bool]:
    """A frame Dynamo gives up on logs, in a later attempt of the same compile, the break it logged just before
    ("Failed to handle graph break gracefully"): the same break, not another one. A retry that met another
    break (DETR's matcher: numpy first, then a generator it cannot rebuild) is a break of its own. An attempt
    Dynamo restarted after the break (torchdiffeq's step count: "Restarting analysis due to
    _tensorify_python_scalars") meets the same break again and records it again. Returns the compile that
    logged it ('' where torch does not say), and whether this is such a restart."""
    global _last_broke, _last_attempt
    try:
        from torch._guards import CompileContext

        trace = CompileContext.current_trace_id()
    except (ImportError, AttributeError):  # another torch: each logged break counts
        return "", False
    if trace is None:
        return "", False
    compile_id = f"{dynamo_source.resets}:{trace.compile_id}"
    again = (compile_id, kind) == _last_broke and (skipped or trace.attempt > _last_attempt)
    if again and skipped:
        if len(_retried) > 4096:
            _retried.clear()
        _retried.add(compile_id)
    _last_broke, _last_attempt = (compile_id, kind), trace.attempt
    if not skipped and compile_id not in _first:
        if len(_first) > 256:
            _first.clear()
        _first[compile_id] = ("", [])  # filled by the caller, with the break's reason and stack
    return compile_id, again and not skipped


def first_break(compile_id: str) -> tuple[str, list[traceback.FrameSummary]] | None:
    """The break compile ``compile_id`` met first (its reason and the user's stack), where it later gave up on
    another (a generator it could not rebuild to resume after it): the break that started it."""
    found = _first.get(f"{dynamo_source.resets}:{compile_id}")
    return found if found and found[0] else None


_first: dict[str, tuple[str, list[traceback.FrameSummary]]] = {}


def retried(compile_id: str) -> bool:
    """Whether ``compile_id`` gave up after logging its break, so its failure logged the same break again."""
    return f"{dynamo_source.resets}:{compile_id}" in _retried


def hear_unresumable() -> None:
    """Listen to Dynamo's graph-break log for breaks it cannot resume from (per watch: cheap once set)."""
    import torch._dynamo.symbolic_convert as convert

    log = getattr(convert, "graph_break_log", None)
    if not isinstance(log, logging.Logger):
        return
    if not log.isEnabledFor(logging.DEBUG):  # TORCH_LOGS=graph_breaks off (set_logs() resets it): ours alone hears
        log.propagate = False
        log.setLevel(logging.DEBUG)
    if not any(isinstance(h, _Unresumable) for h in log.handlers):
        log.addHandler(_Unresumable())


def _unresumable(checkpoint: list, index: int) -> GraphBreak | None:
    """The heard break behind a "step_unsupported" record at ``index`` of Dynamo's list, whose last resumable
    point is ``checkpoint`` (its frame), among the breaks logged just before that record: the one logged as
    unresumable; else (met first inside a call, Dynamo logged it there and not again) the latest in that
    frame; else the latest repeat (logged by place alone)."""
    if not checkpoint:
        return None
    point = checkpoint[-1]
    name = str(point.name)  # a resume function's checkpoint: the function it resumes (Dynamo's log names that)
    name = name[len(RESUME) :].rpartition("_at_")[0] if name.startswith(RESUME) else name

    home = enclosing_def(point.filename, int(point.lineno or 0))  # GPT2Model.forward is no GPT2LMHeadModel.forward

    def at(stack: list[traceback.FrameSummary]) -> int:  # where the checkpoint's frame is in a heard stack
        return next(
            (
                i
                for i, f in enumerate(stack)
                if f.filename == point.filename
                and f.name == name
                and enclosing_def(f.filename, int(f.lineno or 0)) == home
            ),
            -1,
        )

    # a frame Dynamo skipped whole ("Failed to handle graph break gracefully") logs its own break: never this one
    near = [h for h in _heard if h.at == (index, dynamo_source.resets) and not h.reason.startswith(_SKIPPED)]
    found = next((h for h in near if h.unresumable and at(h.stack) >= 0), None)
    found = found or next((h for h in reversed(near) if at(h.stack) >= 0), None)
    found = found or next((h for h in reversed(near) if [f.name for f in h.stack] == [""]), None)
    # raised with no frame of the user's traced (a backend failing on the finished graph): Dynamo logs it at
    # the function's first line, which is where it is counted
    found = found or next(
        (h for h in near if h.unresumable and h.logged_at and h.logged_at.filename == point.filename), None
    )
    if found is None:
        return None
    _heard.remove(found)
    repeat = [f.name for f in found.stack] == [""]  # a repeat is logged at the break's own place: that place
    inside = found.stack[at(found.stack) :] if at(found.stack) >= 0 else found.stack if repeat else list(checkpoint)
    if at(found.stack) < 0 and not repeat and found.logged_at:
        inside = [traceback.FrameSummary(point.filename, found.logged_at.lineno or 0, name)]
    return GraphBreak(
        found.reason, *break_location(inside), stopped_at=int(point.lineno or 0), value_sized=found.value_sized
    )


def graph_break_marker() -> tuple[int, int, int]:
    import torch._dynamo.utils as dynamo_utils

    hear_unresumable()

    found = getattr(dynamo_utils, "graph_break_reasons", None)
    return (id(found), len(found), dynamo_source.resets) if isinstance(found, list) else (0, 0, dynamo_source.resets)


def graph_breaks_since(marker: tuple[int, int, int]) -> tuple[list[GraphBreak], tuple[int, int, int]]:
    """Breaks recorded after ``marker`` (a reset empties the list: then all of them), and the new marker."""
    import torch._dynamo.utils as dynamo_utils

    found = getattr(dynamo_utils, "graph_break_reasons", None)
    if not isinstance(found, list):
        return [], marker
    same = marker[0] == id(found) and marker[2] == dynamo_source.resets and marker[1] <= len(found)
    start = marker[1] if same else 0
    out = []
    for index, item in enumerate(found[start:], start):
        if (index, dynamo_source.resets) in _restarted:
            continue
        stack = list(getattr(item, "user_stack", None) or [])
        heard = _unresumable(stack, index) if str(item.reason) == "step_unsupported" else None
        taken = heard or GraphBreak(str(item.reason), *break_location(stack))
        out.append(taken._replace(reason=_in_full(taken)))
    return out, (id(found), len(found), dynamo_source.resets)


_FULL: dict[tuple[str, int], str] = {}  # the newest full reason at each place (bounded)


def _in_full(found: GraphBreak) -> str:
    """A break's reason, in full where Dynamo kept only its short form this time (``generic_jump
    NumpyNdarrayVariable()``: a break repeated at one place) and kept it in full there before."""
    place = (found.filename, found.line)
    if "Explanation:" in found.reason:
        if len(_FULL) > 1024:
            _FULL.clear()
        _FULL[place] = found.reason
        return found.reason
    short = found.reason.strip()
    before = _FULL.get(place, "")
    kind = short.rsplit(" ", 1)[-1]  # the traced value's kind, which the full text's debug context names too
    return before if short and "\n" not in short and kind.endswith(")") and kind in before else found.reason


def broke_in(code: Any, compile_id: str = "") -> bool:
    """Whether a graph break Dynamo logged lately was met while tracing ``code`` (a frame of it on the break's
    user stack, or logged by its compile ``compile_id``: a break met again inside a call is logged by its place
    alone): a graph with no operation then stops at that break, else the function has no tensor work."""
    if compile_id and any(h.compile_id == f"{dynamo_source.resets}:{compile_id}" for h in _heard):
        return True
    if code is None:
        return False
    lines = {line for _, _, line in code.co_lines() if line}
    # a resume function (the part after a break) runs the original function's lines, under its name
    names = {code.co_name, "", code.co_name.removeprefix(RESUME).rsplit("_at_", 1)[0]}
    return any(
        f.filename == code.co_filename and f.name in names and f.lineno in lines for h in _heard for f in h.stack
    )
