"""A graph break in words: Dynamo's reason, with its own hints as the fix. Pure: a string in, a Cause out."""

from __future__ import annotations

import dataclasses

from tpu_lab.compile.causes.cause import Cause

_UNHELPFUL = ("Please report an issue", "fundamental", "Please file an issue")


def graph_break_words(reason: str, library: str = "") -> Cause:
    """A graph break in words, with Dynamo's own hints as the fix (its explanation where it gives one).
    ``library``: file:line where it broke when that is library code the user's line calls; then hints
    that say to edit the code at the break are no fix for the user, and the words say where it is."""
    lines = [line.strip() for line in reason.strip().splitlines()]
    hints = [h.split("Hint:", 1)[1].strip() for h in lines if h.startswith("Hint:")]
    hints = [h for h in hints if not any(u in h for u in _UNHELPFUL)]
    if "generic_jump" in reason or "Data-dependent branching" in reason:
        cause = Cause(
            "data_dependent",
            "data-dependent branching: an if/while on a tensor's value",
            lines[0] if lines else reason,
            "express the branch with torch.cond, or make it branchless (torch.where, torch.clamp)",
        )
    else:
        explanation = next((h.split("Explanation:", 1)[1].strip() for h in lines if h.startswith("Explanation:")), "")
        first = next((h for h in lines if h and not h.startswith("Encountered graph break")), reason.strip())
        cause = Cause("graph_break", explanation or first, first, "; ".join(hints[:2]))
    if not library:
        return cause
    if "graph_break()" in reason or "User-inserted graph break" in reason:
        fix = "none on your side: the library breaks the graph there on purpose"
    else:
        fix = "it is in library code: call it outside the compiled function, or accept the break"
    return dataclasses.replace(cause, words=f"{cause.words} (inside {library}, library code)", fix=fix)
