"""The NumPy scalars the compiled modules hold as settings (``module.p = schedule[it]``, an ``np.float64``),
read from the submodules the graphs saw (``Capture.hooks``' weak references) where a break in torch's code
read a number back: Dynamo traces such a scalar as a tensor, so the break is what the user's setting made."""

from __future__ import annotations

import linecache
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.causes.numpy_values import (
    READ_BACK,
    global_array_read_back,
    numpy_inputs_read_back,
    numpy_read_back,
)
from tpu_lab.compile.sources.frames import Capture
from tpu_lab.compile.sources.packages import unshortened


def with_numpy_setting(
    cause: Cause,
    library: str,
    hooks: Mapping[Any, Sequence[Any]],
    pending: Iterable[Capture] = (),
    at: tuple[str, str] = ("", ""),
) -> Cause:
    """``cause`` of a break at ``library`` (torch's file:line) where that line reads a NumPy setting of one of
    the compiled modules (``hooks``: each function's graphs' submodule snapshots; ``pending``: captures not
    folded yet, with theirs and their inputs, NumPy scalars read back where the break is), said so; else as it is."""
    if READ_BACK not in cause.words:
        return cause
    pending = list(pending)
    if arrays := _global_arrays(*at):  # NVEC.tolist() on a module's NumPy constant: read back from a tensor
        return global_array_read_back(cause, arrays)
    said = numpy_inputs_read_back(cause, [s for c in pending for s in c.shown])  # inputs in hand: CutMix's np.int64
    if said is not cause or not library:
        return said
    file, _, line = library.rpartition(":")
    code = linecache.getline(unshortened(file), int(line)) if line.isdigit() else ""
    return (
        numpy_read_back(
            cause, code, numpy_settings([*(s[-1] for s in hooks.values() if s), *(c.hooks for c in pending)])
        )
        if code
        else cause
    )


_MOST = 4096  # attributes looked at, at most: a break's words, never a walk of a huge model


def numpy_settings(snapshots: Iterable[Sequence[tuple[str, Any, tuple[int, ...]]]]) -> dict[str, tuple[str, str]]:
    """attribute -> (where it is, ``an np.float64``) for every NumPy scalar a live submodule of
    the compiled modules holds in its own ``__dict__`` (``self.blocks[0].drop``); empty where NumPy is not imported."""
    np = sys.modules.get("numpy")
    if np is None:
        return {}
    found: dict[str, tuple[str, str]] = {}
    seen = 0
    for snapshot in snapshots:
        for name, ref, _ in snapshot:
            module = ref()
            for attr, value in list(vars(module).items()) if module is not None else ():
                seen += 1
                if isinstance(value, np.generic) and not attr.startswith("_"):
                    path = "self" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in name.split("."))
                    found.setdefault(attr, (f"{path}.{attr}", f"an np.{type(value).__name__}"))
            if seen > _MOST:
                return found
    return found


def _global_arrays(file: str, code: str) -> list[str]:
    """Names on the user's line (``code``, in ``file``) that the file's module holds as NumPy arrays at module
    level (CleanRL's ``NVEC = envs.action_space.nvec``), where a method on them reads values back."""
    np = sys.modules.get("numpy")
    called = set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\.(?:tolist|item|sum|max|min)\(", code)) if file else set()
    if np is None or not called:
        return []
    module = next((m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == file), None)
    if module is None and ("ipykernel" in file or file.startswith("<")):  # a notebook cell: the kernel's globals
        module = sys.modules.get("__main__")
    held = vars(module) if module is not None else {}
    return [n for n in sorted(called) if isinstance(held.get(n), np.ndarray)]
