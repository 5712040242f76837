"""Errors raised by tpu_lab.

Every error says what happened, the likely cause and the fix, and chains the original exception::

    TpuLabError                  base: catch this to catch everything tpu_lab raises
    ├── InvalidArgument          a bad value passed to a tpu_lab function (also a ValueError)
    ├── EnvironmentProblem       a malformed environment variable or an unusable directory
    └── ModelBuildError          a tiny checkpoint could not be built or written

Warnings begin with ``tpu_lab:`` and name the fix.
"""

from __future__ import annotations


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
