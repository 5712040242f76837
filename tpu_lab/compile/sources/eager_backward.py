"""Whether AOTAutograd compiled a graph's backward together with its forward: it does so at once where the
forward saves sizes for the backward (a graph with dynamic sizes), inside the forward's compile, and Dynamo
then keeps no record of that backward and calls no callback for it. The compiled forward Dynamo installs
(``__compiled_fn_*``, in the compiled frame's globals) reaches AOTAutograd's autograd.Function, whose
``compiled_bw`` is set only then. Part of the Dynamo source seam: read per compile, bounded, and where
anything differs (another torch, another backend) it claims nothing."""

from __future__ import annotations

import types
from typing import Any

from tpu_lab.compile.sources.dynamo_dynamic import cache_entry

_MAX_OBJECTS = 400  # objects looked at per compiled forward: the autograd.Function sits a few closures deep


def compiled_with_forward(code: Any, compile_id: str, scope: Any) -> bool:
    """AOTAutograd compiled the backward of graph ``compile_id`` of ``code`` together with it (``scope``: the
    compiled frame's globals)."""
    entry = cache_entry(code, compile_id)
    names = [n for n in getattr(getattr(entry, "code", None), "co_names", ()) if n.startswith("__compiled_fn")]
    try:
        return isinstance(scope, dict) and any(_has_backward(scope.get(n)) for n in names)
    except Exception:  # an object that cannot be looked into (a proxy raising on attribute access): no claim
        return False


def _has_backward(compiled: Any) -> bool:
    """A class among the objects ``compiled`` holds (closures, bound methods' owners, attributes) whose own
    ``compiled_bw`` is set: AOTAutograd's autograd.Function, its backward compiled already."""
    seen: set[int] = set()
    todo = [compiled]
    while todo and len(seen) < _MAX_OBJECTS:
        obj = todo.pop(0)
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):
            if obj.__dict__.get("compiled_bw") is not None:
                return True
            continue
        if isinstance(obj, types.FunctionType):
            todo += [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        elif isinstance(obj, (types.MethodType, types.BuiltinMethodType)):  # Function.apply is a C classmethod
            todo.append(obj.__self__)
        elif callable(obj) and isinstance(getattr(obj, "__dict__", None), dict):  # a wrapper object
            todo += [v for v in obj.__dict__.values() if callable(v)]
    return False


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True
