"""Why a compile Dynamo gave up on failed, as its exception says it: the user's whole stack down to the
failure (the compilation record keeps only the innermost frame, often Dynamo's polyfill or torch's own
code) and the chain of errors behind it (a "graph break in loop" record drops the break that caused it).
Heard from Dynamo's compile-end callback while the exception is in flight; read per failure, never per call.
Part of the Dynamo source seam."""

from __future__ import annotations

import sys
import traceback
from typing import Any, NamedTuple

_MAX = 256  # failures kept (oldest dropped): a watch reads its own right after the call


class FailureTrace(NamedTuple):
    stack: tuple[Any, ...]
    """Dynamo's ``real_stack`` of the failure: ``traceback.FrameSummary``s, outermost first."""
    chain: tuple[str, ...]
    """The error's text, then each error it was raised from (``__cause__`` / ``__context__``)."""
    operator: str = ""
    """The higher-order operator whose own code the innermost error passed through (``cond.py:358 in
    backward``: torch.cond's backward), where one did; a backend's failure names no other place."""


_failures: dict[str, FailureTrace] = {}


def on_compile_end(args: Any) -> None:
    """Dynamo's compile-end callback: runs inside its ``finally``, so a failed compile's error is in flight."""
    error = sys.exc_info()[1]
    if error is None:
        return
    chain: list[str] = []
    stack: tuple[Any, ...] = ()
    seen: BaseException | None = error
    operator = ""
    while seen is not None and len(chain) < 8:
        chain.append(str(seen)[:4000])
        stack = stack or tuple(getattr(seen, "real_stack", None) or ())
        operator = _operator(seen) or operator  # the innermost error's
        seen = seen.__cause__ or seen.__context__
    if len(_failures) >= _MAX:
        _failures.pop(next(iter(_failures)))
    _failures[str(getattr(args, "compile_id", ""))] = FailureTrace(stack, tuple(chain), operator)


_OPERATORS = "/torch/_higher_order_ops/"


def _operator(error: BaseException) -> str:
    """The first frame of a higher-order operator's own module (not its shared utils) in ``error``'s traceback:
    where the operator's work began (its ``backward``), not a helper nested in it."""
    for f in traceback.extract_tb(error.__traceback__):
        path = f.filename.replace("\\", "/")
        if _OPERATORS in path and not path.endswith("/utils.py"):
            return f"{path.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}"
    return ""


def failure_of(compile_id: str) -> FailureTrace | None:
    """The failure of compile ``compile_id`` ("frame/attempt"), where this process heard it."""
    return _failures.get(compile_id)


def forget() -> None:
    """torch._dynamo.reset(): compile ids start again."""
    _failures.clear()
