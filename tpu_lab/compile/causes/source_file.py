"""The user's file as Python's parser reads it, parsed once per text: several causes of one compile read the
same file (a branch's origin, a loop around a break, a line that takes a size as a number); and a statement
written over several lines, read whole, wherever a cause or a resumed frame quotes the user's line."""

from __future__ import annotations

import ast
import functools
import io
import linecache
import re
import tokenize

from tpu_lab.compile.sources.packages import unshortened


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


def function_at(file: str, first: int) -> ast.FunctionDef | None:
    """The function of ``file`` whose code starts at ``first`` (a code object's ``co_firstlineno``: its ``def``,
    or its first decorator); None where none does or the file cannot be read."""
    tree = parsed_file(file)
    defs = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)) if tree else ()
    return next((n for n in defs if first in (n.lineno, *(d.lineno for d in n.decorator_list[:1]))), None)


def whole_statement(code: str) -> str:
    """``code`` less its comment where it is one whole statement (``if alpha > 0:``); '' where it is the
    first line of a longer one (``return F.conv2d(``): only a whole one may be quoted."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code.strip()).readline))
        text = code.strip()[: next((t.start[1] for t in tokens if t.type == tokenize.COMMENT), None)].strip()
        ast.parse(f"{text}\n pass" if text.endswith(":") else text)
    except (SyntaxError, tokenize.TokenError):
        return ""
    return text


def _uncommented(line: str) -> str:
    """One line of code less its comment: from the first ``#`` outside a string (quotes before it balanced)."""
    for m in re.finditer("#", line):
        before = line[: m.start()]
        if before.count("'") % 2 == 0 and before.count('"') % 2 == 0:
            return before.strip()
    return line.strip()


def statement_at(code: str, where: str, most: int = 240) -> str:
    """``code`` (the line at ``where``, ``file:line``) as one whole statement: where it begins a longer one
    (``y = F.scaled_dot_product_attention(q, k, v,``), joined with the lines that end it, read from its
    file; '' where that cannot be done within 16 lines, or it is longer than ``most`` characters."""
    if text := whole_statement(code):
        return text
    path, _, line = where.rpartition(":")
    path = unshortened(path) or (path if linecache.getlines(path) else "")  # a notebook cell: in linecache only
    parts = [_uncommented(code)]
    for n in range(int(line) + 1, int(line) + 16) if path and line.isdigit() else ():
        parts.append(_uncommented(linecache.getline(path, n)))
        if text := whole_statement(" ".join(parts).replace("( ", "(")):
            return text if len(text) <= most else ""
    return ""
