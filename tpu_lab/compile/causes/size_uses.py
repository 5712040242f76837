"""Where the user's code takes a tensor's size as a Python number (``range(t.shape[0])``, ``int(x.size(1))``,
a loop over ``range(num_steps)`` after ``num_steps = rewards.shape[0]``): a graph that does so is fixed to
that size, whatever Dynamo traced, so each size compiles a graph of its own. Read from the compiled
function's own source, from where its graph starts."""

from __future__ import annotations

import ast
import linecache
import re
from types import CodeType

from tpu_lab.compile.causes.branch_origin import parsed_file


def size_as_number(code: CodeType | None, name: str, dim: str) -> tuple[int, str, str, str]:
    """(line, its code, how: ``range`` / ``loop`` / ``int``, the size as that line reads it) of the first line
    of ``code``'s function, from the line its graph starts at, that takes ``name``'s dimension ``dim`` as a
    Python number, directly or through a name given that size; (0, "", "", "") where there is none or the
    source cannot be read."""
    none = 0, "", "", ""
    if code is None or not re.fullmatch(r"[A-Za-z_]\w*", name) or not dim.isdigit():
        return none
    file, start = code.co_filename, code.co_firstlineno
    if (tree := parsed_file(file)) is None:
        return none
    spans = [
        (min([n.lineno, *(d.lineno for d in n.decorator_list)]), n.end_lineno or n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= (n.end_lineno or 0)
    ]
    around = [s for s in spans if s[0] <= start <= s[1]]
    if not around:
        return none
    end = min(around, key=lambda s: s[1] - s[0])[1]  # the innermost function: a resumed part starts inside it
    size = rf"{re.escape(name)}\.(?:shape\[{dim}\]|size\({dim}\))" + (
        rf"|len\({re.escape(name)}\)" if dim == "0" else ""
    )
    aliases: dict[str, str] = {}
    for n in range(start, end + 1):
        text = linecache.getline(file, n).strip()
        if given := re.fullmatch(rf"([A-Za-z_]\w*)\s*=\s*({size})", text):  # num_steps = rewards.shape[0]
            aliases[given[1]] = f"{given[1]} (= {given[2]}, line {n})"
            size += rf"|\b{given[1]}\b(?!\s*=)"
        how = (
            "loop"
            if re.match(rf"for\b.*\bin\s+(?:reversed\()?range\((?:[^()]*,\s*)?(?:{size})[^()]*\)", text)
            else "range"
            if re.search(rf"\brange\((?:[^()]*,\s*)?(?:{size})[^()]*\)", text)
            else "int"
            if re.search(rf"\bint\((?:{size})\)", text)
            else ""
        )
        if how:
            used = re.search(size, text)
            said = aliases.get(used[0], used[0]) if used else f"{name}.shape[{dim}]"
            return n, text, how, said
    return none


def pinned_by(code: CodeType | None, name: str, dim: str) -> tuple[str, str]:
    """(a note for the cause's words, its fix) where ``code`` takes ``name`` dim ``dim`` as a Python number,
    else ("", "")."""
    line, text, how, said = size_as_number(code, name, dim)
    if not line:
        return "", ""
    use = {"loop": "as the length of a loop", "range": "as a Python int in range()", "int": "as a Python int"}[how]
    note = f"the graph pins {name} dim {dim} to one size: line {line} ({text}) takes {said} {use}, so every size is its own graph"
    size = said.split(" (= ")[0]
    fix = {
        "range": f"at line {line} use torch.arange({size}) in place of range({size}): a tensor keeps the size dynamic",
        "loop": f"vectorise the loop at line {line} (a loop's length is fixed into the graph)",
        "int": f"at line {line} use {size} as it is, without int(), which fixes it into the graph",
    }[how]
    return note, f"{fix}; else pad to a few sizes (mark_dynamic would raise here: ConstraintViolationError)"
