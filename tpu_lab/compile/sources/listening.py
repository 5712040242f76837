"""Who hears a compile: each listener (a watch, ``no_recompiles``) is scoped to the code that opened it.

Opened in an ordinary function or a notebook cell, a listener hears its thread, as before. Opened in a
generator or a coroutine, it hears only while that generator or coroutine runs: a generator suspended
inside ``tl.no_recompiles()`` does not refuse its caller's compiles, and a watch open across an
``await`` does not count what another task compiles meanwhile. A ``@contextmanager`` around a watch is
looked through: its caller's code is the scope. Checked per compile (a walk up the stack), never per call.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

from tpu_lab.errors import InvalidArgument

_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_OURS = str(Path(__file__).resolve().parents[2]) + "/"  # the installed tpu_lab package folder
_CONTEXTLIB = contextlib.__file__


_F = TypeVar("_F", bound=Callable[..., Any])


def outside_dynamo(fn: _F) -> _F:
    """``fn`` run with Dynamo's frame hook off. Ours run during compiles (callbacks, log filters), and a
    compile that eager code starts (AOTAutograd's lazy backward, inside a frame Dynamo skipped) runs them with
    the hook still on: a frame of ours caught there would be compiled, re-entering Dynamo's callback lock (a
    deadlock, not an error)."""
    import torch

    return cast(_F, torch._dynamo.disable(fn, recursive=True))


class Scope(NamedTuple):
    listener: Callable[..., None]
    thread: int
    frame: Any
    """The generator's or coroutine's frame that opened it (heard only while it runs); None: the thread."""


_lock = threading.Lock()
_scopes: list[Scope] = []  # innermost last


def open_scope(listener: Callable[..., None]) -> Scope:
    """Start hearing compiles for ``listener``, scoped to the user's code calling this (see the module)."""
    scope = Scope(listener, threading.get_ident(), _suspendable_opener(sys._getframe(1)))
    with _lock:
        _scopes.append(scope)
    return scope


def close_scope(scope: Scope) -> None:
    with _lock:
        for i in range(len(_scopes) - 1, -1, -1):
            if _scopes[i] is scope:
                del _scopes[i]
                return


def any_open() -> bool:
    """Whether any listener is open, in any thread."""
    with _lock:
        return bool(_scopes)


def listeners_here() -> list[Callable[..., None]]:
    """The listeners whose scope the running code is in, outermost first, each once."""
    with _lock:
        scopes = list(_scopes)
    if not scopes:
        return []
    running = _running_frames() if any(s.frame is not None for s in scopes) else set()
    return list(dict.fromkeys(s.listener for s in scopes if _is_here(s, running)))


def innermost_here(scopes: list[Scope], what: str, usage: str) -> Scope:
    """Of ``scopes`` (one listener's, oldest first), the one the running code is in, else the newest.
    None open: a clear error (``what`` was exited without being entered; ``usage`` is the fix)."""
    if not scopes:
        raise InvalidArgument(f"{what} was exited without being entered (or exited once too often).", fix=usage)
    if len(scopes) == 1:
        return scopes[0]  # the common case, and a decorated function's every call: no stack walk
    running = _running_frames()
    return next((s for s in reversed(scopes) if _is_here(s, running)), scopes[-1])


def _is_here(scope: Scope, running: set[int]) -> bool:
    if scope.frame is None:
        return scope.thread == threading.get_ident()
    return id(scope.frame) in running


def _running_frames() -> set[int]:
    out: set[int] = set()
    frame: Any = sys._getframe(1)
    while frame is not None:
        out.add(id(frame))
        frame = frame.f_back
    return out


def _suspendable_opener(frame: Any) -> Any:
    """The user's generator or coroutine frame that opened the scope, or None for ordinary code."""
    while frame is not None:
        path = frame.f_code.co_filename
        through_contextlib = frame.f_back is not None and frame.f_back.f_code.co_filename == _CONTEXTLIB
        if path.startswith(_OURS) or path == _CONTEXTLIB:
            frame = frame.f_back  # tpu_lab's own wrappers (a panel, the decorator) and contextlib's
        elif frame.f_code.co_flags & _SUSPENDABLE and through_contextlib:
            frame = frame.f_back  # the body of a @contextmanager: its caller's code is the scope
        else:
            return frame if frame.f_code.co_flags & _SUSPENDABLE else None
    return None
