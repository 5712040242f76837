"""Argument checks shared by every public entry point: each rule written once, each failure a clear
``InvalidArgument`` naming the argument, the value and an example that works."""

from __future__ import annotations

import math
from typing import Any

from tpu_lab.errors import InvalidArgument


def positive_int(value: Any, name: str, *, example: int = 16, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; bools and floats are refused (``True`` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        bound = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise InvalidArgument(f"{name}={value!r} must be {bound}.", fix=f"Use e.g. {name}={example}.")
    return value


def positive_seconds(value: Any, name: str = "timeout", *, example: float = 300) -> float | None:
    """None, or a finite number of seconds > 0 (NaN and infinity never fire, so they are refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgument(
            f"{name}={value!r} must be a positive, finite number of seconds.", fix=f"Use e.g. {name}={example:g}."
        )
    return float(value)


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False, got {value!r}.", fix=f"Pass {name}=True or {name}=False.")
    return value


def choice(value: Any, name: str, allowed: Any) -> Any:
    """``value`` if it is one of ``allowed`` (an iterable of strings)."""
    options = list(allowed)
    if not isinstance(value, str) or value not in options:
        raise InvalidArgument(f"{name}={value!r} is not one of the choices.", fix=f"Use one of: {', '.join(options)}.")
    return value


def token_counts(lengths: Any, what: str = "lengths") -> list[int]:
    """A non-empty list of positive token counts (prompt lengths, bucket targets)."""
    try:
        out = list(lengths)
    except TypeError:
        out = None
    if not out or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in out):
        raise InvalidArgument(
            f"{what} must be a non-empty list of positive token counts, got {lengths!r}.",
            fix="Pass the prompt lengths you have seen, e.g. [5, 17, 40].",
        )
    return out
