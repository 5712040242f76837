"""The user's file as Python's parser reads it, parsed once per text: several causes of one compile read the
same file (a branch's origin, a loop around a break, a line that takes a size as a number)."""

from __future__ import annotations

import ast
import functools
import linecache


def parsed_file(file: str) -> ast.Module | None:
    """The user's file as Python's parser reads it (None where it cannot be read or parsed)."""
    return _parsed("".join(linecache.getlines(file)))


@functools.lru_cache(maxsize=16)  # several causes of one compile read the same file: parse its text once
def _parsed(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None
