"""Every graph break Dynamo took, from ``graph_break_reasons`` (each with the user's stack; Dynamo's
counter misses data-dependent breaks, this list does not). Part of the Dynamo source seam."""

from __future__ import annotations

from typing import NamedTuple

from tpu_lab.compile.sources import dynamo_source
from tpu_lab.compile.sources.stack_place import break_location


class GraphBreak(NamedTuple):
    """One graph break Dynamo took: its reason (with Dynamo's hints) and the user's file and line."""

    reason: str
    filename: str
    line: int
    library: str = ""  # file:line where it broke, when that is library code (torch, site-packages)


def graph_break_marker() -> tuple[int, int, int]:
    import torch._dynamo.utils as dynamo_utils

    found = getattr(dynamo_utils, "graph_break_reasons", None)
    return (id(found), len(found), dynamo_source.resets) if isinstance(found, list) else (0, 0, dynamo_source.resets)


def graph_breaks_since(marker: tuple[int, int, int]) -> tuple[list[GraphBreak], tuple[int, int, int]]:
    """Breaks recorded after ``marker`` (a reset empties the list: then all of them), and the new marker."""
    import torch._dynamo.utils as dynamo_utils

    found = getattr(dynamo_utils, "graph_break_reasons", None)
    if not isinstance(found, list):
        return [], marker
    same = marker[0] == id(found) and marker[2] == dynamo_source.resets and marker[1] <= len(found)
    start = marker[1] if same else 0
    out = []
    for item in found[start:]:
        out.append(GraphBreak(str(item.reason), *break_location(list(getattr(item, "user_stack", None) or []))))
    return out, (id(found), len(found), dynamo_source.resets)
