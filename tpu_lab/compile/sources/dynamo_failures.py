"""Why a compile Dynamo gave up on failed, as its exception says it: the user's whole stack down to the
failure (the compilation record keeps only the innermost frame, often Dynamo's polyfill or torch's own
code) and the chain of errors behind it (a "graph break in loop" record drops the break that caused it).
Heard from Dynamo's compile-end callback while the exception is in flight; read per failure, never per call.
Part of the Dynamo source seam."""

from __future__ import annotations

import sys
import traceback
from typing import Any, NamedTuple

from tpu_lab.compile.sources import stack_place

_MAX = 256  # failures kept (oldest dropped): a watch reads its own right after the call


class FailureTrace(NamedTuple):
    stack: tuple[Any, ...]
    """Dynamo's ``real_stack`` of the failure: ``traceback.FrameSummary``s, outermost first."""
    chain: tuple[str, ...]
    """The error's text, then each error it was raised from (``__cause__`` / ``__context__``)."""
    operator: str = ""
    """The higher-order operator whose own code the innermost error passed through (``cond.py:358 in
    backward``: torch.cond's backward), where one did; a backend's failure names no other place."""
    value_sized: tuple[str, int, str] = ("", 0, "")
    """A backend that failed on an op whose output size depends on values (``aten.nonzero``): the user's
    ``(file, line, what)`` in the graph it was given that makes the op (``what``: "a boolean-mask assignment")."""


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
    sized = value_sized_in(error)
    _failures[str(getattr(args, "compile_id", ""))] = FailureTrace(stack, tuple(chain), operator, sized)


def value_sized_in(error: BaseException | None) -> tuple[str, int, str]:
    """Where a backend's DynamicOutputShapeException behind ``error`` comes from: the backend names only the
    aten op, and the user's line is in the graph Dynamo handed it (a frame's ``gm``), on the first node that
    makes that op. Read while the error is in flight (a failed compile's end, the graph break it logs)."""
    errors: list[BaseException] = []
    while error is not None and len(errors) < 8:
        errors.append(error)
        error = error.__cause__ or error.__context__
    if not errors or type(errors[-1]).__name__ != "DynamicOutputShapeException":
        return "", 0, ""
    op = str(errors[-1]).split(".")[1] if str(errors[-1]).startswith("aten.") else ""
    graph = _graph_handed(errors[0])
    for node in graph.graph.nodes if graph is not None and op else ():
        name = str(getattr(node.target, "__name__", node.target)).strip("_")
        if op == "nonzero" and name in ("setitem", "getitem", "index_put", "index_put_") and _bool_index(node):
            what = "a boolean-mask index" if name == "getitem" else "a boolean-mask assignment"
        elif op in name:
            what = f"{name}()"
        else:
            continue
        if lines := stack_place.user_lines(str(node.meta.get("stack_trace") or "")):
            return (*lines[-1], what)
    return "", 0, ""


def _graph_handed(error: BaseException) -> Any:
    """The FX graph Dynamo passed to the backend: ``gm`` in Dynamo's own frame that called it."""
    import torch.fx

    tb = error.__traceback__
    while tb is not None:
        graph = tb.tb_frame.f_locals.get("gm") if stack_place.dynamo_own(tb.tb_frame.f_code.co_filename) else None
        if isinstance(graph, torch.fx.GraphModule):
            return graph
        tb = tb.tb_next
    return None


def _bool_index(node: Any) -> bool:
    """A node indexed by a boolean tensor (``t[mask]``, ``t[:, mask] = v``): its index lowers to aten.nonzero."""
    import torch

    index = node.args[1] if len(node.args) > 1 else None
    for part in index if isinstance(index, (tuple, list)) else (index,):
        value = part.meta.get("example_value") if hasattr(part, "meta") else None
        if isinstance(value, torch.Tensor) and value.dtype in (torch.bool, torch.uint8):
            return True
    return False


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
