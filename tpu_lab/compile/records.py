"""Reading Dynamo's compilation records for the watcher: which record belongs to a compile, the inputs
a compile made dynamic, and whether it was served from a persistent cache. Pure over the records."""

from __future__ import annotations

import ast
from typing import Any

CACHE_HIT_FIELDS = (
    "inductor_fx_local_cache_hit_count",
    "inductor_fx_remote_cache_hit_count",
    "aotautograd_local_cache_hit_count",
)


def take_record(records: list[Any], *, backward: bool) -> Any:
    """Dynamo's record for a compile: the frame's own, or (``backward``) the lazy backward's; same id."""
    for r in records:
        if (getattr(r, "is_forward", True) is False) == backward:
            records.remove(r)
            return r
    return None


def served_from_cache(record: Any) -> bool:
    """Whether inductor's or AOTAutograd's persistent cache served this compile."""
    return any(int(getattr(record, f, 0) or 0) for f in CACHE_HIT_FIELDS)


def is_limit_refusal(record: Any) -> bool:
    return "recompile limit" in (getattr(record, "fail_reason", None) or "").lower()


def dynamic_inputs(record: Any, signature: tuple) -> str:
    """Inputs whose sizes Dynamo made symbolic (automatic dynamic shapes), from the graph's placeholder shapes."""
    text = getattr(record, "graph_node_shapes", None)
    if not text:
        return ""
    try:
        shapes = ast.literal_eval(text) if isinstance(text, str) else dict(text)
    except (ValueError, SyntaxError):
        return ""
    names = {n.replace("[", "_").replace("]", "").replace("'", "").replace(".", "_"): n for n, _ in signature}
    out = []
    for node, shape in shapes.items():
        if not node.lower().startswith("l_") or "_parameters_" in node or "_buffers_" in node:
            continue
        name = names.get(node[2:].rstrip("_"), node[2:].rstrip("_"))
        dims = [str(i) for i, d in enumerate(shape or []) if isinstance(d, str)]
        scalar = shape == [] and any(n == name and d.startswith(("int ", "float ")) for n, d in signature)
        if dims:
            out.append(f"{name} dim {', '.join(dims)}")
        elif scalar:
            out.append(name)
    return ", ".join(out)
