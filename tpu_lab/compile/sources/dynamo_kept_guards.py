"""A graph's guards, read just before Dynamo deletes them. Dynamo deletes a graph's guards once an object they
hold by weak reference is freed (an optimizer or a model local to a training function that has returned), and
a watch reads a graph's guards at the next compile or when its table is read: the last graph of a training
function is gone by then. So, while a watch is open, Dynamo's own invalidation is wrapped and reads the
guards first. A cost per freed object a graph held, never per call."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tpu_lab.compile.sources import listening

_KEEP = 256  # graphs kept at most: the newest ones
_lock = threading.Lock()
_kept: OrderedDict[int, tuple[Any, list[str]]] = OrderedDict()


def install(read: Callable[[Any], list[str]]) -> None:
    """Keep each graph's guards, as ``read`` gives them from a guard tree's root, before Dynamo deletes them
    while a watch is open (once per process; a torch without this hook keeps nothing)."""
    try:
        from torch._dynamo.guards import CheckFunctionManager
    except ImportError:  # another torch: nothing kept, the reads fall back to their own no-claim
        return
    invalidate = getattr(CheckFunctionManager, "invalidate", None)
    if invalidate is None or getattr(invalidate, "_tpu_lab", False):
        return

    def read_then_invalidate(self: Any, *args: Any, **kwargs: Any) -> Any:
        manager = getattr(self, "guard_manager", None)
        parts = None
        if getattr(manager, "cache_entry", None) is not None and listening.any_open() and not _deleted(manager):
            try:
                parts = read(getattr(manager, "root", None))
            except Exception:  # another torch's guard tree: nothing kept
                parts = None
        out = invalidate(self, *args, **kwargs)
        deleted = getattr(self, "guard_manager", None)  # the stand-in the graph's cache entry now holds
        if parts is not None and _deleted(deleted):
            with _lock:
                _kept[id(deleted)] = (deleted, parts)  # the stand-in kept alive: its id stays its own
                while len(_kept) > _KEEP:
                    _kept.popitem(last=False)
        return out

    # a finalizer runs wherever the object dies, inside a compiled call too: never traced itself
    wrapped = listening.outside_dynamo(read_then_invalidate)
    wrapped._tpu_lab = True  # type: ignore[attr-defined]
    CheckFunctionManager.invalidate = wrapped  # type: ignore[method-assign]


def kept(manager: Any) -> list[str] | None:
    """The guards read before Dynamo deleted them, by the stand-in it put in the graph's cache entry."""
    with _lock:
        found = _kept.get(id(manager))
    return found[1] if found is not None and found[0] is manager else None


def forget() -> None:
    """After torch._dynamo.reset(): every graph is gone."""
    with _lock:
        _kept.clear()


def _deleted(manager: Any) -> bool:
    return "Deleted" in type(manager).__name__  # DeletedGuardManagerWrapper
