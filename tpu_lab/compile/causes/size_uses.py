"""Where the user's code takes a tensor's size as a Python number (``range(t.shape[0])``, ``int(x.size(1))``):
a graph that does so is fixed to that size, whatever Dynamo traced, so each size compiles a graph of its own.
Read from the compiled function's own source, from where its graph starts."""

from __future__ import annotations

import ast
import linecache
import re
from types import CodeType

from tpu_lab.compile.causes.branch_origin import parsed_file


def size_as_number(code: CodeType | None, name: str, dim: str) -> tuple[int, str, str]:
    """(line, its code, how: ``range`` / ``loop`` / ``int``) of the first line of ``code``'s function, from
    the line its graph starts at, that takes ``name``'s dimension ``dim`` as a Python number; (0, "", "") where
    there is none or the source cannot be read."""
    if code is None or not re.fullmatch(r"[A-Za-z_]\w*", name) or not dim.isdigit():
        return 0, "", ""
    file, start = code.co_filename, code.co_firstlineno
    if (tree := parsed_file(file)) is None:
        return 0, "", ""
    spans = [
        (min([n.lineno, *(d.lineno for d in n.decorator_list)]), n.end_lineno or n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= (n.end_lineno or 0)
    ]
    around = [s for s in spans if s[0] <= start <= s[1]]
    if not around:
        return 0, "", ""
    end = min(around, key=lambda s: s[1] - s[0])[1]  # the innermost function: a resumed part starts inside it
    size = rf"{re.escape(name)}\.(?:shape\[{dim}\]|size\({dim}\))" + (
        rf"|len\({re.escape(name)}\)" if dim == "0" else ""
    )
    for n in range(start, end + 1):
        text = linecache.getline(file, n).strip()
        if re.match(rf"for\b.*\bin\s+range\((?:.*,\s*)?(?:{size})\s*\)", text):
            return n, text, "loop"
        if re.search(rf"\brange\((?:[^()]*,\s*)?(?:{size})\s*\)", text):
            return n, text, "range"
        if re.search(rf"\bint\((?:{size})\)", text):
            return n, text, "int"
    return 0, "", ""


def pinned_by(code: CodeType | None, name: str, dim: str) -> tuple[str, str]:
    """(a note for the cause's words, its fix) where ``code`` takes ``name`` dim ``dim`` as a Python number,
    else ("", "")."""
    line, text, how = size_as_number(code, name, dim)
    if not line:
        return "", ""
    size = re.search(rf"{re.escape(name)}\.(?:shape\[{dim}\]|size\({dim}\))|len\({re.escape(name)}\)", text)
    said = size[0] if size else f"{name}.shape[{dim}]"
    use = {"loop": "as the length of a loop", "range": "as a Python int in range()", "int": "as a Python int"}[how]
    note = f"the graph pins {name} dim {dim} to one size: line {line} ({text}) takes {said} {use}, so every size is its own graph"
    fix = {
        "range": f"at line {line} use torch.arange({said}) in place of range({said}): a tensor keeps the size dynamic",
        "loop": f"vectorise the loop at line {line} (a loop's length is fixed into the graph)",
        "int": f"at line {line} use {said} as it is, without int(), which fixes it into the graph",
    }[how]
    return note, f"{fix}; else pad to a few sizes (mark_dynamic would raise here: ConstraintViolationError)"
