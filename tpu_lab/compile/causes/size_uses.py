"""Where the user's code takes a tensor's size as a Python number (``range(t.shape[0])``, ``int(x.size(1))``,
a loop over ``range(num_steps)`` after ``num_steps = rewards.shape[0]``, ``np.log(L)`` after ``B, L, D =
x.shape``, ``torch.triu_indices(n, n)``): a graph that does so is fixed to that size, whatever Dynamo
traced, so each size compiles a graph of its own. Read from the compiled function's own source, from where
its graph starts, and from a function of the same file it passes the tensor to."""

from __future__ import annotations

import ast
import linecache
import re
from types import CodeType

from tpu_lab.compile.causes.source_file import parsed_file

_NONE = 0, "", "", ""
# calls that take a size as a plain Python number: NumPy's and math's, torch's index builders
_AS_NUMBER = r"\b(?:np|numpy|math)\.\w+\(|\btorch\.(?:tril|triu)_indices\("


def size_as_number(code: CodeType | None, name: str, dim: str) -> tuple[int, str, str, str]:
    """(line, its code, how: ``range`` / ``loop`` / ``int`` / ``number``, the size as that line reads it) of
    the first line of ``code``'s function, from the line its graph starts at, that takes ``name``'s dimension
    ``dim`` as a Python number, directly or through a name given that size, or in a function of the same file
    it passes ``name`` to; (0, "", "", "") where there is none or the source cannot be read."""
    return size_in_source(code.co_filename, code.co_firstlineno, name, dim) if code is not None else _NONE


def size_in_source(file: str, first: int, name: str, dim: str, compared: bool = False) -> tuple[int, str, str, str]:
    """``size_as_number`` for the function of ``file`` whose code starts at line ``first``; ``compared``: the
    first line that compares the size in a branch instead (``if seqlen > 1:``), how ``compare``."""
    if not file or not re.fullmatch(r"[A-Za-z_]\w*", name) or not dim.isdigit():
        return _NONE
    tree = parsed_file(file)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] if tree else []
    spans = [
        (min([f.lineno, *(d.lineno for d in f.decorator_list)]), f.end_lineno or f.lineno)
        for f in functions
        if f.lineno <= (f.end_lineno or 0)
    ]
    around = [s for s in spans if s[0] <= first <= s[1]]
    if not around:
        return _NONE
    end = min(around, key=lambda s: s[1] - s[0])[1]  # the innermost function: a resumed part starts inside it
    return _scan(file, first, end, name, dim, functions, 1, compared)


def _scan(
    file: str, start: int, end: int, name: str, dim: str, functions: list, calls: int, compared: bool = False
) -> tuple[int, str, str, str]:
    size = rf"{re.escape(name)}\.(?:shape\[{dim}\]|size\({dim}\))" + (
        rf"|len\({re.escape(name)}\)" if dim == "0" else ""
    )
    aliases: dict[str, str] = {}
    for n in range(start, end + 1):
        text = linecache.getline(file, n).strip()
        if given := re.fullmatch(rf"([A-Za-z_]\w*)\s*=\s*({size})", text):  # num_steps = rewards.shape[0]
            aliases[given[1]] = f"{given[1]} (= {given[2]}, line {n})"
        elif unpacked := re.fullmatch(rf"([\w\s,]+?)\s*=\s*{re.escape(name)}\.shape", text):
            names = [t.strip() for t in unpacked[1].split(",")]  # B, L_Q, H, D = queries.shape
            if int(dim) < len(names) and names[int(dim)] != "_":
                aliases[names[int(dim)]] = f"{names[int(dim)]} (= {name}.shape[{dim}], line {n})"
        used = size + "".join(rf"|\b{a}\b(?!\s*=(?!=))" for a in aliases)  # not its assignment; == is a use
        branch = re.match(
            rf"(?:if|elif|while|assert)\b.*?(?:(?:{used})\s*(?:[<>]=?|[!=]=)|(?:[<>]=?|[!=]=)\s*(?:{used}))", text
        )
        how = (
            ("compare" if branch else "")
            if compared
            else "loop"
            if re.match(rf"for\b.*\bin\s+(?:reversed\()?range\((?:[^()]*,\s*)?(?:{used})[^()]*\)", text)
            else "range"
            if re.search(rf"\brange\((?:[^()]*,\s*)?(?:{used})[^()]*\)", text)
            else "int"
            if re.search(rf"\bint\((?:{used})\)", text)
            else "number"
            if re.search(rf"(?:{_AS_NUMBER})[^()]*?(?:{used})", text)
            else ""
        )
        if how:
            found = re.search(used, text)
            return n, text, how, aliases.get(found[0], found[0]) if found else f"{name}.shape[{dim}]"
        if calls and (callee := _passed_to(text, name, functions)):  # lj_forces(pos): its body, by its parameter
            f, param = callee
            if (inner := _scan(file, f.lineno, f.end_lineno or f.lineno, param, dim, functions, calls - 1, compared))[
                0
            ]:
                return inner
    return _NONE


def _passed_to(text: str, name: str, functions: list) -> tuple[ast.FunctionDef, str] | None:
    """(the function of the same file ``text`` calls with ``name`` as a positional argument, its parameter)."""
    for call in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)\(([^()]*)\)", text):
        args = [a.strip() for a in call[2].split(",")]
        f = next((f for f in functions if f.name == call[1]), None)
        if f is not None and name in args and args.index(name) < len(f.args.args):
            return f, f.args.args[args.index(name)].arg
    return None


def pinned_by(code: CodeType | None, name: str, dim: str) -> tuple[str, str]:
    """(a note for the cause's words, its fix) where ``code`` takes ``name`` dim ``dim`` as a Python number,
    else ("", "")."""
    line, text, how, said = size_as_number(code, name, dim)
    if not line:
        return "", ""
    use = {
        "loop": "as the length of a loop",
        "range": "as a Python int in range()",
        "int": "as a Python int",
        "number": "as a plain Python number",
    }[how]
    note = f"the graph pins {name} dim {dim} to one size: line {line} ({text}) takes {said} {use}, so every size is its own graph"
    size = said.split(" (= ")[0]
    fix = {
        "range": f"at line {line} use torch.arange({size}) in place of range({size}): a tensor keeps the size dynamic",
        "loop": f"vectorise the loop at line {line} (a loop's length is fixed into the graph)",
        "int": f"at line {line} use {size} as it is, without int(), which fixes it into the graph",
        "number": f"pad to a few sizes (line {line} needs {size} as a number, so each size is a graph of its own)",
    }[how]
    rest = "" if how == "number" else "; else pad to a few sizes"
    return note, f"{fix}{rest} (mark_dynamic would raise here: ConstraintViolationError)"
