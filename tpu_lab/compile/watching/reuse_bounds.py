"""How long a graph's reuse lasts: a size or value made dynamic reuses the graph only while the conditions the
graph holds on it pass (``alpha <= 0.0`` from ``if alpha > 0:``, a size bounded by the user's own ``assert``),
and mark_unbacked is never offered on a size the user's code compares (an unbacked size breaks the graph
there), even by a cause told before a later graph found the comparison."""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence

from tpu_lab.compile.causes.cause import CARRIED, bare, local_name, split_top
from tpu_lab.compile.causes.guard_members import EACH_SET, MEMBERS_FIX, member_said
from tpu_lab.compile.causes.guard_places import condition_place, held
from tpu_lab.compile.causes.guard_sizes import ON_TPU
from tpu_lab.compile.causes.instances import MARK_SAID
from tpu_lab.compile.causes.size_uses import size_in_source
from tpu_lab.compile.causes.size_values import QUOTIENT_FIX
from tpu_lab.compile.watching.watch_table import RowCause

_UNBACKED = (  # with its own proviso, where said
    r"torch\._dynamo\.decorators\.mark_unbacked\({}\) before the first call shares one graph"
    r"(?: (?:only )?where no code compares that size to a number or another size"
    r"(?: \(else a call raises a runtime assertion on it: then drop the mark and keep the extra graph\))?)?"
)
NO_UNBACKED = "mark_unbacked is no way out here: your code compares that size"
_BOUND_STAYS = "mark_unbacked would not share one graph, as sizes outside what this graph holds compile another"
_MADE = re.compile(r"Dynamo made (.+?) dynamic")
_MARK = re.compile(rf"to skip even this one: {MARK_SAID.pattern}, or pad to a few sizes")
_ONE_RANGE = re.compile(r"\d+ <= \S+ <= \d+|\S+ == \d+")  # a size held to a few values, never a remainder
# (H / 4) == 2.5, (x.size()[1] / 4) == 2.5: a float quotient of a number or of a size
_QUOTIENT_HELD = re.compile(r"\(?[A-Za-z_][\w.]*(?:\(\)\[\d+\])? / \d+\)? == -?\d+\.\d+")
_NUMBER_HELD = (  # mark_dynamic cannot help: the user's line holds a number computed from the size to one value
    "marking it dynamic would not widen that: your code makes one Python number of the size there (a dict key, "
    "a count, a NumPy call's argument), so each value of it is a graph of its own; pad to a few sizes (buckets) "
    "to bound them"
)


def compared_sizes(causes: Iterable[RowCause]) -> set[tuple[str, str]]:
    """(input, dim) of the sizes a cause found the user's own code compares (told ``NO_UNBACKED``)."""
    return {
        (n, d)
        for c in causes
        if NO_UNBACKED in c.fix
        for m in _MADE.finditer(f"{c.words} {c.fix}")
        for n, d in re.findall(r"([\w.\[\]']+) dim (\d+)", m[1])
    }


def compared_in_source(causes: Iterable[RowCause], file: str, first: int) -> set[tuple[str, str]]:
    """(input, dim) of the sizes a cause offers mark_unbacked on that the function's own source (``file``, from
    line ``first``) compares in a branch (``if seqlen > 1:`` after ``_bsz, seqlen = tokens.shape``): a size of 1
    is constant in its graph, so no guard of Dynamo's shows that comparison."""
    offered = {(m[1], m[2]) for c in causes for m in re.finditer(r"mark_unbacked\(([\w.]+), (\d+)\)", c.fix)}
    return {(n, d) for n, d in offered if size_in_source(file, first, n, d, compared=True)[0]}


def without_unbacked(cause: RowCause, sizes: Iterable[tuple[str, str]]) -> RowCause:
    """``cause`` with its mark_unbacked offer on each of ``sizes`` withdrawn: a later graph showed the user's
    code compares that size, where an unbacked size breaks the graph (an earlier cause offered it unknowing)."""
    fix = cause.fix
    for n, d in sizes:
        fix = re.sub(_UNBACKED.format(re.escape(f"{n}, {d}")), NO_UNBACKED, fix)
    return cause if fix == cause.fix else dataclasses.replace(cause, fix=fix)


def bounded(
    causes: list[RowCause], guards: list[str] | None, names: Sequence[tuple[str, str]], places: Mapping[str, str]
) -> list[RowCause]:
    """Causes saying later sizes or values reuse this graph, qualified where the graph's own ``guards`` hold
    a condition on what was made dynamic (``alpha <= 0.0`` from ``if alpha > 0:``; ``x.size()[0] <= 15``
    from torch's conv): they reuse it only while that holds. ``places``: Dynamo's comment per guard."""
    conditions, first = held(guards, names), _first_sizes(causes)  # the sizes before each change, read once
    out = []
    for c in causes:
        made = re.search(
            r"Dynamo made (.+?) dynamic|^(?:first compile; )?(.+?) dynamic from (?:the|this function's) first compile",
            f"{c.words} {c.fix}",
        )
        made = re.match(r"(.*)", (made[1] or made[2])) if made else None
        c = _branched_too(c, conditions, places)
        found = [(_plain(w, d), g) for d in (split_top(made[1]) if made else []) for w, g in conditions.get(d, [])]
        found = _past_one(found, split_top(made[1]) if made else [])
        if found and made and all(member_said(g) for _, g in found):  # `i in n`: the graph holds n's values
            c = _members_held(c, made[1], found, places)
        elif found and made:
            found.sort(key=lambda wg: " == " not in wg[1])  # a value held to one number first: each value a graph
            said = _said(found, places, made[1])
            words = c.words.replace(
                "so later values reuse this graph", f"so later values reuse this graph while {said}"
            )
            fix = re.sub(
                r"(later sizes|later values|new sizes and values) reuse this graph",
                rf"\1 reuse this graph while {said}, others compile another graph",
                c.fix,
                count=1,
            )
            if "from your line" in said:  # an unbacked size cannot decide the user's own comparison: a break there
                fix = re.sub(_UNBACKED.format("[^)]*"), NO_UNBACKED, fix)
            else:  # a bound the graph holds still compiles sizes past it: one graph is not shared
                fix = re.sub(_UNBACKED.format("[^)]*"), _BOUND_STAYS, fix)
            held_one = [
                w
                for w, g in found
                if (_ONE_RANGE.fullmatch(w) or _count_held(g)) and "from your line" in condition_place(g, places)
            ]
            if held_one and re.match(r"\S+ stays \d+\b", said):  # held to one size: no later size reuses it
                fix = f"{_NUMBER_HELD} (in this graph, {said})"  # TabNet's np.ceil chunk count
            elif held_one:
                fix = re.sub(_MARK, _NUMBER_HELD, fix.removeprefix("none needed: "), count=1)
                fix = fix.replace(ON_TPU, "")  # the fix pads already
            elif failed := next((w for w, _ in found if _holds_at(w, first) is False), None):
                fix = re.sub(_MARK, _MARK_TOO_LATE.format(failed), fix, count=1)
            if any(_QUOTIENT_HELD.fullmatch(local_name(g).strip()) for _, g in found):  # Swin's np.ceil(H / ws)
                words = words.replace(f"so later values reuse this graph while {said}", f"but in this graph {said}")
                fix = QUOTIENT_FIX
            c = dataclasses.replace(c, words=words, fix=fix)
        elif (carried := _CARRIED_SIZE.match(c.words)) and (subject := f"{carried[1]} dim {carried[2]}") in conditions:
            held_to = [(_plain(w, subject), g) for w, g in conditions[subject] if _count_held(g)]
            if held_to:  # GhostBN's chunk count: a carried value held to one size, with the break or without it
                said = _said(held_to, places, subject)
                words = f"{c.words}, and in this graph {said}, so every other size compiles a graph of its own"
                c = dataclasses.replace(c, words=words, fix=f"{_NUMBER_HELD}; removing the break leaves that number")
        out.append(c)
    return out


_CARRIED_SIZE = re.compile(r"(\S+) changed size \(dimension (\d+): .*the code before the break made it")
_MARK_TOO_LATE = (
    "marking it dynamic before the first call would not skip this one: the graph holds {0}, which the first "
    "call's sizes fail, so those sizes get a graph of their own either way; pad to a few sizes to bound them"
)


def _first_sizes(causes: Iterable[RowCause]) -> dict[str, int]:
    """The sizes before a change, as the causes tell them (``im dimension 2 changed 64 -> 96``), by the names
    Dynamo's conditions use (``im.size()[2]``)."""
    told = " ".join(c.words for c in causes)
    return {
        f"{n}.size()[{d}]": int(a) for n, d, a in re.findall(r"([\w.\[\]']+) dimension (\d+) changed (\d+) ->", told)
    }


def _past_one(found: list[tuple[str, str]], subjects: list[str]) -> list[tuple[str, str]]:
    """``found`` (words, guard) less the conditions every value from 2 up meets (``4 % (4*n) != 0``, ``n*n >= 2``):
    on a size they bound nothing (Dynamo compiles sizes 0 and 1 apart); on a number, which a dynamic graph
    takes at 0 and 1 too, they are said as the one condition they make together (``n >= 2``)."""
    out, small, first = [], set(), ("", "")
    for w, g in found:
        said = next((s for s in _spelled(subjects) if s in w), "")
        if not said or re.search(r"\d\.\d|\be[-+]?\d", w):  # another subject's, or a float's (1.5 > 1.0): as it is
            out.append((w, g))
            continue
        spelled = re.compile(rf"(?<![\w.]){re.escape(said)}(?![\w(\[])")
        at = {n: _holds_at(spelled.sub(str(n), w), {}) for n in (0, 1, *range(2, 34), 64, 127, 128, 1000, 4096)}
        if not all(v for n, v in at.items() if n > 1):  # None (not plain arithmetic): told as it is
            out.append((w, g))
        elif ".size()[" not in said:  # a number: 0 and 1, where they fail it, are what it bounds
            small |= {n for n in (0, 1) if not at[n]}
            first = first if first[0] else (said, g)
    if small:
        out.insert(0, (f"{first[0]} >= 2" if small == {0, 1} else f"{first[0]} != {min(small)}", first[1]))
    return out


def _spelled(subjects: list[str]) -> list[str]:
    """How conditions spell each subject: ``n``; ``x dim 0`` as ``x.size()[0]``."""
    return [f"{n}.size()[{d}]" if d else n for n, _, d in (s.partition(" dim ") for s in subjects)]


def _holds_at(condition: str, sizes: Mapping[str, int]) -> bool | None:
    """Whether ``condition`` (``3*im.size()[2]*im.size()[3] > 20480``) holds at ``sizes``; None where a name
    in it has no size there, or it is not plain arithmetic."""
    text = re.sub(r"[\w.\[\]']+\.size\(\)\[\d+\]", lambda m: str(sizes.get(m[0], m[0])), condition)
    text = re.sub(r"\b(?:torch\.sym_|math\.)(max|min|ceil|floor|trunc|float)\(", r"\1(", text)  # Dynamo's own
    if not re.fullmatch(r"[\d\s()+\-*/%<>=!,a-z.]+", text) or not re.search(r"[<>]|==|!=", text):
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    allowed = (ast.Expression, ast.Compare, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop, ast.cmpop)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]  # only the arithmetic's own functions
    if any(n.id not in _ARITHMETIC or id(n) not in called for n in names):
        return None
    if not all(isinstance(n, (*allowed, ast.Call, ast.Name, ast.Load)) for n in ast.walk(tree)):
        return None
    try:  # numbers, comparisons and the arithmetic Dynamo writes only
        return bool(eval(compile(tree, "<condition>", "eval"), {"__builtins__": {}, **_ARITHMETIC}))
    except (ArithmeticError, TypeError, ValueError):
        return None


_ARITHMETIC = {"max": max, "min": min, "ceil": math.ceil, "floor": math.floor, "trunc": math.trunc, "float": float}


def _members_held(c: RowCause, made: str, found: list[tuple[str, str]], places: Mapping[str, str]) -> RowCause:
    """A list's items made dynamic that the new graph tests membership on (``if i in blocks_to_take:``): it
    holds which values the list has, so no later set of values reuses it."""
    name = re.sub(r"\[\d+\].*", "", made.split(", ")[0])
    where = condition_place(found[0][1], places)
    said = list(dict.fromkeys(w for w, _ in found))
    held_in = [w.split()[0] for w in said if " not in " not in w]
    held_out = [w.split()[0] for w in said if " not in " in w]
    has = "; ".join(
        [f"{', '.join(held_in)} in {name}"] * bool(held_in) + [f"{', '.join(held_out)} not"] * bool(held_out)
    )
    words = re.sub(
        r"Dynamo made (.+?) dynamic, so later values reuse this graph",
        rf"Dynamo made \1 dynamic, but the graph holds which values {name} has ({has}){where}: {EACH_SET}",
        c.words,
    )
    return dataclasses.replace(c, words=words, fix=MEMBERS_FIX.format(name), kind="members")


def _branched_too(c: RowCause, conditions: Mapping[str, list[tuple[str, str]]], places: Mapping[str, str]) -> RowCause:
    """A value baked in through a number the user's own branch also compares (DARTS' ``drop_prob > 0.`` beside
    ``bernoulli_(1. - drop_prob)``): held in a tensor, that branch would break the graph, or make Dynamo give up
    on the whole function, so the fix keeps a Python flag for the branch and passes only the value."""
    m = re.search(r"from (.+?) held in tensors|^compute what depends on (\S+) outside", c.fix)
    branches = [
        (w, p)
        for n in (split_top(m[1] or m[2]) if m else [])
        for w, g in conditions.get(n, [])
        if "from your line" in (p := condition_place(g, places))
    ]
    if not branches:
        return c
    w, p = branches[0]
    flag = (
        f"; but your code also branches on it ({w}{p}): held in a tensor, that branch breaks the graph (or Dynamo "
        "gives up on the function), so keep a Python flag for the branch (set once, such as a bool for p > 0) and "
        "pass only the value as a tensor"
    )
    at = " so the graph reads it at run time"
    return dataclasses.replace(c, fix=c.fix.replace(at, at + flag, 1) if at in c.fix else c.fix + flag)


def _said(found: list[tuple[str, str]], places: Mapping[str, str], subject: str) -> str:
    """The conditions (words, Dynamo's guard) a graph holds on ``subject``, said once each with the lines
    that set them: a few short ones by name (``stride != 1 and 1 <= stride hold (from your line 11: ...)``),
    many, or long ones, by their count and lines, never twenty expressions in a row."""
    held = {m[1]: m[2] for w, _ in found if (m := re.fullmatch(r"(\S+) == (-?\d+)", w))}  # n*m == 512: one value
    by_place: dict[str, list[str]] = {}
    for w, g in found:
        said = by_place.setdefault(condition_place(g, places), [])
        side = w.split(" ", 1)[0]
        w = f"{side} stays {held[side]}" if side in held else w  # its bounds (n*m < 1024) say no more
        if w not in said:
            said.append(w)
    every = [w for ws in by_place.values() for w in ws]
    if len(every) <= 3 and all(len(w) <= 48 and CARRIED not in w for w in every):
        verb = lambda ws: "" if all(" stays " in w for w in ws) else " hold" if len(ws) > 1 else " holds"  # noqa: E731
        return " and ".join(f"{' and '.join(ws)}{verb(ws)}{p}" for p, ws in by_place.items())
    lines = [p.strip()[1:-1] for p in by_place if p]
    lines = [p for p in lines if not any(o != p and o.startswith(p) for o in lines)]  # a line said twice: once
    where = "; ".join(dict.fromkeys(lines)).replace("; from your line", "; line")
    where = f" ({where})" if where else ""
    held_to = next(((w, g) for w, g in found if " == " in g and len(w) <= 80), None)  # one value: a graph per value
    # the short ones by name (K != 1: a 0/1 case), the rest counted
    shown = [w for w in every if len(w) <= 48 and CARRIED not in w][:3]
    if held_to is None and shown and len(shown) < len(every):
        rest = len(every) - len(shown)
        more = f"{rest} more condition{'s' if rest > 1 else ''} on {subject} pass{'es' if rest == 1 else ''}"
        return f"{' and '.join(shown)} {'hold' if len(shown) > 1 else 'holds'}, and {more}{where}"
    if held_to is None:
        many = f"the {len(every)} conditions it holds on {subject} pass"
        return (many if len(every) > 1 else f"the condition it holds on {subject} passes") + where
    more = f" and {len(every) - 1} more conditions on {subject} pass{where}" if len(every) > 1 else ""
    holds = "" if " stays " in held_to[0] else " holds"
    return f"{held_to[0]}{holds}{condition_place(held_to[1], places) if not more else ''}{more}"


_SYMBOLIC = re.compile(r"torch\.sym_\w+\(|math\.(?:trunc|ceil|floor)\(|\b(?:Max|Min|CeilToInt|FloorToInt)\(")


def _count_held(guard: str) -> bool:
    """A number computed from a size with Dynamo's rounding (``1 + math.ceil(... / 12) == 3``: a window count)
    held to one value: each count a graph; never a remainder (``x.size()[1] % 2 == 1``), which many sizes meet."""
    return bool(re.fullmatch(r"\(?.*\.size\(\)\[\d+\].*? == -?\d+(?:\.\d+)?", guard.strip())) and bool(
        (_SYMBOLIC.search(guard) or " / " in guard) and "%" not in guard and "Mod(" not in guard
    )  # a size over a number held to one quotient (GhostBN's np.ceil(x.shape[0] / 16)): one size


def _plain(condition: str, subject: str) -> str:
    """A condition in words a reader can check: one holding Dynamo's symbolic arithmetic (``math.trunc(32.0*
    torch.sym_float(...))``, from the user's rounding of a size) is said as the range it keeps ``subject`` in;
    Dynamo's sympy text as Python reads it (``(1 + (((-1) + n) // 2)) != 32`` -> ``1 + ((n - 1) // 2) != 32``)."""
    if m := re.fullmatch(r"\(?(\S+) / (\d+)\)? == (\d+\.\d+)", condition):  # x.size()[0] / 16 == 0.25: x dim 0 is 4
        return f"{m[1]} stays {float(m[3]) * int(m[2]):g}"
    if (m := re.fullmatch(r"\(?\((\S+) // (\d+)\) / (\d+)\)? == (\d+(?:\.\d+)?)", condition)) and (
        q := float(m[4]) * int(m[3])
    ).is_integer():  # DiT's grid: (h // 8) / 4 == 1.5, so h // 8 is 6: h is one of 48 to 55
        low = int(q) * int(m[2])
        return f"{m[1]} stays within {low} to {low + int(m[2]) - 1}"
    if not _SYMBOLIC.search(condition):
        parts = re.split(r"( (?:!=|==|<=|>=|<|>) )", re.sub(r"\(\(-1\) \+ ((?:[^()]|\(\))+)\)", r"(\1 - 1)", condition))
        said = "".join(bare(p) if i % 2 == 0 else p for i, p in enumerate(parts))
        if m := re.fullmatch(r"(\S+) ([-+]) (\d+) (!=|==|[<>]=?) (-?\d+)", said):  # L - 1 != 1 as L != 2
            said = f"{m[1]} {m[4]} {int(m[5]) + int(m[3]) * (1 if m[2] == '-' else -1)}"
        if m := re.fullmatch(r"(\d+) \+ (\S+) (!=|==|[<>]=?) \1 \+ (\S+)", said):  # 6 + a <= 6 + b as a <= b
            said = f"{m[2]} {m[3]} {m[4]}"
        if (
            (m := re.fullmatch(r"(\d+)\*(\S+) (!=|==|[<>]=?) (-?\d+)", said))
            and int(m[1])
            and not int(m[4]) % int(m[1])
        ):
            said = f"{m[2]} {m[3]} {int(m[4]) // int(m[1])}"  # 3*n != 3 as n != 1
        return said
    if m := re.fullmatch(r"\(?(.*?)\)? == (-?\d+)", condition):  # range(math.ceil(...) + 1): a count of it
        return f"the number your code computes from {subject} stays {m[2]}"
    return f"the range the graph computed for {subject} (from arithmetic on sizes)"
