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


def optional_callable(value: Any, name: str, *, example: str = "lambda rank, line: print(line)") -> Any:
    if value is not None and not callable(value):
        raise InvalidArgument(
            f"{name}={_short(value)} is not callable.", fix=f"Pass a function, e.g. {name}={example}."
        )
    return value


def number_in(
    value: Any,
    name: str,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    example: str,
) -> float:
    """``value`` as a finite real number (never a bool, NaN or infinity) inside the bounds given:
    ``above`` (exclusive), ``at_least`` and ``at_most`` (inclusive)."""
    real = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not real or (
        (above is not None and value <= above)
        or (at_least is not None and value < at_least)
        or (at_most is not None and value > at_most)
    ):
        low = f"> {above:g}" if above is not None else (f">= {at_least:g}" if at_least is not None else "")
        bounds = " and ".join(b for b in (low, f"<= {at_most:g}" if at_most is not None else "") if b)
        raise InvalidArgument(
            f"{name}={_short(value)} must be a finite number{f' {bounds}' if bounds else ''}.",
            fix=f"Use e.g. {name}={example}.",
        )
    return float(value)


def of_type(value: Any, name: str, types: Any, what: str, fix: str) -> Any:
    """``value`` if it is an instance of ``types`` (never a bool standing in for an int)."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        raise InvalidArgument(f"{name}={_short(value)} ({type(value).__name__}) is not {what}.", fix=fix)
    return value


def _as_tuple(types: Any) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def mapping(value: Any, name: str, *, values: Any = str, example: str) -> Mapping:
    """None (an empty dict) or a mapping of str keys to values of type ``values``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"{name} must be a dict, got {type(value).__name__} {_short(value)}.", fix=f"Pass e.g. {name}={example}."
        )
    for key, val in value.items():
        if not isinstance(key, str) or not isinstance(val, values):
            kinds = " or ".join("None" if t is type(None) else t.__name__ for t in _as_tuple(values))
            raise InvalidArgument(
                f"{name}[{_short(key)}] = {_short(val)}: every key of {name} must be a str and every value a {kinds}.",
                fix=f"Pass e.g. {name}={example}.",
            )
    return value


def folder_path(value: Any, name: str, *, default: Any = None) -> str:
    """A str or os.PathLike naming a folder that exists (``default``, the real one, is not checked: it
    may be absent on another OS, where it means "nothing there")."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text or "\0" in text:
        raise InvalidArgument(
            f"{name}={_short(value)} is not a folder path.", fix=f"Pass a str or pathlib.Path, e.g. {name}={default!r}."
        )
    if text != default and not os.path.isdir(text):
        raise InvalidArgument(
            f"{name}={text!r} is not a folder: it does not exist, or it is a file.",
            cause="a typo in the path, or a simulated tree that was not written (yet)",
            fix=f"Pass an existing folder, or leave {name} out for the real one ({default}).",
        )
    return text


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
