"""Every guard that failed against a compiled graph, not only the first: part of the Dynamo source.

Dynamo stops at the first failed guard per graph, so when two inputs change at once the second change
has no guard behind it. Its guard tree can be cloned keeping only some nodes (``clone_manager``, how
Dynamo builds its own diff guards): each input's subtree is re-checked on its own against the frame's
locals, and inside a failing container each item again, so a batch dict whose ``input_ids`` and
``attention_mask`` both changed names both. Runs per compile, bounded; never per call.
"""

from __future__ import annotations

import re
from typing import Any

# an accessor that raised: a changed input's part is missing (the change itself is a failure already)
_CONSEQUENCES = re.compile(r"^(KeyError|IndexError|AttributeError|TypeError)\b|object has no attribute|out of range")
_MAX_CHECKS = 64  # clones per compiled graph: each costs a few microseconds per guard node kept


def every_failure(frame: Any, first: tuple[str, ...]) -> tuple[str, ...]:
    """Dynamo's reasons (``"0/1: guard"``, one per graph) with the other guards that also failed added,
    in Dynamo's wording. ``first`` stays as Dynamo gave it; a torch without clone_manager adds nothing."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
        from torch._dynamo.guards import strip_local_scope

        entries = _debug_get_cache_entry_list(frame.f_code)
    except Exception:  # another torch: Dynamo's first failures are all there is
        return first
    seen = set(first)
    extra: list[str] = []
    for entry in entries:
        root = getattr(getattr(entry, "guard_manager", None), "root", None)
        if root is None or not hasattr(root, "clone_manager"):
            continue
        graph = str(getattr(entry, "compile_id", ""))
        try:
            parts = _failures(root, frame.f_locals)
        except Exception:  # a guard that cannot be re-checked outside Dynamo: keep what Dynamo said
            continue
        for part in parts:
            reason = strip_local_scope(f"{graph}: {part}")
            if not any(r.startswith(reason.split("  # ")[0]) for r in seen):
                seen.add(reason)
                extra.append(reason)
    return first + tuple(extra)


def _failures(root: Any, f_locals: dict[str, Any]) -> list[str]:
    """The failed guards of one graph: the root's own (global state, ...) or, when those pass, the first
    failure within each input, looking inside containers whose own guards (type, length, keys) pass."""
    budget = [_MAX_CHECKS]
    subtree: dict[int, set[int]] = {}  # node id -> ids of the node and everything under it
    kids: dict[int, list[Any]] = {}
    nodes = _index(root, subtree, kids)  # held, so ids stay unique while we clone

    def check(keep: set[int]) -> str | None:
        """The first failure of the tree cut down to the nodes ``keep`` (by id; a cut node drops its subtree)."""
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        debug = root.clone_manager(lambda node: id(node) in keep).check_verbose(f_locals)
        parts = list(debug.verbose_code_parts)
        if debug.result or len(parts) != 1 or _CONSEQUENCES.search(parts[0]):
            # several parts: the root's shape-relation guards, checked after everything else passed (Dynamo
            # evaluates them one by one for its own reason); an exception: an accessor on a changed input
            return None
        return parts[0]

    out: list[str] = []  # when the root's own guards fail (global state), every check stops there

    def descend(node: Any, path: set[int]) -> None:
        me = id(node)
        parts = kids.get(me, [])
        alone = check(path | {me}) if parts else None
        if alone is not None or not parts:  # its own guards failed (type, length, keys), or it is a leaf
            failure = alone or check(path | subtree[me])
            if failure:
                out.append(failure)
            return
        # every part checked before any is opened, so a deep container cannot use up the budget alone
        failing = [part for part in parts if check(path | {me} | subtree[id(part)]) is not None]
        for part in failing:
            descend(part, path | {me})

    descend(root, set())
    del nodes
    return out


def _index(node: Any, subtree: dict[int, set[int]], kids: dict[int, list[Any]]) -> list[Any]:
    """Every node of the guard tree (kept alive by the caller), with its children and subtree ids."""
    held = [node]
    kids[id(node)] = list(node.get_child_managers())
    subtree[id(node)] = {id(node)}
    for child in kids[id(node)]:
        held += _index(child, subtree, kids)
        subtree[id(node)] |= subtree[id(child)]
    return held
