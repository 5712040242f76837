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


def enclosing_lines(file: str, line: int) -> list[str]:
    """The lines of the innermost function around ``line`` of ``file``, from its ``def`` up to ``line``
    (the line alone where no function holds it, none where the file cannot be read)."""
    first = enclosing_def(file, line) or line
    return [linecache.getline(file, n) for n in range(first, line + 1)] if linecache.getline(file, line) else []


def enclosing_def(file: str, line: int) -> int:
    """The ``def`` line of the innermost function around ``line`` of ``file``; 0 where none holds it."""
    tree = parsed_file(file)
    holding = (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))) if tree else ()
    return max((n.lineno for n in holding if n.lineno <= line <= (n.end_lineno or 0)), default=0)
