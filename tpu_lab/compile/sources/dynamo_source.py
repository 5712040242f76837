"""Every read of Dynamo's internals (torch_tpu's counters are ``tpu_source``); the watch only folds what this
hands it. Names are Dynamo's (torch 2.13-2.15); where one is missing, a compile is still counted, told in Dynamo's text.

* The compile-start callback reads ``convert_frame._compile``'s locals: the user's ``frame`` (function,
  live inputs) and ``reasons`` (the first failed guard per graph Dynamo holds; ``dynamo_guards`` adds
  the others while a watch listens). ``reset()`` clears callbacks: ours is put back and the reset
  counted. The recompile-limit warning is heard too.
* Records: ``get_compilation_metrics()``, taken as they come; what one says is ``dynamo_records``'.
Beside it, in the same seam: ``dynamo_guards`` (every failed guard), ``dynamo_breaks`` (graph breaks) and
``dynamo_kept_guards`` (a graph's guards read before Dynamo deletes them).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tpu_lab.compile.sources import (
    dynamo_failures,
    dynamo_kept_guards,
    dynamo_pins,
    dynamo_stance,
    dynamo_unconverted,
    listening,
    stack_place,
)
from tpu_lab.compile.sources.dynamo_dynamic import automatic_dynamic_off, dynamic_from_the_start, tree_parts
from tpu_lab.compile.sources.dynamo_guards import every_failure
from tpu_lab.compile.sources.dynamo_limit import limit_of, limit_raises, limit_words, recompile_limit
from tpu_lab.compile.sources.frames import (
    Capture,
    FunctionKey,
    Signature,
    describe_inputs,
    flag_inputs,
    renamed,
    with_nones,
)
from tpu_lab.compile.sources.guarded import guarded_nones, subjects
from tpu_lab.compile.sources.listening import outside_dynamo
from tpu_lab.compile.sources.module_hooks import module_hooks
from tpu_lab.compile.sources.packages import in_pipeline, library_caller
from tpu_lab.compile.sources.passed_in import passed_in
from tpu_lab.compile.sources.resume_code import carried_names
from tpu_lab.compile.sources.self_writes import rewritten
from tpu_lab.compile.sources.wrappers import closure_names, compared, field_names, function_key, instance_of, user_names

LIMIT_TRIGGER = "recompile_limit"  # a Capture's trigger when Dynamo refused to compile: runs uncompiled, or raises


Listener = Callable[[Capture], None]
_lock = threading.Lock()
_last_seen: dict[FunctionKey, Signature] = {}  # bounded: one entry per compiled function
_graphs: dict[str, tuple[FunctionKey, Signature]] = {}  # compile id -> function, inputs (bounded)
_owners: dict[str, tuple[str, Any] | None] = {}  # compile id -> (class, weakref) of the instance it ran on (bounded)
resets = 0  # torch._dynamo.reset() calls seen since tpu_lab first listened
_filtering = False


def add_listener(listener: Listener) -> listening.Scope:
    """Hear about every compile in the calling code's scope (its thread; a generator or coroutine
    while it runs) until ``remove_listener`` with what this returns."""
    scope = listening.open_scope(listener)
    with _lock:
        _install()
    dynamo_unconverted.listen()
    return scope


def remove_listener(scope: listening.Scope) -> None:
    # The callback stays installed: it keeps each function's last inputs current (a stack walk per
    # compile, nothing per call), so the next watch can compare with them.
    listening.close_scope(scope)


def ensure_installed() -> None:
    """Put the callback back if something removed it (called per poll, never per call)."""
    with _lock:
        _install()


def _install() -> None:
    from torch._dynamo.callback import callback_handler

    start, ends = _callbacks()
    if start not in getattr(callback_handler, "start_callbacks", ()):
        callback_handler.register_start_callback(start)
    for end in ends:  # a failure's whole stack; the sizes a compile fixed
        if end not in getattr(callback_handler, "end_callbacks", ()):
            callback_handler.register_end_callback(end)
    clear = callback_handler.clear
    if not getattr(clear, "_tpu_lab", False):  # reset() clears every callback: keep ours, and count it

        def clear_keeping_ours() -> None:
            global resets
            clear()
            resets += 1
            _last_seen.clear()
            _graphs.clear()
            dynamo_failures.forget()
            dynamo_pins.forget()
            dynamo_kept_guards.forget()
            _owners.clear()
            callback_handler.register_start_callback(start)
            for end in ends:
                callback_handler.register_end_callback(end)

        clear_keeping_ours._tpu_lab = True  # type: ignore[attr-defined]
        try:
            callback_handler.clear = clear_keeping_ours  # type: ignore[method-assign]
        except (AttributeError, TypeError):  # a torch whose handler takes no attributes: re-installed per poll
            pass
    global _filtering
    if not _filtering:  # once: a decorated function enters its watch per call
        _filtering = True
        dynamo_stance.install()
        dynamo_kept_guards.install(tree_parts)
        logging.getLogger(dynamo_unconverted.LOGGER).addFilter(outside_dynamo(_convert_frame_filter))
        for name in QUIET_LOGGERS:
            logging.getLogger(name).addFilter(outside_dynamo(_break_warning_filter))


@functools.cache
def _callbacks() -> tuple[Callable[[Any], None], tuple[Callable[[Any], None], ...]]:
    """Ours, each run with Dynamo's frame hook off (see ``outside_dynamo``)."""
    ends = (dynamo_failures.on_compile_end, dynamo_pins.compile_ended)
    return outside_dynamo(_on_compile_start), tuple(outside_dynamo(end) for end in ends)


QUIET_LOGGERS = ("torch._dynamo.variables.tensor", "torch._dynamo.symbolic_convert")


def _break_warning_filter(record: logging.LogRecord) -> bool:
    # Inside a watch Dynamo's graph-break warnings (e.g. from Tensor.item()) become rows of its table.
    watching = bool(listening.listeners_here())
    return not (watching and record.levelno >= logging.WARNING and "Graph break" in str(record.msg))


def _convert_frame_filter(record: logging.LogRecord) -> bool:
    """Dynamo's converter log: a function it would not start compiling, and the recompile-limit warning,
    become rows of a watch's table (not raw text above it); the rest passes as the user's logging asks."""
    listeners = listening.listeners_here()
    hearing = [listener for listener in listeners if getattr(listener, "hears_limit", True)]  # not no_recompiles
    if hearing and (found := dynamo_unconverted.heard(record)):
        unconverted = _capture(found[1].compile_id, dynamo_unconverted.TRIGGER, found[0], ())
        for listener in hearing:
            listener(unconverted)
    if not listeners or not str(record.msg).startswith("torch._dynamo hit config."):
        return dynamo_unconverted.passes(record)
    local = _compile_locals()
    frame: Any = local.get("frame")
    if not (hasattr(frame, "f_code") and hasattr(frame, "f_locals")):
        return True
    capture = _capture(str(local.get("compile_id", "")), LIMIT_TRIGGER, frame, _reasons(local))
    one_graph = bool(local.get("one_graph"))
    capture = capture._replace(limit=limit_words(limit_of(record)), limit_value=limit_of(record), fullgraph=one_graph)
    capture = capture._replace(raises=limit_raises(one_graph))
    for listener in hearing:
        listener(capture)
    return False


def _on_compile_start(args: Any) -> None:
    listeners = listening.listeners_here()
    local = _compile_locals()
    frame, reasons = local.get("frame"), _reasons(local)
    frame = frame if hasattr(frame, "f_code") and hasattr(frame, "f_locals") else None
    compile_id = str(getattr(args, "compile_id", ""))
    # with no watch listening, only the function and its inputs are kept (for the next watch to compare)
    capture = _capture(compile_id, str(getattr(args, "callback_trigger", "")), frame, reasons, bool(listeners))
    code = frame.f_code if frame is not None else None
    scope = frame.f_globals if frame is not None else None  # where Dynamo installs the compiled graph
    capture = capture._replace(
        fullgraph=bool(local.get("one_graph")), limit_value=recompile_limit(), code=code, scope=scope
    )
    key, signature = capture.function, capture.signature
    if len(_last_seen) > 4096 or len(_graphs) > 8192:
        _last_seen.clear()
        _graphs.clear()
        _owners.clear()
    if frame is not None:
        capture = capture._replace(earlier=defined_before(key))  # now: not a definition that compiles later
        _last_seen[key] = signature
        _graphs[compile_id] = (key, signature)
        _owners[compile_id] = instance_of(frame.f_code, frame.f_locals)
    for listener in listeners:
        listener(capture)  # may raise: Dynamo then refuses this compile (see no_recompiles)
    if listeners:  # after them: a compile refused here never starts, so never ends
        dynamo_pins.compile_started(compile_id)


TORCH_FUNC = "torch.func"  # the caller named for a function compiled through torch.func's transforms (vmap, grad)


def _capture(compile_id: str, trigger: str, frame: Any, reasons: tuple[str, ...], heard: bool = True) -> Capture:
    """One compile as the listeners hear it: the function, its inputs, every failed guard, the caller
    (``heard=False``: nobody listens, so the guard re-check and the caller are skipped). A failure to read
    the frame never fails the user's compile (raised here, Dynamo would): it is still counted, unnamed."""
    try:
        return _read_capture(compile_id, trigger, frame, reasons, heard)
    except Exception:
        return _read_capture(compile_id, trigger, None, reasons, heard)


def _read_capture(compile_id: str, trigger: str, frame: Any, reasons: tuple[str, ...], heard: bool) -> Capture:
    names: tuple[tuple[str, str], ...] = ()
    caller, now, pipeline = "", (), False  # type: tuple[str, tuple[tuple[str, str], ...], bool]
    if frame is not None:
        key = function_key(frame.f_code, frame.f_locals)
        signature = describe_inputs(frame.f_code, frame.f_locals)
        if heard:
            reasons = every_failure(frame, reasons) if reasons else reasons
            names, caller = user_names(frame.f_code, frame.f_locals), library_caller(sys._getframe(2))
            names += closure_names(frame, reasons) + field_names(frame.f_locals) + carried_names(frame)
            now = subjects(frame, reasons)
            signature = with_nones(signature, guarded_nones(frame, reasons))  # a None whose change made it
            pipeline = bool(caller) and in_pipeline(sys._getframe(2))
            if "/_functorch/" in frame.f_code.co_filename.replace("\\", "/"):  # vmap/grad fix each size
                caller = TORCH_FUNC
    else:  # e.g. a backward graph compiled lazily at the first backward call
        key = FunctionKey(f"<{trigger.split('.')[-1].lower() or 'compile'}>", "", 0)
        signature = ()
    return Capture(
        compile_id,
        key,
        signature,
        reasons[0] if reasons else None,
        time.perf_counter(),
        trigger,
        _last_seen.get(key) if reasons and trigger != LIMIT_TRIGGER else None,  # no reason: no graph held yet
        reasons,
        _graphs_of(reasons),
        automatic_dynamic_off(),
        resets,
        names,
        caller,
        pipeline=pipeline,
        subjects=now,
        flags=tuple((renamed(n, names), v) for n, v in flag_inputs(frame.f_code, frame.f_locals)) if frame else (),
        compared=compared(key, instance_of(frame.f_code, frame.f_locals), reasons, _graphs, _owners)
        if frame is not None and heard
        else (),
        all_dynamic=dynamic_from_the_start(),
        hooks=module_hooks(frame.f_code, frame.f_locals) if frame is not None and heard else (),
        callers=stack_place.callers(sys._getframe(2)) if frame is not None and heard else (),
        passed=passed_in(frame.f_locals, sys._getframe(2)) if frame is not None and heard else (),
        rewritten=rewritten(frame, reasons) if frame is not None and heard and reasons else (),
    )


def _compile_locals() -> dict[str, Any]:
    """The locals of Dynamo's ``convert_frame._compile`` on this thread's stack ({} when not found)."""
    f: Any = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "_compile" and f.f_code.co_filename.endswith("convert_frame.py"):
            return f.f_locals
        f = f.f_back
    return {}


def _reasons(local: dict[str, Any]) -> tuple[str, ...]:
    reasons = local.get("reasons")
    if not isinstance(reasons, list):  # another torch: the first reason only
        reasons = [local["recompile_reason"]] if local.get("recompile_reason") else []
    return tuple(str(r) for r in reasons)


def _graphs_of(reasons: tuple[str, ...]) -> tuple[tuple[str, Signature], ...]:
    """(compile id, inputs) of the graphs Dynamo checked, where this process saw them compile."""
    ids = [r.split(":", 1)[0] for r in reasons]
    return tuple((i, _graphs[i][1]) for i in ids if i in _graphs)


def defined_before(key: FunctionKey) -> FunctionKey | None:
    """The latest other definition of a function by the same name seen compiling (a re-run notebook cell
    defines it anew: a new code object in another cell file)."""
    return next((k for k in reversed(list(_last_seen)) if k.name == key.name and k.filename != key.filename), None)


def function_of(compile_id: str) -> FunctionKey | None:
    """The function a compile id's frame belongs to (a recompile-limit record names none)."""
    frame = compile_id.split("/")[0]
    return next((k for i, (k, _) in reversed(list(_graphs.items())) if i.split("/")[0] == frame), None)


# ---- compilation records -------------------------------------------------------------------------

_utils: Any = None  # torch._dynamo.utils, once imported (newest_record runs per session forward)


def newest_record() -> Any:
    global _utils
    if _utils is None:
        import torch._dynamo.utils as dynamo_utils

        _utils = dynamo_utils
    deque = getattr(_utils, "_compilation_metrics", None)
    return deque[-1] if deque else None


def records_since(last: Any) -> list[Any]:
    """Records appended after ``last``; the deque is bounded, so match by identity, not length."""
    import torch._dynamo.utils as dynamo_utils

    after = dynamo_utils.get_compilation_metrics()
    for i in range(len(after) - 1, -1, -1):
        if after[i] is last:
            return list(after[i + 1 :])
    return list(after)  # the old records were pushed out: everything is new


def take_record(records: list[Any], *, backward: bool) -> Any:
    """Dynamo's record for a compile: the frame's own, or (``backward``) the lazy backward's; same id."""
    for r in records:
        if (getattr(r, "is_forward", True) is False) == backward:
            records.remove(r)
            return r
    return None


def record_function(record: Any) -> FunctionKey | None:
    name = getattr(record, "co_name", None)
    if not name:
        return function_of(str(getattr(record, "compile_id", "")))
    return FunctionKey(str(name), str(record.co_filename or ""), int(record.co_firstlineno or 0))
