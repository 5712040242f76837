"""Where on a stack a graph break or a failed compile is: the user's innermost line, the library line
below it (never Dynamo's own polyfills, which stand in for builtins), and the library function it called.
Stacks are Dynamo's ``traceback.FrameSummary`` lists; files are told apart by package location."""

from __future__ import annotations

import functools
import linecache
import os
import re
from collections.abc import Sequence
from typing import Any

from tpu_lab.compile.sources.packages import USER, package_of, short_path, torch_folder


def break_location(stack: Sequence[Any]) -> tuple[str, int, str]:
    """Where a graph break (or a failed compile) is, from its stack (``traceback.FrameSummary``s): the user's
    innermost file and line, and file:line of the break itself when that is library code, never Dynamo's
    own (its polyfills stand in for builtins the user's line calls: ``operator.index``)."""
    library = [package_of(s.filename) not in (USER, "tpu_lab") for s in stack]
    mine = [s for s, lib in zip(stack, library, strict=True) if not lib]
    below = list(stack)[list(stack).index(mine[-1]) + 1 :] if mine else list(stack)  # what the user's line called
    mine = mine or list(stack)
    if not mine:
        return "", 0, ""
    inner = next((s for s in reversed(below) if not dynamo_own(s.filename)), None)  # none: a builtin's stand-in
    # self.x = g in the user's line runs Module.__setattr__: the attribute access is the user's own, not torch's
    own = all(s.name in _ATTRIBUTE_ACCESS for s in below if not dynamo_own(s.filename))
    return (
        mine[-1].filename,
        int(mine[-1].lineno or 0),
        f"{short_path(inner.filename)}:{inner.lineno}" if library[-1] and inner is not None and not own else "",
    )


_ATTRIBUTE_ACCESS = ("__setattr__", "__getattr__", "__delattr__")  # a container's __getitem__ may do real work


def user_lines(text: str) -> list[tuple[str, int]]:
    """(file, line) of each ``File "...", line N`` in a printed stack (an FX node's ``stack_trace``, the user
    stack Dynamo attaches to an error) outside any library, outermost first: the user's own lines."""
    return [(f, int(n)) for f, n in _PRINTED_FRAME.findall(text) if package_of(f) == USER]


_PRINTED_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def called_through(stack: Sequence[Any]) -> str:
    """The library function the user's innermost line called on the way to a failure (``__getitem__``), ''
    where the failure is in the user's own code."""
    users = [i for i, s in enumerate(stack) if package_of(s.filename) in (USER, "tpu_lab")]
    return str(stack[users[-1] + 1].name) if users and users[-1] + 1 < len(stack) else ""


def callers(frame: Any, most: int = 256) -> tuple[tuple[str, int, str], ...]:
    """(file, first line, name) of ``frame`` and the frames that called it, nearest first, Dynamo's own left
    out: from Dynamo's callback, the code that called the function being compiled (its own frame has no
    ``f_back`` yet). A compiled frame runs Dynamo's rewrite of its code, which keeps these three."""
    out: list[tuple[str, int, str]] = []
    f = frame
    while f is not None and len(out) < most:
        if not dynamo_own(f.f_code.co_filename):
            out.append((f.f_code.co_filename, f.f_code.co_firstlineno, f.f_code.co_name))
        f = f.f_back
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def dynamo_own(filename: str) -> bool:
    """Dynamo's own files (its polyfills, its tracer), by torch's location here."""
    folder = torch_folder()
    return bool(folder) and os.path.realpath(filename).startswith(os.path.join(folder, "_dynamo") + os.sep)


def stand_in_call(stack: Sequence[Any], file: str, first_line: int) -> tuple[int, str]:
    """A failure met only inside Dynamo's own stand-ins for builtins (its polyfills: ``itertools.permutations``),
    placed in the compiled function (``file``, from its ``def`` at ``first_line``): (the first of its lines that
    calls the outermost stand-in, the builtin it stands in for, ``itertools.permutations``); (0, "") where the
    stack holds anything else or no line calls it."""
    if not stack or not file or not all(dynamo_own(s.filename) for s in stack):
        return 0, ""
    name, module = str(stack[0].name), os.path.splitext(os.path.basename(stack[0].filename))[0]
    builtin = name if module in ("builtins", "__init__") else f"{module}.{name}"
    head = linecache.getline(file, first_line)
    indent = len(head) - len(head.lstrip())
    for n in range(first_line + 1, first_line + 400):
        text = linecache.getline(file, n)
        if not text:
            break
        if text.strip() and len(text) - len(text.lstrip()) <= indent and not text.lstrip().startswith("#"):
            break  # the function has ended
        if re.search(rf"\b{re.escape(name)}\s*\(", text.split("#")[0]):
            return n, builtin
    return 0, ""


def calling_library(callers: Sequence[tuple[str, int, str]]) -> str:
    """The package whose own code called the compiled function (``callers``, nearest first, as ``callers``
    gives them), '' where the user's code did: the plumbing between (a module's ``__call__``, a no_grad
    decorator, contextlib, tpu_lab's own listeners) is passed over, never taken for the caller."""
    for file, _, _ in callers:
        package = package_of(file)
        plumbing = package in ("tpu_lab", "stdlib") or (package == "torch" and _PLUMBING.search(file) is not None)
        if not plumbing:
            return "" if package == USER else package
    return ""


_PLUMBING = re.compile(r"[\\/]torch[\\/](?:_utils_internal|utils[\\/]_contextlib|nn[\\/]modules[\\/]module)\.py$")
