"""A failed guard on a value computed from Python numbers (Dynamo's symbolic expression pinned to one
value: ``((-1)*round((self.lo / ...))) == 143``), in the user's names and line: the numbers it is computed
from and where the code used it as a concrete number, never the expression itself. Pure: strings in,
``Cause`` out."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tpu_lab.compile.causes.cause import LOOP_COUNT_FIX, LOOP_RANGE, Cause, Failure, local_name

_NAME = re.compile(r"(?<![\w.'\]])(?:[LG]\['[^']+'\]|[A-Za-z_]\w*)(?:\.\w+|\['[^']*'\]|\[\d+\])*")
_ROUNDED = re.compile(r"\b(np|numpy|math)\.(ceil|floor)\(")  # rounding a quotient (math's too: a float on the way)
RAISE_LIMIT = ", or raise torch._dynamo.config.recompile_limit to the number you use"
_WAS = re.compile(r"\(was ([^;]+); it is baked")


def derived_words(expression: str, value: str, f: Failure) -> Cause | None:
    """The cause for ``expression == value`` where the expression computes on the user's numbers; None
    where it is a plain input or attribute (a value guard of its own)."""
    item = r"(?:[\w.]|\[(?:'[^']*'|\"[^\"]*\"|-?\d+)\])+"  # a dict's key may hold any text: metrics['loss/train']
    plain = rf"(?:list\({item}\.values\(\)\))?{item}"
    if re.fullmatch(item, expression.strip()) or re.fullmatch(plain, local_name(expression.strip())):
        return None  # an input, an attribute, a dict's item (list(opt.state.values())[0]['step']): a value of its own
    found = [
        m[0] for m in _NAME.finditer(expression) if not expression[m.end() :].lstrip().startswith("(")
    ]  # a call (round, torch.sym_max) is how it is computed, not what from
    sources = sorted({local_name(s) for s in found if not s.startswith(("torch", "math"))})
    if not sources:
        return None
    names = ", ".join(sources)
    kind = "float" if re.search(r"[.e]", value) else "int"
    at = f" at {_short(f.where)}" if f.where else ""
    code = f" ({f.code})" if f.code and not f.code.startswith("now passed:") else ""
    rounded = _ROUNDED.search(f.code or "") if " / " in expression and kind == "float" else None
    if rounded:  # Swin's Hp = int(np.ceil(H / ws)) * ws: the quotient, a float, held to one value
        return Cause(
            "derived",
            f"a Python float computed from {names}{at}{code} changed (was {value}; {rounded[1]}.{rounded[2]} takes "
            f"the quotient as a float, which Dynamo bakes into the graph: each new {names} compiles a graph of its "
            "own, even where it is dynamic)",
            f.guard,
            f"round with integer arithmetic on {names} in place of {rounded[1]}.{rounded[2]}: -(-a // b) for the "
            "ceiling, a // b for the floor (Hp = -(-H // ws) * ws), which Dynamo keeps symbolic: one graph serves "
            "the values",
            f.where,
        )
    looped = LOOP_RANGE.match((f.code or "").split("#", 1)[0])
    if looped and re.search(r"[A-Za-z_]", looped["args"]):  # Neural ODE's steps: range(n_steps), not range(3)
        return Cause(
            "derived",
            f"a Python {kind} computed from {names}{at}{code} changed (was {value}; it is how many times the loop "
            "runs, and Dynamo unrolls the loop into the graph, one copy of its body per step: each new count "
            "compiles a graph of its own)",
            f.guard,
            LOOP_COUNT_FIX.format(names),
            f.where,
        )
    if back := _read_back_later(f):  # MixMatch's linear_rampup: np.clip, then return float(current)
        return Cause(
            "derived",
            f"a Python {kind} computed from {names}{at}{code} changed (was {value}; it is baked into the graph: "
            "each new value compiles a graph of its own)",
            f.guard,
            f"compute it with torch ops on {names} held in a tensor (torch.clamp in place of np.clip, say) and "
            f"keep it a tensor where it is used: line {back[0]} ({back[1]}) turns it back into a Python number, "
            "where a tensor passed in would only move the change into a graph break; where it must be a Python "
            f"number, keep {names} to a few values{RAISE_LIMIT}",
            f.where,
        )
    return Cause(
        "derived",
        f"a Python {kind} computed from {names}{at}{code} changed (was {value}; it is baked into the graph: "
        "each new value compiles a graph of its own)",
        f.guard,
        f"where the code{at} takes a tensor, pass one (compute it with tensor ops from {names} held in tensors "
        "or buffers, or torch.tensor(value)) so the graph reads it at run time; where it must be a Python "
        f"number, keep {names} to a few values{RAISE_LIMIT}",
        f.where,
    )


def _read_back_later(f: Failure) -> tuple[int, str] | None:
    """(line, code) of a later line of the block that turns what ``f``'s line assigns back into a Python number
    (``return float(current)``), else None."""
    import linecache

    from tpu_lab.compile.sources.packages import unshortened

    target = re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)", f.code or "")
    path, _, line = f.where.rpartition(":")
    if not (target and line.isdigit()):
        return None
    path = path if linecache.getline(path, int(line)) else unshortened(path)  # as Dynamo's comment names it
    own = linecache.getline(path, int(line))
    indent = len(own) - len(own.lstrip())
    for n in range(int(line) + 1, int(line) + 20):
        text = linecache.getline(path, n)
        if not text.strip():
            continue
        if len(text) - len(text.lstrip()) < indent:  # the block has ended
            return None
        said = re.sub(r"(['\"]).*?\1", "''", text).split("#", 1)[0]  # code: no string, no comment
        if re.search(rf"\b(?:float|int)\(\s*{target[1]}\s*\)|\b{target[1]}\.(?:item|tolist)\(", said):
            return n, text.strip()
    return None


def derived_key(cause: Cause) -> str:
    """What two derived causes share when they are one change (the same numbers, the same line)."""
    return _WAS.sub("", cause.words.removeprefix("a Python int ").removeprefix("a Python float "))


def derived_joined(causes: Sequence[Cause]) -> Cause:
    """Several values computed from the same numbers on the same line (a scale and a zero point), as one."""
    first, guards = causes[0], "\n".join(dict.fromkeys(c.guard for c in causes))
    if len(causes) < 2:
        return Cause(first.kind, first.words, guards, first.fix, first.where)
    was = " and ".join(m[1] for c in causes if (m := _WAS.search(c.words)))
    words = re.sub(r"^a Python \w+ ", "Python values ", first.words)
    words = _WAS.sub(f"(was {was}; they are baked", words).replace("each new value compiles", "each new pair compiles")
    if len(causes) > 2:
        words = words.replace("each new pair compiles", "each new set compiles")
    return Cause(first.kind, words, guards, first.fix, first.where)


def _short(where: str) -> str:
    from tpu_lab.compile.sources.frames import where_label

    path, _, line = where.rpartition(":")
    return where_label(path, int(line)) if line.isdigit() else where


_SIZE_LEFT = re.compile(r"\(?(?P<n>\d+) \+ \(\(-1\)\*(?P<name>.+?)\.size\(\)\[(?P<i>\d+)\]\)\)? != (?P<v>[01])")


def size_left_words(guard: str, at: str = "") -> Cause | None:
    """``(5 + ((-1)*actions.size()[0])) != 1`` failed: a size the code computes as a length minus this size (a pad
    to a maximum length) became 1 or 0, which Dynamo compiles apart; None for any other guard."""
    if not (m := _SIZE_LEFT.fullmatch(local_name(guard.strip()))):
        return None
    left = f"{m['n']} - {m['name']}.size()[{m['i']}]"
    words = (
        f"{left}, a size your code computes from {m['name']} (a pad to a length of {m['n']}), is now {m['v']}: "
        "Dynamo compiles sizes 0 and 1 as graphs of their own"
    )
    fix = (
        f"expected once for each of 1 and 0, as {m['name']} dimension {m['i']} reaches {m['n']}; to skip them, pad "
        f"to the full length {m['n']} outside the compiled function, so the size it computes stays 0"
    )
    return Cause("size_one", words, guard, fix, at)
