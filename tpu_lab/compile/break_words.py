"""A graph break in words: Dynamo's reason, with its own hints as the fix. Pure: a string in, a Cause out."""

from __future__ import annotations

from tpu_lab.compile.cause import Cause

_UNHELPFUL = ("Please report an issue", "fundamental", "Please file an issue")


def graph_break_words(reason: str) -> Cause:
    """A graph break in words, with Dynamo's own hints as the fix (its explanation where it gives one)."""
    lines = [line.strip() for line in reason.strip().splitlines()]
    hints = [h.split("Hint:", 1)[1].strip() for h in lines if h.startswith("Hint:")]
    hints = [h for h in hints if not any(u in h for u in _UNHELPFUL)]
    if "generic_jump" in reason or "Data-dependent branching" in reason:
        return Cause(
            "data_dependent",
            "data-dependent branching: an if/while on a tensor's value",
            lines[0] if lines else reason,
            "express the branch with torch.cond, or make it branchless (torch.where, torch.clamp)",
        )
    explanation = next((h.split("Explanation:", 1)[1].strip() for h in lines if h.startswith("Explanation:")), "")
    first = next((h for h in lines if h and not h.startswith("Encountered graph break")), reason.strip())
    return Cause("graph_break", explanation or first, first, "; ".join(hints[:2]))
