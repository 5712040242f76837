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

Warnings are ``TpuLabWarning``s; they begin with ``tpu_lab:`` and name the fix.
"""

from __future__ import annotations

from typing import Any


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


class TpuLabWarning(UserWarning):
    """Something works, but not the way you probably meant; the message names the fix."""
