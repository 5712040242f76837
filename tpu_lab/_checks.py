"""Argument checks shared by every public entry point: each rule written once, each failure a clear
``InvalidArgument`` naming the argument, the value and an example that works."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
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


def environment(value: Any, name: str = "env") -> dict[str, str]:
    """None or a mapping of variable names to values, every one usable by exec (no "=" or NUL in a name,
    no NUL in a value, nothing that is not a string)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"{name} must be a dict of environment variables, got {type(value).__name__} {_short(value)}.",
            fix=f'Pass e.g. {name}={{"HF_HUB_OFFLINE": "1"}}.',
        )
    for key, val in value.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise InvalidArgument(
                f"{name} has the variable name {key!r}, which no process can receive.",
                cause='a name must be a non-empty string without "=" or NUL bytes',
                fix=f'Use plain names, e.g. {name}={{"MY_FLAG": "1"}}.',
            )
        if not isinstance(val, str) or "\0" in val:
            raise InvalidArgument(
                f"{name}[{key!r}] must be a string without NUL bytes, got {_short(val)}.",
                fix=f"Convert it with str() (and drop NUL bytes): {name}[{key!r}] = str(value).",
            )
    return dict(value)


def string_args(value: Any, name: str = "args") -> tuple[str, ...]:
    """A list of command-line arguments: strings, paths or numbers (never one string, never None)."""
    if isinstance(value, (str, bytes)):
        raise InvalidArgument(
            f"{name}={value!r} is one string, which would become {len(value)} one-character arguments.",
            fix=f"Pass a list: {name}={[value]!r}, or {name}={str(value).split()!r}.",
        )
    try:
        items = list(value)
    except TypeError:
        items = None
    if items is None or any(
        isinstance(a, bool) or not isinstance(a, (str, int, float, os.PathLike)) or "\0" in str(a) for a in items
    ):
        raise InvalidArgument(
            f"{name} must be a list of strings (or numbers/paths), got {_short(value)}.",
            cause="an item that is None, a boolean or another object has no unambiguous command-line form",
            fix=f'Pass e.g. {name}=["--steps", "10"].',
        )
    return tuple(os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in items)


def optional_callable(value: Any, name: str) -> Any:
    if value is not None and not callable(value):
        raise InvalidArgument(
            f"{name}={_short(value)} is not callable.",
            fix=f"Pass a function, e.g. {name}=lambda rank, line: print(line).",
        )
    return value


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def name_or_path(value: Any, name: str = "name_or_path") -> str:
    """A non-empty model name or path (str or os.PathLike) as a str."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text.strip() or "\0" in text:
        raise InvalidArgument(
            f"{name}={_short(value)} is not a model name or folder.",
            fix="Pass a checkpoint folder, a hub id like 'Qwen/Qwen3-0.6B', or 'tiny:qwen3'.",
        )
    return text
