"""A relation between sizes a graph holds because a NumPy or math call took them as Python numbers
(``dim_diff = np.abs(h - w)`` after ``c, h, w = img.shape``: the graph holds ``h == 10 + w``): every new
value of what the call computed is a graph of its own, even with dynamic shapes. Python's own operators and
torch keep the sizes symbolic, so the fix names the twin of the call where there is one."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import Cause, call_arguments, local_name

_CALL = re.compile(r"\b(np|numpy|math)\.(\w+)\(")
_TWIN = {  # NumPy's (and math's) calls on plain numbers that Python's own builtins do symbolically
    "abs": "abs",
    "absolute": "abs",
    "fabs": "abs",
    "maximum": "max",
    "max": "max",
    "amax": "max",
    "minimum": "min",
    "min": "min",
    "amin": "min",
}
_RELATION = re.compile(r"\(?[^<>=!]*\.size\(\)\[\d+\][^<>=!]*(?:==|!=|<=|>=|<|>)[^<>=!]*\.size\(\)\[\d+\][^<>=!]*")


def numpy_relation_words(g: str, line: str, code: str, at: str) -> Cause | None:
    """The cause of a failed guard ``g`` relating two sizes, where ``code`` (its line, said in ``line``: `` by
    your code at f.py:13 (...)``) calls NumPy or math on them; None for any other guard or line."""
    call = _CALL.search(code or "")
    if call is None or not _RELATION.fullmatch(g.strip()) or (call[1] == "math" and call[2] not in _TWIN):
        return None
    name = f"{call[1]}.{call[2]}"
    twin = _TWIN.get(call[2], "")
    args = call_arguments(code, call.end()) or ""
    if not re.search(r"[A-Za-z_]", args):  # np.float32(0.5): no size among its arguments
        return None
    fix = (
        f"use Python's {twin}({args}) in place of {name}({args}): Python's own operators and torch keep sizes "
        "symbolic, so one graph serves the sizes"
        if twin and args
        else f"compute it with Python's own operators or torch ops on the sizes in place of {name}, which keep "
        "them symbolic, so one graph serves the sizes; or pad to a few sizes"
    )
    return Cause(
        "size_value",
        f"a relation between sizes changed (the graph holds {local_name(g.strip())}), set{line}: {name} takes the "
        "sizes as Python numbers, so each new value of what it computes is a graph of its own, even with dynamic "
        "shapes",
        g,
        fix,
        at,
    )
