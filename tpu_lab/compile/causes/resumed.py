"""Causes of a compile of the part of a function after a graph break (Dynamo's resumed frame): its
inputs are the function's own locals, which the caller cannot ``mark_dynamic`` (marking inside compiled
code is refused), and the value carried over the break is named as the user's code names it."""

from __future__ import annotations

import dataclasses
import linecache
import re

from tpu_lab.compile.causes.cause import CARRIED, Cause
from tpu_lab.compile.sources.frames import FunctionKey

_CARRIED_ITEM = re.compile(rf"(?:{re.escape(CARRIED)}|the carried value)\[(\d+)\]")
_CARRIED_NAMED = re.compile(r"\bthe carried value(?!\w| \d)")  # whole, or an item of it: lam[0]


def _break_line(function: FunctionKey) -> tuple[str, str, str, dict[int, str]]:
    """The break's line of a resumed frame: (its number, its code, the one name it assigns or '', the names a
    tuple assignment unpacks into: ``a, b = f()``, where the carried value is f()'s)."""
    line = function.label.rpartition(" ")[-1]
    code = linecache.getline(function.filename, int(line)).strip() if line.isdigit() else ""
    target = re.match(r"^([A-Za-z_]\w*)\s*=(?!=)", code)
    unpacked = re.match(r"^\(?\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s*,?\s*\)?\s*=(?!=)", code)
    items = dict(enumerate(n.strip() for n in unpacked[1].split(","))) if unpacked else {}
    if target and (picked := re.search(r"\)\[(\d+)\]\s*(?:#.*)?$", code)):  # inds = torch.where(m)[0]: the
        return line, code, "", {int(picked[1]): target[1]}  # carried value is the call's tuple, its item the name
    loop = re.match(r"^for\s+.+?\s+in\s+(.+?):\s*(?:#.*)?$", code)  # a break in a loop's header: the list it walks
    return line, code, target[1] if target else (loop[1] if loop and len(loop[1]) <= 60 else ""), items


def _items_named(text: str, items: dict[int, str]) -> str:
    return _CARRIED_ITEM.sub(lambda m: items.get(int(m[1]), m[0]), text)


def carried_named(text: str, function: FunctionKey) -> str:
    """``text`` (what Dynamo made dynamic: ``the carried value[3] dim 0``) with the carried value named as the
    break line assigns it (``lam``), as the causes name it; unchanged where the line assigns no name."""
    _, _, target, items = _break_line(function)
    text = _items_named(text, items)
    return _CARRIED_NAMED.sub(target, text) if target else text


def in_resumed_frame(causes: list[Cause], function: FunctionKey) -> list[Cause]:
    """``causes`` of a resumed frame of ``function``: the break is what to change, and the carried value is
    the variable the break line assigns (``sizes = lengths.tolist()``: ``sizes[0] changed``), else that
    line quoted."""
    line, code, target, items = _break_line(function)
    instead = (
        f"none needed once Dynamo makes the size dynamic; to mark it, remove the graph break at line {line} "
        "(see its fix) so the function is one graph, and mark the function's own input"
    )
    out = []
    for c in causes:
        words, fix = c.words, instead if "mark_dynamic(" in c.fix else c.fix
        words, fix = (_items_named(t, items) for t in (words, fix))
        if target:
            words, fix = words.replace(CARRIED, target), fix.replace(CARRIED, target)
        elif code:
            words = words.replace(CARRIED, f"{CARRIED} (from line {line}: {code[:80]})", 1)
        out.append(dataclasses.replace(c, words=words, fix=fix))
    return out
