"""A membership test on a list of ints (``if i in blocks_to_take:``, DINOv2's ``get_intermediate_layers(x,
n=[2, 5])``): Dynamo checks each item against the value (``n[1] == 4 or n[0] == 4``), so the graph holds which
values the list has, and each new set of values is a graph of its own, dynamic items or not."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tpu_lab.compile.causes.cause import Cause, local_name

MEMBER = re.compile(
    r"(?P<neg>not \()?(?P<list>(?:L\['\w+'\]|[A-Za-z_]\w*)(?:\.\w+)*)\[\d+\] == (?P<c>-?\d+)(?: or (?P=list)\[\d+\] == (?P=c))+\)?"
)
"""Dynamo's guard for ``c in xs`` (``not (...)``: c not in xs), one ``==`` per item, raw or in local names."""

EACH_SET = "each new set of values it holds compiles a graph of its own"
MEMBERS_FIX = (
    "expected once per set of values {} holds: keep the sets few, or raise torch._dynamo.config.recompile_limit "
    "to the number you use"
)


def member_said(guard: str) -> tuple[str, list[str]] | None:
    """(``4 in n`` or ``0 not in n``, the items the guard checks) for a membership guard; None for others."""
    if not (m := MEMBER.fullmatch(guard.strip())):
        return None
    items = re.findall(rf"{re.escape(m['list'])}\[\d+\]", guard)
    return f"{m['c']} {'not in' if m['neg'] else 'in'} {local_name(m['list'])}", list(dict.fromkeys(items))


def member_words(guard: str) -> Cause | None:
    """A failed membership guard in words: the value came into the list or left it; None for other guards."""
    if not (m := MEMBER.fullmatch(guard.strip())):
        return None
    name = local_name(m["list"])
    moved = "is now in" if m["neg"] else "is no longer in"
    return Cause(
        "members",
        f"{m['c']} {moved} {name} (your code checks which values {name} holds, as `i in {name}` does: {EACH_SET})",
        guard,
        MEMBERS_FIX.format(name),
    )


def members_joined(causes: Sequence[Cause]) -> Cause:
    """Membership changes of one list in one compile, as one: ``0 and 3 are now in n; 1 and 4 are no longer``."""
    came: list[str] = []
    left: list[str] = []
    for c in causes:
        if m := re.match(r"(-?\d+) is (now|no longer) in ", c.words):
            (came if m[2] == "now" else left).append(m[1])
    name = m[1] if (m := re.search(r" in (\S+) \(", causes[0].words)) else "it"
    now = f"{' and '.join(came)} {'is' if len(came) == 1 else 'are'} now in {name}" if came else ""
    gone = f"{' and '.join(left)} {'is' if len(left) == 1 else 'are'} no longer" + ("" if came else f" in {name}")
    said = "; ".join(filter(None, [now, gone if left else ""]))
    reason = causes[0].words[causes[0].words.index(" (") :]
    return dataclasses.replace(causes[0], words=said + reason, guard="\n".join(dict.fromkeys(c.guard for c in causes)))
