"""The texts inside a TORCH_TRACE log's payloads that the reader needs: the recompile reasons (a JSON
list in some torch versions, plain text in others) and a resume function's bytecode as ``dis`` printed it
(where it continues after its graph break)."""

from __future__ import annotations

import json
import re

_GRAPH = re.compile(r"^\d+/\d+: ", re.M)  # each reason opens with the graph it failed against


def reasons_of(payload: str) -> list[str]:
    """The recompile reasons: a JSON list in some torch versions, plain text (one reason per graph, each
    opening with the graph's id) in others."""
    try:
        found = json.loads(payload)
    except ValueError:
        starts = [m.start() for m in _GRAPH.finditer(payload)] or [0]
        return [
            payload[a:b].strip()
            for a, b in zip(starts, [*starts[1:], len(payload)], strict=True)
            if payload[a:b].strip()
        ]
    return [str(r) for r in found] if isinstance(found, list) else [str(found)]


_DIS = re.compile(r"^\s*(?P<line>\d+)?\s+(?:>>)?\s*(?P<offset>\d+) (?P<op>[A-Z_]+)(?:.*\(to (?P<to>\d+)\))?")


def resume_line(text: str) -> int:
    """The line a resume function continues at, from its bytecode as ``dis`` printed it (the log's copy):
    its prologue jumps past the break; from there, following unconditional jumps, the first instruction on
    another line than the first (the live watch reads the code object the same way). 0: not found."""
    code, line = [], 0
    for row in text.splitlines():
        m = _DIS.match(row)
        if m is None:
            continue
        line = int(m["line"]) if m["line"] else line
        code.append((int(m["offset"]), m["op"], line, int(m["to"]) if m["to"] else None))
    if not code:
        return 0
    at = {offset: i for i, (offset, *_rest) in enumerate(code)}
    jump = next((c for c in code if c[1].startswith("JUMP")), None)
    i, seen, back = at.get(jump[3]) if jump and jump[3] is not None else None, set(), False
    while i is not None and i < len(code) and i not in seen:
        seen.add(i)
        offset, op, n, to = code[i]
        if n and n != code[0][2] and (n > code[0][2] or back):  # above the break: a loop's head, or a `with` re-entered
            return n
        if op in ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_ABSOLUTE") and to is not None:
            back = back or to < offset
            i = at.get(to)
        elif op.startswith("RETURN"):
            return 0
        else:
            i += 1
    return 0
