"""Errors raised by tpu_lab.

Every error says what happened, the likely cause and the fix, and chains the original exception::

    TpuLabError                  base: catch this to catch everything tpu_lab raises
    ├── InvalidArgument          a bad value passed to a tpu_lab function (also a ValueError)
    ├── EnvironmentProblem       a malformed environment variable or an unusable directory
    ├── ModelBuildError          a tiny checkpoint could not be built or written
    ├── DeviceUnavailable        the requested device does not exist in this process
    ├── KernelsUnavailable       use_kernels=True but kernels/jax are missing or the wrong version
    ├── ModelLoadError           a checkpoint could not be loaded
    │   └── HubUnreachable       a hub id was given but the hub cannot be reached and nothing is cached
    ├── RecompileError           something compiled inside no_recompiles() (names the function and what changed)
    └── LaunchError              a tensor-parallel launch failed, timed out or was stopped (``.result``)
    LaunchInterrupted            a cell interrupt stopped a launch (a KeyboardInterrupt, so it is never
                                 swallowed by ``except Exception``); every process was stopped (``.result``)

In a notebook each renders as what / why / fix first, then the line of your code that led there; the
whole traceback stays one call away (IPython keeps the error as ``sys.last_value``).

Warnings are ``TpuLabWarning``s; they begin with ``tpu_lab:`` and name the fix.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_FULL_TRACEBACK_HINT = "whole traceback: import sys, traceback; traceback.print_exception(sys.last_value)"


def _notebook_lines(error: BaseException, message: str) -> list[str]:
    """IPython's ``_render_traceback_``: the message first, then where your code called into tpu_lab,
    and how to see the whole traceback (tpu_lab's own frames are folded away)."""
    name = type(error).__name__
    first, *rest = message.splitlines() or [""]
    lines = [f"\x1b[1;31m{name}\x1b[0m: {first}", *rest]
    frames = traceback.extract_tb(error.__traceback__)
    yours = [f for f in frames if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR + os.sep)]
    if yours:
        last = yours[-1]
        where = last.filename if not last.filename.startswith("<") else last.filename.strip("<>")
        code = f": {last.line.strip()}" if last.line else ""
        lines.append(f"\x1b[2mfrom {where}, line {last.lineno}{code}\x1b[0m")
    lines.append(f"\x1b[2m({_FULL_TRACEBACK_HINT})\x1b[0m")
    return lines


class TpuLabError(Exception):
    """Base class: ``what`` happened, the likely ``cause``, the ``fix``."""

    def __init__(self, what: str, *, cause: str | None = None, fix: str | None = None) -> None:
        self.what = what
        self.cause = cause
        self.fix = fix
        lines = [what]
        if cause:
            lines.append(f"Likely cause: {cause}")
        if fix:
            lines.append(f"Fix: {fix}")
        super().__init__("\n".join(lines))

    def _render_traceback_(self) -> list[str]:
        return _notebook_lines(self, str(self))


class InvalidArgument(TpuLabError, ValueError):
    """A value passed to a tpu_lab function cannot be used."""


class EnvironmentProblem(TpuLabError):
    """An environment variable is malformed or a directory cannot be used."""


class ModelBuildError(TpuLabError):
    """A tiny checkpoint could not be built or written."""


class DeviceUnavailable(TpuLabError):
    """The requested device does not exist in this process (no chip, no GPU, torch_tpu missing)."""


class KernelsUnavailable(TpuLabError):
    """Hub kernels were requested but the kernels/jax install cannot provide them."""


class ModelLoadError(TpuLabError):
    """A checkpoint could not be loaded: missing, incomplete, truncated, or needs remote code."""


class HubUnreachable(ModelLoadError):
    """A hub id was given, the hub cannot be reached, and the model is not in the local cache."""


class RecompileError(TpuLabError):
    """A compilation happened inside ``no_recompiles()``: names the function, its file:line and what changed."""


class LaunchError(TpuLabError):
    """A launch failed: names the argv, each rank's exit code or signal, and the failing rank's traceback.
    ``.result`` holds the LaunchResult (None when nothing started)."""

    def __init__(self, what: str, *, result: Any = None, cause: str | None = None, fix: str | None = None) -> None:
        super().__init__(what, cause=cause, fix=fix)
        self.result = result


class LaunchInterrupted(KeyboardInterrupt):
    """A cell interrupt (or Ctrl-C) stopped a launch; every process of it was stopped first. A
    KeyboardInterrupt, so ``except Exception`` never swallows it; ``.result`` holds the LaunchResult
    (each rank's state and output up to the stop)."""

    def __init__(self, what: str, *, result: Any = None) -> None:
        super().__init__(what)
        self.what = what
        self.result = result

    def _render_traceback_(self) -> list[str]:
        return _notebook_lines(self, self.what)


class TpuLabWarning(UserWarning):
    """Something works, but not the way you probably meant; the message names the fix."""
