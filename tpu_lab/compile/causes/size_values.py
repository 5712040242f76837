"""A number computed from a dynamic size and held to one value in the graph (how many chunks ``split`` makes,
a NumPy call's argument, a float quotient rounded with ``np.ceil``): each value a graph of its own. Pure."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import Cause, held_expr

QUOTIENT_FIX = (
    "each new value is a graph of its own while your code rounds a float quotient of it (np.ceil(H / ws)): "
    "round with integer arithmetic instead (-(-H // ws) for the ceiling, H // ws for the floor), which Dynamo keeps "
    "symbolic, so one graph serves the values"
)

_HELD = re.compile(r"^(?P<expr>.+[-+*/%].+) == (?P<n>-?\d+(?:\.\d+)?)$")  # ((T + 3) // 4) == 2; never a plain size


def size_value_words(g: str, line: str, at: str, code: str = "") -> Cause | None:
    """A number computed from a dynamic size and held to one value (``(T + 3) // 4 == 2``: how many chunks
    ``split`` makes, a loop count): not a bound with two sides, every value is a graph of its own. None for
    other guards, and where ``code`` (the line that set it) compares it itself: a branch, two sides.
    ``line``: where it was set, in words (`` by your code at f.py:3``)."""
    m = _HELD.match(g.strip())
    if m is None or "size()" not in m["expr"] or re.search(r"\b(?:if|while|assert)\b|[=!<>]=|[<>]", code):
        return None
    if "sym_float(" in m["expr"]:  # a float from a size that an op takes as one value: interpolate's scale_factor
        return Cause(
            "size_value",
            f"a float computed from a size changed (the graph holds {held_expr(m['expr'])} == {m['n']}), "
            f"set{line}: torch takes it as one fixed value there (a scale factor), so each size is a graph of its "
            "own, even with dynamic shapes",
            g,
            "pass the op sizes, not a float computed from them (F.interpolate(size=(h, w)) in place of "
            "scale_factor=), or keep to a few sizes",
            at,
        )
    rounds = re.search(r"\b(?:np|numpy|math)\.(?:ceil|floor)\(", line)  # Swin's np.ceil(x.size(1) / ws): a float
    if rounds and "." in m["n"] and re.search(r"[\])] / \d+\)?$", m["expr"]):
        return Cause(
            "size_value",
            f"a float quotient of a size changed (the graph holds {held_expr(m['expr'])} == {m['n']}), set{line}: "
            "your code takes it as a Python float there (to round it), so each value of it is a graph of its own, "
            "even with dynamic shapes",
            g,
            QUOTIENT_FIX,
            at,
        )
    # DiT's sin-cos table: np.arange(grid_size), an array torch builds from a symbolic size too (not np.ceil's count)
    if numpy := re.search(r"\b(?:np|numpy)\.(arange|linspace|zeros|ones|empty|full|eye|meshgrid|indices)\(", line):
        return Cause(
            "size_value",
            f"a number computed from a size changed (the graph holds {held_expr(m['expr'])} == {m['n']}), set{line}: "
            f"NumPy takes it as a Python number (np.{numpy[1]}), so each value of it is a graph of its own, even "
            "with dynamic shapes",
            g,
            f"build that array with torch from the size (torch.{numpy[1]} in place of np.{numpy[1]}), which keeps "
            "it symbolic, so one graph serves the sizes; or compute it outside the compiled function and pass it in",
            at,
        )
    return Cause(
        "size_value",
        f"a number computed from a size changed (the graph holds {held_expr(m['expr'])} == {m['n']}), set{line}: "
        "it is used as a Python number (how many chunks split() makes, a loop count, how a view or reshape splits "
        "a dimension), so each value of it is a graph of its own, even with dynamic shapes",
        g,
        "pad that dimension so the number stays the same (a multiple of the chunk size, a fixed length), or "
        "keep the size out of Python numbers (one op over the whole tensor instead of a loop over pieces)",
        at,
    )
