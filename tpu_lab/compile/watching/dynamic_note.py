"""What a compile made dynamic, said once per function: the inputs and dimensions automatic dynamic
shapes made symbolic (later sizes and values reuse the graph), from the graph's shapes and Dynamo's
per-code state; a Python number whose own cause already says so is not said twice."""

from __future__ import annotations

from collections.abc import Iterable

from tpu_lab.compile.causes.explain import TPU_DYNAMIC
from tpu_lab.compile.watching.watch_table import RowCause


def dynamic_note(
    shapes: str, told: Iterable[str], seen: str, *, first: bool, tpu: bool
) -> tuple[str, RowCause | None, str]:
    """``shapes``: ``"x dim 0, n"`` made dynamic in this graph; ``told``: numbers whose cause says so;
    ``seen``: what was said for this function before. Returns (the row's dynamic field, the note to add
    or None, what has now been said)."""
    told = list(told)
    dynamic = ", ".join(dict.fromkeys([*filter(None, shapes.split(", ")), *told]))
    said = ", ".join(filter(None, [seen, *told]))
    new = [d for d in dynamic.split(", ") if d and d not in said.split(", ")]
    if not new:
        return dynamic, None, said
    fix = TPU_DYNAMIC if tpu else "none needed: new sizes and values reuse this graph"
    words = f"Dynamo made {', '.join(new)} dynamic (automatic dynamic shapes)"
    if first:  # automatic dynamic needs an earlier graph: this was asked for
        words = f"{', '.join(new)} dynamic from the first compile (torch.compile(dynamic=True) or mark_dynamic)"
    return dynamic, RowCause(words, "", fix, "dynamic", 0), ", ".join(filter(None, [said, *new]))
