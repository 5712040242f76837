"""The compiler's stance (``torch.compiler.set_stance``), heard as it changes. Under ``"eager_on_recompile"`` a
call that needs a new graph runs eagerly, under ``"fail_on_recompile"`` it raises, and under ``"force_eager"``
nothing compiles; Dynamo keeps no record and calls no callback for any of them. So a watch says which stance
was in force and where the user's code set it. Heard by wrapping Dynamo's own setter, which every form of
set_stance goes through (a call, a decorator, a with-block): a cost per set_stance, never per call."""

from __future__ import annotations

import sys
import threading
from typing import Any, NamedTuple

from tpu_lab.compile.sources.frames import where_label
from tpu_lab.compile.sources.packages import is_library

DEFAULT = "default"


class StanceSet(NamedTuple):
    stance: str
    """The stance set (``eager_on_recompile``), or ``default`` with another backend forced."""
    where: str
    """The user's line that set it (``train.py:30``); "" where it was in force before the watch opened."""
    thread: int
    backend: str = ""
    """``force_backend=``'s backend, named."""


_lock = threading.Lock()
_heard: list[StanceSet] = []  # bounded: the newest _KEEP
_KEEP = 256
_count = 0  # every stance ever heard: a watch's mark into _heard


def current() -> StanceSet | None:
    """The stance in force now, where it is not the default one (None where it is)."""
    stance = getattr(sys.modules.get("torch._dynamo.eval_frame"), "_stance", None)  # per watch entry: no import
    return _named(stance, "") if stance is not None and _unusual(stance) else None


def install() -> None:
    """Hear each stance set from now on (once per process)."""
    import torch._dynamo.decorators as decorators

    setter = decorators._set_stance
    if getattr(setter, "_tpu_lab", False):
        return

    def set_heard(stance: Any) -> Any:
        prior = setter(stance)
        global _count
        with _lock:
            _heard.append(_named(stance, _user_line(sys._getframe(1))))
            del _heard[:-_KEEP]
            _count += 1
        return prior

    set_heard._tpu_lab = True  # type: ignore[attr-defined]
    decorators._set_stance = set_heard


def mark() -> int:
    """Where the stances heard from now on start (``heard_since``)."""
    return _count


def heard_since(start: int, thread: int) -> list[StanceSet]:
    """The stances set in ``thread`` since ``mark()`` returned ``start`` (the newest _KEEP at most)."""
    with _lock:
        new = _heard[max(0, len(_heard) - (_count - start)) :]
    return [s for s in new if s.thread == thread]


def _unusual(stance: Any) -> bool:
    return getattr(stance, "stance", DEFAULT) != DEFAULT or getattr(stance, "backend", None) is not None


def _named(stance: Any, where: str) -> StanceSet:
    backend = getattr(stance, "backend", None)
    name = backend if isinstance(backend, str) or backend is None else getattr(backend, "__name__", repr(backend))
    return StanceSet(getattr(stance, "stance", DEFAULT), where, threading.get_ident(), name or "")


def _user_line(frame: Any) -> str:
    while frame is not None and is_library(frame.f_code.co_filename):  # torch's set_stance, contextlib
        frame = frame.f_back
    return where_label(frame.f_code.co_filename, frame.f_lineno) if frame is not None else ""
