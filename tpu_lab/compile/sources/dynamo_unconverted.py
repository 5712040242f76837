"""A compiled function Dynamo would not start compiling at all (a generator, a coroutine: "Attempt to trace
generator"). It leaves no compilation record and calls no callback, and from then on the function runs
eagerly on every call. Its only trace is Dynamo's soft-failure log, ``WON'T CONVERT f train.py line 5`` with
the error attached (INFO, on ``torch._dynamo.convert_frame``). That log is switched on at the first watch
and left on; a filter on the logger itself hears it while a watch listens and passes on only what the
user's own logging asks for (nothing new is printed). What Dynamo gave up on inside a compile has a record
of its own and is not heard here. Part of the Dynamo source seam."""

from __future__ import annotations

import functools
import logging
import sys
import threading
import traceback
from typing import Any, NamedTuple

LOGGER = "torch._dynamo.convert_frame"
_WONT = "WON'T CONVERT "
TRIGGER = "unconverted"
"""A Capture's trigger for a function Dynamo would not start compiling (its record: ``record_of``)."""


class Unconverted(NamedTuple):
    """What Dynamo's compilation record would say, had it made one."""

    compile_id: str
    fail_type: str
    fail_reason: str
    fail_user_frame_filename: str
    fail_user_frame_lineno: int
    co_name: str
    co_filename: str
    co_firstlineno: int
    has_guarded_code: bool = False
    logged_as_break: bool = False
    """Dynamo logs no graph break for it (TORCH_LOGS=graph_breaks is silent)."""
    reached_from: tuple[str, int] = ("", 0)
    """The user's own line running when Dynamo met it (library code called from there, eagerly)."""


_lock = threading.Lock()
_switched = False  # ours switched the log on (once, at the first watch: never per entry, which would cost per call)
_records: dict[str, Unconverted] = {}  # bounded: the newest _KEEP
_KEEP = 256
_count = 0


def listen() -> None:
    """A watch opened: switch the log on (INFO) if it is off. Left on after: setting a logger's level clears
    every logger's cache, which a watch entered per call (a decorated function) would pay on each call."""
    global _switched
    log = _logger()
    if log.isEnabledFor(logging.INFO):  # on (ours, or the user's own): cached by logging, cheap per entry
        return
    with _lock:
        log.setLevel(logging.INFO)
        _switched = True


@functools.cache
def _logger() -> logging.Logger:
    return logging.getLogger(LOGGER)


def passes(record: logging.LogRecord) -> bool:
    """Whether the user's own logging asked for ``record``: with ours switched on, what the parent logger
    (``torch._dynamo``, where TORCH_LOGS and set_logs set the level) lets through; else everything."""
    log = _logger()
    if not _switched or log.level != logging.INFO or log.parent is None:  # the user set this logger's own level
        return True
    return record.levelno >= log.parent.getEffectiveLevel()


def heard(record: logging.LogRecord) -> tuple[Any, Unconverted] | None:
    """(the frame Dynamo would not convert, its stand-in record) where ``record`` is Dynamo's soft failure
    raised before any compile started; None for anything else."""
    error = record.exc_info[1] if record.exc_info else None
    if error is None or not str(record.msg).startswith(_WONT) or _inside_a_compile(error):
        return None
    frame = _converting_frame()
    if frame is None:
        return None
    code = frame.f_code
    global _count
    with _lock:
        _count += 1
        made = Unconverted(
            f"{TRIGGER}/{_count}",
            type(error).__name__,
            str(error),
            code.co_filename,
            code.co_firstlineno,
            code.co_name,
            code.co_filename,
            code.co_firstlineno,
            reached_from=_users_line(),
        )
        _records[made.compile_id] = made
        while len(_records) > _KEEP:
            _records.pop(next(iter(_records)))
    return frame, made


def record_of(compile_id: str) -> Unconverted | None:
    return _records.get(compile_id)


def _inside_a_compile(error: BaseException) -> bool:
    """Raised inside Dynamo's ``_compile``: that compile has a record of its own (a failed compile)."""
    return any(
        f.name == "_compile" and f.filename.endswith("convert_frame.py")
        for f in traceback.extract_tb(error.__traceback__)
    )


def _users_line() -> tuple[str, int]:
    """(file, line) of the innermost frame of the user's own code on this thread's stack."""
    from tpu_lab.compile.sources.packages import is_library

    f: Any = sys._getframe(2)
    while f is not None and is_library(f.f_code.co_filename):
        f = f.f_back
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("", 0)


def _converting_frame() -> Any:
    """The user's frame Dynamo was converting: the ``frame`` of its converter on this thread's stack."""
    f: Any = sys._getframe(2)
    while f is not None:
        frame = f.f_locals.get("frame") if f.f_code.co_filename.endswith("convert_frame.py") else None
        if hasattr(frame, "f_code") and hasattr(frame, "f_locals"):
            return frame
        f = f.f_back
    return None
