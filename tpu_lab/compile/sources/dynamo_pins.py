"""Where Dynamo fixed a size it traced symbolic to one value, and the user's line that did it: the shape
environment logs each such fix (``set_replacement s27 = 32``) and keeps the user's stack for it
(``specialization_stacks``), so a pinned size is named by the line Dynamo saw fix it (``torch.linspace(0, 1,
n)``, a broadcast against a tensor of fixed size), not guessed from the source.

That log is INFO: it is switched on only from the start to the end of a compile a watch listens to (so no
other compile pays for the stacks it keeps), and a filter on the logger itself passes on only what the user's
own logging asked for. Part of the Dynamo source seam: a torch whose log or stacks differ gives no pins,
never a guess."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tpu_lab.compile.sources.listening import outside_dynamo
from tpu_lab.compile.sources.packages import USER, package_of, short_path

_LOGGER = "torch.fx.experimental.symbolic_shapes"
_SET = "set_replacement %s = %s (%s) %s"  # the shape environment's own message, args: symbol, value, why, range
_MAX = 256  # compiles whose pins are kept


class Pin(NamedTuple):
    """One size Dynamo fixed to a value during a compile."""

    source: str
    """Dynamo's name for it: ``L['x'].size()[1]``."""
    value: str
    file: str
    line: int
    code: str
    """The line of the user's own code where it was fixed (the innermost such frame; else the innermost)."""
    inside: str = ""
    """Where torch's own code under that line fixed it (``nn/modules/linear.py:134``), if not the user's."""
    refined: bool = False
    """Fixed by no one line: the conditions Dynamo met on the size left one value (range_refined_to_singleton)."""


_pins: dict[str, list[Pin]] = {}
_open: list[tuple[str, int]] = []  # compiles listened to now: (compile id, the logger's level before)
_passed = [logging.NOTSET]  # the lowest level the user's own logging lets through while ours is on


def compile_started(compile_id: str) -> None:
    """A compile a watch listens to starts: hear its size fixes until ``compile_ended``."""
    log = logging.getLogger(_LOGGER)
    if not any(getattr(f, "_tpu_lab", False) for f in log.filters):
        log.addFilter(_Heard())
    if not _open:
        _passed[0] = log.getEffectiveLevel()
    _open.append((compile_id, log.level))
    if not log.isEnabledFor(logging.INFO):
        log.setLevel(logging.INFO)


def compile_ended(args: Any) -> None:
    """Dynamo's compile-end callback: the compile ``compile_started`` heard is over."""
    if not _open or _open[-1][0] != str(getattr(args, "compile_id", "")):
        return
    _, level = _open.pop()
    if not _open:
        logging.getLogger(_LOGGER).setLevel(level)
        _passed[0] = logging.NOTSET


def pins_of(compile_id: str) -> tuple[Pin, ...]:
    """The sizes compile ``compile_id`` fixed to one value, where a watch heard it."""
    return tuple(_pins.get(compile_id, ()))


def forget() -> None:
    """torch._dynamo.reset(): compile ids start again."""
    _pins.clear()


class _Heard(logging.Filter):
    """On the logger itself: keeps the pins it hears, and passes on only records at or above the level the
    user's logging had before ours was switched on (nothing new is printed)."""

    _tpu_lab = True

    def filter(self, record: logging.LogRecord) -> bool:
        if _open and record.msg == _SET:
            try:
                _heard()(_open[-1][0], record.args)
            except Exception:  # another torch's shape environment: no pin, the compile goes on
                pass
        return not _open or record.levelno >= _passed[0]


@functools.cache
def _heard() -> Callable[[str, Any], None]:
    return outside_dynamo(_hear)


def _hear(compile_id: str, args: Any) -> None:
    from torch._guards import TracingContext

    symbol, value, why = args[0], args[1], str(args[2]) if len(args) > 2 else ""
    if not getattr(value, "is_number", False):  # one symbol replaced by another: still symbolic
        return
    tracing = TracingContext.try_get()
    env = getattr(getattr(tracing, "fake_mode", None), "shape_env", None)
    if env is None:
        return
    for source in env.var_to_sources.get(symbol, []):
        stack = [(f.filename, int(f.lineno or 0), f.line or "") for f in env.specialization_stacks.get(source) or ()]
        name = source.name() if callable(source.name) else source.name  # a method in older torch
        pin = pin_at(str(name), str(value), stack)
        if pin is None and why == "range_refined_to_singleton":  # bounds met from both sides, no line of its own
            pin = Pin(str(name), str(value), "", 0, "", refined=True)
        if pin is None:
            continue
        if len(_pins) >= _MAX and compile_id not in _pins:
            _pins.pop(next(iter(_pins)))
        _pins.setdefault(compile_id, []).append(pin)


def pin_at(source: str, value: str, stack: Sequence[tuple[str, int, str]]) -> Pin | None:
    """The pin of ``source`` fixed to ``value`` where the user's stack (file, line, code) fixed it: at its
    innermost frame in the user's own code, else its innermost (a library's line); None with no stack."""
    if not stack:
        return None
    file, line, code = next((f for f in reversed(stack) if package_of(f[0]) == USER), stack[-1])
    inner = stack[-1]
    inside = f"{short_path(inner[0])}:{inner[1]}" if package_of(inner[0]) == "torch" and inner[0] != file else ""
    return Pin(source, value, file, line, code.strip(), inside)
