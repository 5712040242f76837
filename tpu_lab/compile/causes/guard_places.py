"""Where a guard was set, said only as far as it is known: the user's own line (its code quoted only as a
whole statement, never a cut fragment), a check inside a library (torch's conv choosing a kernel by batch
size), by the file's package on this machine, or the bare place where the file is not here. And the
conditions a graph still holds on what it made dynamic (``x.size()[0] <= 15``, ``alpha <= 0.0``), so that
"later values reuse this graph" says while which holds. Pure but for finding files."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from tpu_lab.compile.causes.cause import Failure, bare, local_name
from tpu_lab.compile.causes.guard_members import member_said
from tpu_lab.compile.causes.source_file import statement_at, whole_statement
from tpu_lab.compile.sources.frames import renamed, where_label
from tpu_lab.compile.sources.packages import USER, package_of, short_path, unshortened

_PLACE = re.compile(r"(?P<file>\S+\.py):(?P<line>\d+) in ")
_SIZE = re.compile(r"(?P<source>L\[[^\]]+\](?:\[[^\]]+\]|\.\w+)*)\.size\(\)\[(?P<dim>\d+)\]")
_NUMBER = re.compile(r"L\['(?P<name>\w+)'\](?P<attrs>(?:\.\w+)*)(?![\[.\w(])")  # n, self.drop_path_prob
_COMPARED = re.compile(r"<=?|>=?|!=")


_INNER = re.compile(r"\S+\.py:\d+ in [\w<>]+ \((\S+\.py):\d+ in ([\w<>]+)\)")  # the frame that set it, inside
_TRACER = ("_dynamo/", "fx/", "utils/_sympy/", "_subclasses/")  # Dynamo or fake tensors evaluating the user's code


def _inside(comment: str) -> str:
    """``torch's cdist`` where Dynamo's comment on a guard names a frame of torch's own code, under the user's
    line, that set it (``s11.py:26 in forward (functional.py:1535 in cdist)``: an algorithm switch); '' where
    the frame is Dynamo's own or fake tensors' evaluating the user's expression, or none is named."""
    for m in _INNER.finditer(comment):
        if not m[1].startswith(_TRACER) and (package := owner(f"{m[1]}:0")) not in (None, USER):
            return "" if m[2].startswith("_") else f"{package}'s {m[2].removesuffix('_meta')}"  # a public one only
    return ""


_FRAMEWORK = "the guard itself is not due user code"  # Dynamo's own 0/1 specialisation, shown at a first use


def own_bound(comment: str) -> bool:
    """Whether the first place Dynamo's comment on a guard names is its own 0/1 specialisation's first use."""
    found = list(_PLACE.finditer(comment))
    return bool(found) and _FRAMEWORK in comment[found[0].end() : found[1].start() if len(found) > 1 else None]


def slocs(comment: str) -> list[tuple[str, str]]:
    """(code, file:line) of each place Dynamo's comment on a guard names: one, or for a range (``2 <= t <=
    11  # if t > 1:  # a.py:14 in f (...) and a = alphas[t]  # a.py:11 in f (...)``) where its lower and its
    upper bound were set. A place Dynamo says is its own specialisation, not the user's code, is left out."""
    found = [m for m in _PLACE.finditer(comment) if not m["file"].startswith("(")]  # not a frame inside it
    out, start = [], 0
    for i, m in enumerate(found):
        end = comment.rfind(") and ", m.end(), found[i + 1].start()) + 1 if i + 1 < len(found) else len(comment)
        end = end or len(comment)
        code = comment[start : m.start()].rpartition("  # ")[0].strip()
        if _FRAMEWORK not in comment[m.end() : end]:
            out.append((code, f"{m['file']}:{m['line']}"))
        start = end + len(" and ") if end < len(comment) else end
    return out


def owner(where: str) -> str | None:
    """The package of the file at ``where`` (``file:line``, as Dynamo names it): ``USER`` for the user's
    own code, ``"torch"``, ``"transformers"``, ...; None where the file is not on this machine."""
    path = unshortened(where.rpartition(":")[0]) if ":" in where else ""
    return package_of(path) if path else None


def set_by(f: Failure) -> tuple[str, str]:
    """(who set the guard, in words: `` by your code at train.py:14 (if n > 3:)``, `` by a check inside torch
    (conv.py:560), not by your code``, `` at conv.py:560`` where the file is not here, '' where no place is
    known; the library that set it, '' for the user's code or an unknown one)."""
    if not f.where:
        return "", ""
    package, at = owner(f.where), _short(f.where)
    if package is None:
        return f" at {at}", ""
    if package != USER:
        # a range's other bound may be the user's own line (torch's 2 <= size, the user's size <= 16)
        yours = next(((c, w) for c, w in f.also if owner(w) == USER), None)
        if yours is None:
            return f" by a check inside {package} ({at}), not by your code", package
        said = whole_statement(yours[0])
        return f" by your code at {_short(yours[1])}" + (f" ({said})" if said else "") + f" and inside {package}", ""
    code = whole_statement(f.code)
    more = "".join(  # a range's other bound, set at another line of the user's
        f" and at {_short(w)}" + (f" ({whole_statement(c)})" if whole_statement(c) else "")
        for c, w in f.also
        if w != f.where and _short(w) != at and owner(w) == USER
    )
    return f" by your code at {at}" + (f" ({code})" if code else "") + more, ""


# two sizes held a fixed distance apart (np.abs(h - w) took their difference as a number); equal sizes are a
# broadcast's or a cat's, which every later pair of equal sizes meets: no bound worth telling
_SIZES_RELATED = re.compile(r"(\S+\.size\(\)\[\d+\]) == -?\d+ \+ (\S+\.size\(\)\[\d+\])")


def held(guards: Sequence[str] | None, names: Sequence[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """The conditions (``<``, ``<=``, ``!=``) a graph's own ``guards`` hold, by what they bound in the user's
    names (``x dim 0``, ``alpha``), each as (its words, Dynamo's guard): a value or size outside one
    compiles another graph. Dynamo's own ``2 <= size`` (sizes 0 and 1 are graphs of their own) is left out."""
    out: dict[str, list[tuple[str, str]]] = {}
    slots = {raw: user for raw, user in names if re.fullmatch(r"___stack\d+", raw) and "'" not in user}
    for g in guards or ():
        text = re.sub(r"^2 <= (?=\S+\.size\(\)\[\d+\])", "", g.strip())
        if "9007199254740992" in text:  # 2**53: Dynamo's own bound for a size read as a float, never the code's
            continue
        # a carried value by what its line calls it, before local_name makes it words: sim[mask].size()[0]
        text = re.sub(r"L\['(___stack\d+)'\]", lambda m: f"L['{slots[m[1]]}']" if m[1] in slots else m[0], text)
        if member := member_said(text):  # `i in blocks` on a list of ints: each item checked against i
            for item in member[1]:
                out.setdefault(renamed(local_name(item), names), []).append((member[0], g.strip()))
            continue
        held_to = re.fullmatch(r".+[-+*/%].+ == -?\d+(?:\.\d+)?", text)  # computed from sizes, held to one value
        held_to = held_to or _SIZES_RELATED.fullmatch(text)  # np.abs(h - w): h == 10 + w
        if (
            ("==" in text and not held_to)
            or not (held_to or _COMPARED.search(text))
            or text.startswith(("___", "not ", "hasattr("))
        ):
            continue
        said = renamed(local_name(text), names)
        if held_to:  # ((-1) + k + T) // k) == 2 as a reader writes it
            left, _, n = said.rpartition(" == ")
            said = f"{bare(left)} == {n}"
        said = as_range(text, names) or said
        if m := re.fullmatch(r"(-?[\d.]+) ([<>]=?) ([^<>=!]+)", said):  # 60 <= x.size()[1] as x.size()[1] >= 60
            said = f"{m[3]} {_FLIPPED[m[2]]} {m[1]}"
        if m := re.fullmatch(r"(\d+)\*([\w.\[\]()]+) (>=|>) (\d+)", said):  # 32*L_Q >= 2 as L_Q >= 1
            bound = -(-int(m[4]) // int(m[1])) if m[3] == ">=" else int(m[4]) // int(m[1]) + 1
            said = f"{m[2]} >= {bound}"
        if re.fullmatch(r"\S+\.size\(\)\[\d+\] >= 0", said):  # every size holds it: no bound to tell
            continue
        subjects = [f"{local_name(m['source'])} dim {m['dim']}" for m in _SIZE.finditer(text)]
        subjects += [m["name"] + m["attrs"] for m in _NUMBER.finditer(text)]
        for s in dict.fromkeys(renamed(s, names) for s in subjects):
            if (said, g.strip()) not in out.setdefault(s, []):  # one said both ways is said once where told
                out[s].append((said, g.strip()))
    return {s: _tightest(conditions) for s, conditions in out.items()}


def _tightest(conditions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each one-sided bound kept only where no other on the same value implies it (``x.size()[1] >= 31``
    beside ``>= 2`` and ``>= 1``: the 31 alone)."""
    bounds = [(m[1], m[2][0], int(m[3])) if (m := _BOUND.fullmatch(w)) else None for w, _ in conditions]

    def implied(b: tuple[str, str, int]) -> bool:
        tighter = (o for o in bounds if o and o != b and o[:2] == b[:2])
        return any(o[2] > b[2] if b[1] == ">" else o[2] < b[2] for o in tighter)

    return [c for c, b in zip(conditions, bounds, strict=True) if b is None or not implied(b)]


_BOUND = re.compile(r"(.+) ([<>]=?) (-?\d+)")


_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ANY_SIZE = re.compile(r"(?:L\[[^\]]+\]|(?<![\w.'\]])[A-Za-z_]\w*)(?:\[[^\]]+\]|\.\w+)*\.size\(\)\[\d+\]")  # named too
_SCANNED = 4096  # sizes tried when a condition of one size is said as the range it keeps


def as_range(condition: str, names: Sequence[tuple[str, str]]) -> str:
    """A condition on arithmetic of one size (``1 + ((-1 + L['x'].size()[2]) // 8) == 12``) as the range of
    that size it holds (``89 <= x.size()[2] <= 96``), or the one remainder it keeps (``((8 + 8*s) % 16) ==
    0`` as ``x.size()[1] % 2 == 1``), found by trying each size; '' where it holds on more than one input or
    is neither."""
    sizes = {m[0] for m in _ANY_SIZE.finditer(condition)}
    expr = _ANY_SIZE.sub("s", condition)
    if len(sizes) != 1 or not re.search(r"[-+*/%]", expr) or not re.fullmatch(r"[\d\s+\-*/%()=<>!s]+", expr):
        return ""
    kept = _kept(expr)
    return kept.replace("{size}", renamed(local_name(sizes.pop()), names)) if kept else ""


@functools.cache  # a graph's guards are read at each of its causes: the scan once per expression
def _kept(expr: str) -> str:
    """What ``expr`` (digits, operators and the size ``s``) keeps of ``s``, with ``{size}`` for its name."""
    code = compile(expr, "<guard>", "eval")

    def holds(s: int) -> bool:
        try:
            return bool(eval(code, {"__builtins__": {}}, {"s": s}))  # only digits, operators and s: checked
        except ArithmeticError:
            return False

    kept = [holds(s) for s in range(_SCANNED)]
    if not any(kept):
        return ""
    low, high = kept.index(True), _SCANNED - 1 - kept[::-1].index(True)
    if all(kept[low : high + 1]):
        if low == high:
            return f"{{size}} == {low}"
        if high == _SCANNED - 1:
            return f"{{size}} >= {low}"
        return f"{{size}} <= {high}" if low <= 2 else f"{low} <= {{size}} <= {high}"
    for period in range(2, 65):  # Dynamo's own 2 <= size aside, the same every period sizes, one remainder kept
        if all(kept[s] == kept[s + period] for s in range(2, _SCANNED - period)):
            kept_at = {s % period for s in range(2, 2 + period) if kept[s]}
            return f"{{size}} % {period} == {kept_at.pop()}" if len(kept_at) == 1 else ""
    return ""


def condition_place(guard: str, places: Mapping[str, str]) -> str:
    """Where the code set ``guard`` (``places``: a guard's text -> Dynamo's comment on it, ``if alpha >
    0:  # train.py:14 in mix``), in words: `` (from your line 14: if alpha > 0:)``, both lines of a range
    whose bounds two lines set, `` (a check inside torch)``; '' where not known."""
    said: list[str] = []
    for code, where in slocs(places.get(guard, "")):
        package = owner(where)
        if package is None:
            continue
        line = where.rpartition(":")[2]
        text = (
            f"a check inside {package}"
            if package != USER
            else f"line {line}" + (f": {statement}" if (statement := statement_at(code, where)) else "")
        )
        if text not in said:
            said.append(text)
    if not said:
        return ""
    if not said[0].startswith("line "):
        return f" ({said[0]})" if len(said) == 1 else f" ({' and '.join(said)})"
    inside = f", a check inside {checker}" if (checker := _inside(places.get(guard, ""))) else ""
    return f" (from your {' and '.join(said)}{inside})"


def _short(where: str) -> str:
    path, _, line = where.rpartition(":")
    if line.isdigit() and path.endswith("__init__.py"):  # a package's own file: by its package's folder too
        return f"{short_path(unshortened(path) or path)}:{line}"
    return where_label(path, int(line)) if line.isdigit() else where
