"""The summary's lines ("causes and fixes"), one per fix: fixes that differ only in which dimension of one tensor
they mark are one, and so are fixes that mark the same tensors together (a list whose items each changed length:
one change, said once with every item it made dynamic)."""

from __future__ import annotations

import re

_MARK_CALL = re.compile(r"(?P<call>[\w.]*mark_dynamic)\((?P<name>[^,()]+), (?P<dim>\d+)\)")


def dims_joined(fixes: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """The summary's (label, fix) -> compiles, where fixes that differ only in which dimension of one tensor
    they mark (an image's height and width) are one fix naming each mark, ``maybe_mark_dynamic(x, 2);
    maybe_mark_dynamic(x, 3)``, with their compiles added, in the order first said."""
    dims: dict[tuple[str, str], list[str]] = {}
    count: dict[tuple[str, str], int] = {}
    for (label, fix), n in fixes.items():
        marks = list(_MARK_CALL.finditer(fix or ""))
        one = len(marks) == 1
        shape = (label, fix[: marks[0].start("dim")] + "\0" + fix[marks[0].end("dim") :]) if one else (label, fix)
        dims.setdefault(shape, []).append(marks[0]["dim"] if one else "")
        count[shape] = count.get(shape, 0) + n
    out = {}
    for (label, fix), found in dims.items():
        said = fix
        if "\0" in fix and (m := _MARK_CALL.search(fix.replace("\0", "0"))):
            calls = "; ".join(f"{m['call']}({m['name']}, {d})" for d in dict.fromkeys(found))  # pasted: each runs
            said = fix[: m.start()] + calls + fix[m.end() :]
        out[label, said] = count[label, fix]
    return out


_TOGETHER = ": together, as each alone saves nothing"
_MADE = re.compile(r"Dynamo made (.+?) dynamic")


def marks_joined(fixes: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """``fixes`` (label, fix) -> compiles, where fixes of one label that mark the same tensors together (in
    any order) are one, naming every input Dynamo made dynamic, with their compiles added."""
    groups: dict[tuple[str, frozenset[str]], list[tuple[str, int]]] = {}
    for (label, fix), n in fixes.items():
        calls = frozenset(m[0] for m in _MARK_CALL.finditer(fix)) if _TOGETHER in fix else frozenset({fix})
        groups.setdefault((label, calls), []).append((fix, n))
    out = {}
    for (label, _), said in groups.items():
        fix = said[0][0]
        made = [m[1] for f, _ in said if (m := _MADE.search(f))]
        if len(said) > 1 and (first := _MADE.search(fix)):
            fix = f"{fix[: first.start(1)]}{', '.join(dict.fromkeys(made))}{fix[first.end(1) :]}"
        out[label, fix] = sum(n for _, n in said)
    return out
