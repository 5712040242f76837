"""The hook into Dynamo: what is being compiled, with which inputs, in which thread.

Dynamo calls a start callback (``torch._dynamo.callback``) before every compile. There we read the frame
being compiled from the call stack (``convert_frame``'s ``frame`` argument: the user's function and its
live arguments) and Dynamo's recompile reason (a local of ``_compile``, computed just before), describe
the inputs (shapes, dtypes, requires_grad, the Python scalars), and hand a ``Capture`` to every
listener of this thread: the watches and ``no_recompiles`` guards open in it. A listener may raise to
refuse the compile. Nothing here runs on a warm call: only when Dynamo compiles.

This reads Dynamo internals by name (checked on torch 2.11-2.15); when they are not found a compile is
still counted, with its inputs unknown.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

MAX_ENTRIES = 12  # inputs described per signature; the rest are summarised
_SHORT_DTYPES = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
}


class FunctionKey(NamedTuple):
    """A compiled function: its name and where it is defined."""

    name: str
    filename: str
    line: int

    def __str__(self) -> str:
        where = f"{self.filename.rsplit('/', 1)[-1]}:{self.line}" if self.filename else "?"
        prefix = "torch_dynamo_resume_in_"
        if self.name.startswith(prefix):  # the part of fn after a graph break, as Dynamo names it
            fn, _, line = self.name[len(prefix) :].rpartition("_at_")
            return f"{fn} after the graph break at line {line} ({where})"
        return f"{self.name} ({where})"


class Capture(NamedTuple):
    """One compile Dynamo started, as seen from the start callback."""

    compile_id: str
    """Dynamo's id (``"frame/attempt"``), the key of its compilation metrics record."""
    function: FunctionKey
    signature: tuple[tuple[str, str], ...]
    """(input name, description) pairs, e.g. ``(("x", "f32[4, 3]"), ("n", "int 2"))``."""
    reason: str | None
    """Dynamo's recompile reason (the first guard that failed), None for a first compile."""
    at: float
    """time.perf_counter() when the compile started."""
    trigger: str
    previous: tuple[tuple[str, str], ...] | None = None
    """The inputs this function last compiled for (None: not seen compiling before)."""


Listener = Callable[[Capture], None]
_lock = threading.Lock()
_listeners: dict[int, list[Listener]] = {}  # thread id -> listeners, innermost last
_last_seen: dict[FunctionKey, tuple[tuple[str, str], ...]] = {}  # bounded: one entry per compiled function


def add_listener(listener: Listener) -> None:
    """Hear about every compile that starts in this thread until ``remove_listener``."""
    from torch._dynamo.callback import callback_handler

    with _lock:
        _listeners.setdefault(threading.get_ident(), []).append(listener)
        # torch._dynamo.reset() clears every callback: install again whenever ours is gone, and forget
        # inputs recorded before (compiles since went unseen)
        if _on_compile_start not in getattr(callback_handler, "start_callbacks", ()):
            _last_seen.clear()
            callback_handler.register_start_callback(_on_compile_start)


def remove_listener(listener: Listener) -> None:
    # The callback itself stays installed: it keeps each function's last inputs current, so the next
    # watch can say what changed since (a stack walk per compile, nothing per call).
    with _lock:
        mine = _listeners.get(threading.get_ident(), [])
        if listener in mine:
            mine.remove(listener)
        if not mine:
            _listeners.pop(threading.get_ident(), None)


def _on_compile_start(args: Any) -> None:
    listeners = list(_listeners.get(threading.get_ident(), ()))
    frame, reason = _compiling_frame()
    if frame is not None:
        code = frame.f_code
        key = _function_key(code, frame.f_locals)
        signature = describe_inputs(code, frame.f_locals)
    else:  # e.g. a backward graph compiled lazily at the first backward call
        key = FunctionKey(f"<{str(getattr(args, 'callback_trigger', 'compile')).split('.')[-1].lower()}>", "", 0)
        signature = ()
    capture = Capture(
        str(getattr(args, "compile_id", "")),
        key,
        signature,
        reason,
        time.perf_counter(),
        str(getattr(args, "callback_trigger", "")),
        # no reason means Dynamo holds no graph for this code (a first compile, or after a reset)
        _last_seen.get(key) if reason else None,
    )
    if len(_last_seen) > 4096:
        _last_seen.clear()
    _last_seen[key] = signature
    for listener in listeners:
        listener(capture)  # may raise: Dynamo then refuses this compile (see no_recompiles)


def _function_key(code: Any, values: dict[str, Any]) -> FunctionKey:
    """The compiled function; a model's forward reached through a generic wrapper (transformers'
    decorators, torch.compile's own) is named after the model's class."""
    import torch

    if code.co_name in ("wrapped_func", "wrapper", "inner", "_fn", "forward"):
        first = values.get("self", values.get("fn"))  # torch.compile(module) wraps it in inner(fn, ...)
        args = values.get("args")
        if first is None and isinstance(args, tuple) and args:
            first = args[0]
        if isinstance(first, torch.nn.Module):
            fwd = getattr(inspect.unwrap(type(first).forward), "__code__", None)
            if fwd is not None:
                return FunctionKey(f"{type(first).__name__}.forward", fwd.co_filename, fwd.co_firstlineno)
    return FunctionKey(code.co_name, code.co_filename, code.co_firstlineno)


def _compiling_frame() -> tuple[Any, str | None]:
    """(the user's frame Dynamo is compiling, Dynamo's recompile reason), read from the call stack."""
    frame, reason = None, None
    f: Any = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename.endswith("convert_frame.py"):
            local = f.f_locals
            if reason is None and f.f_code.co_name == "_compile":
                reason = local.get("recompile_reason")
            candidate = local.get("frame")
            if frame is None and hasattr(candidate, "f_code") and hasattr(candidate, "f_locals"):
                frame = candidate
            if frame is not None and reason is not None:
                break
        f = f.f_back
    return frame, reason


def describe_inputs(code: Any, values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The inputs a compiled function specialises on, described: tensors by dtype, shape and
    requires_grad; Python scalars by value; modules by class and train/eval; containers one level in."""
    import torch

    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
    names = [n for n in code.co_varnames[:nargs] if not n.startswith("__")] or [
        n for n in values if not n.startswith("__")
    ]
    out: list[tuple[str, str]] = []
    for name in names:
        if name not in values:
            continue
        value = values[name]
        if value is None or isinstance(value, bool):
            continue  # flags: shown by Dynamo's guard text when they are what changed; kept out of the table
        if isinstance(value, dict):
            out += [(f"{name}[{k!r}]", describe(v)) for k, v in value.items() if _interesting(v)]
        elif isinstance(value, (list, tuple)) and value and any(_interesting(v) for v in value):
            out += [(f"{name}[{i}]", describe(v)) for i, v in enumerate(value) if _interesting(v)]
        else:
            out.append((name, describe(value)))
    if not torch.is_grad_enabled():
        out.append(("grad mode", "off"))
    return tuple(out[:MAX_ENTRIES])


def _interesting(value: Any) -> bool:
    import torch

    if isinstance(value, bool):
        return False
    return isinstance(value, (torch.Tensor, int, float, torch.nn.Module)) or hasattr(value, "layers")


def describe(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        grad = " requires_grad" if value.requires_grad else ""
        return f"{_SHORT_DTYPES.get(dtype, dtype)}[{', '.join(map(str, value.shape))}]{grad}"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, torch.nn.Module):
        return f"{type(value).__name__} ({'train' if value.training else 'eval'})"
    layers = getattr(value, "layers", None)
    if layers:  # a transformers cache: its length is what a static cache specialises on
        return f"{type(value).__name__} len={getattr(layers[0], 'max_cache_len', '?')}"
    return type(value).__name__
