"""Every guard that failed against a compiled graph, not only the first: part of the Dynamo source.

Dynamo stops at the first failed guard per graph, so when two inputs change at once the second change
has no guard behind it. Two re-checks on Dynamo's own guard tree find the rest, in Dynamo's wording:

* its tree cloned keeping only some nodes (``clone_manager``, how Dynamo builds its diff guards): each
  input's subtree re-checked alone, and inside a failing container each item again;
* every node's own guards called on the value its source names (what a node's guards see when a
  container's own guard, a dict's keys or the global state, fails first and hides them), and every way
  a tensor differs from the one compiled for, not only the first property Dynamo's check stops at.

Runs per compile, bounded; never per call.
"""

from __future__ import annotations

import re
from typing import Any, cast

from tpu_lab.compile.sources.tensor_text import layout_of

# an accessor that raised: a changed input's part is missing (the change itself is a failure already); a
# number Dynamo made dynamic, now of another type (None): its symbolic check raised, its type guard says why
_CONSEQUENCES = re.compile(
    r"^(KeyError|IndexError|AttributeError|TypeError)\b|object has no attribute|out of range|^\('[^']*',\)$"
    r"|not supported between instances of|unsupported operand type"  # a TypeError's own message: None compared
    r"|^expected \(<class [^)]*\), got <class '\w+'>$"
)  # a KeyError's own args: where a dict's clone reports the missing key alone
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
            parts = _failures(root, frame.f_locals) + _leaf_failures(entry.guard_manager, frame.f_locals)
        except Exception:  # a guard that cannot be re-checked outside Dynamo: keep what Dynamo said
            continue
        for part in parts:
            reason = strip_local_scope(f"{graph}: {part}")
            if not any(_said(r).startswith(_said(reason)) for r in seen):
                seen.add(reason)
                extra.append(reason)
    return tuple(_with_keywords(r, frame.f_locals) for r in first + tuple(extra))


def _said(reason: str) -> str:
    """A failure as said once: a type check worded apart by torch versions ("to be a tensor type" in 2.13,
    "to be <class 'torch.Tensor'>" in 2.15) is one failure."""
    return re.sub(r"(expected type of '.+?') to be .*", r"\1", reason.split("  # ")[0])


def _with_keywords(reason: str, f_locals: dict[str, Any]) -> str:
    """A failed guard on the number of keyword arguments, with the keywords this call passed: the guard
    says only how many there were."""
    kwargs = f_locals.get("kwargs")
    head, stack, rest = reason.partition("\nUser stack trace:")  # present when Dynamo logs recompiles
    guard, _, comment = head.partition("  # ")  # Dynamo's comment: the code line that read it, its place
    if not isinstance(kwargs, dict) or not re.search(r": len\(kwargs\) [=!]= \d+$", guard.rstrip()):
        return reason
    place = comment.partition("  # ")[2]
    now = f"{guard.rstrip()}  # now passed: {', '.join(map(str, kwargs))}" + (f"  # {place}" if place else "")
    return f"{now}{stack}{rest}"


def _failures(root: Any, f_locals: dict[str, Any]) -> list[str]:
    """The failed guards of one graph: the root's own (global state, ...) or, when those pass, the first
    failure within each input, looking inside containers whose own guards (type, length, keys) pass."""
    budget = [_MAX_CHECKS]
    subtree: dict[int, set[int]] = {}  # node id -> ids of the node and everything under it
    kids: dict[int, list[Any]] = {}
    nodes = _index(root, subtree, kids)  # held, so ids stay unique while we clone

    def check(keep: set[int]) -> str | None:
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        return _clone_check(root, keep, f_locals)

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


def _clone_check(root: Any, keep: set[int] | frozenset[int], f_locals: dict[str, Any]) -> str | None:
    """The first failure of the tree cut down to the nodes ``keep`` (by id; a cut node drops its subtree)."""
    debug = root.clone_manager(lambda node: id(node) in keep).check_verbose(f_locals)
    parts = list(debug.verbose_code_parts)
    if debug.result or len(parts) != 1 or _CONSEQUENCES.search(parts[0]):
        # several parts: the root's shape-relation guards, checked after everything else passed (Dynamo
        # evaluates them one by one for its own reason); an exception: an accessor on a changed input
        return None
    return parts[0]


def _index(node: Any, subtree: dict[int, set[int]], kids: dict[int, list[Any]]) -> list[Any]:
    """Every node of the guard tree (kept alive by the caller), with its children and subtree ids."""
    held = [node]
    kids[id(node)] = list(node.get_child_managers())  # a dict's entries: positional here, so left to the walk
    subtree[id(node)] = {id(node)}
    for child in kids[id(node)]:
        held += _index(child, subtree, kids)
        subtree[id(node)] |= subtree[id(child)]
    return held


_MAX_NODES = 4000  # guard nodes visited per graph by the leaf walk (a large model has a few thousand)
# a node whose guard of these failed: its children's failures follow from it. A list's length is among
# them only where its items moved along (``_moved``); a dict's length is not (its items are found by key)
_STOPS = {"TYPE_MATCH", "ID_MATCH", "NONE_MATCH", "NOT_NONE_MATCH", "TENSOR_MATCH"}


def _leaf_failures(manager: Any, f_locals: dict[str, Any]) -> list[str]:
    """Every node's own guards, each called on the value its source names (``L['batch']['scale']``),
    below the root (the root's own guards are what the clone re-check reports)."""
    from torch._C._dynamo.guards import RelationalGuard

    globals_ = dict(manager.global_scope)
    scope = {"L": f_locals, "G": manager.global_scope["G"], **(manager.closure_vars or {})}
    out: list[str] = []
    related: set[int] = set()
    held = [manager.root]  # wrappers kept alive, so the ids in ``path`` stay theirs while we clone
    todo = [(node, frozenset({id(manager.root)})) for node in reversed(guard_children(manager.root))]
    dict_checks = _MAX_CHECKS
    while todo and len(held) < _MAX_NODES:
        node, path = todo.pop()
        held.append(node)
        if type(node).__name__ == "DictGuardManager" and dict_checks > 0:
            dict_checks -= 1  # its length and key checks are its own, not leaf guards: cut the tree to it
            if (own := _clone_check(manager.root, path | {id(node)}, f_locals)) is not None:
                out.append(own)
        try:
            value = eval(node.get_source(), globals_, scope)  # Dynamo's sources are expressions over L and G
        except Exception:
            continue  # a part a changed container no longer has: that change is the failure
        stop = False
        for leaf in node.get_leaf_guards():
            if isinstance(leaf, RelationalGuard):  # keeps state across the nodes it joins: not callable alone
                if type(leaf).__name__ == "OBJECT_ALIASING" and id(leaf) not in related:
                    related.add(id(leaf))  # its code is an expression (``L['q'] is L['k']``): evaluate it
                    code = cast(Any, leaf).verbose_code_parts()[:1]
                    out += [p for p in code if not _holds(p, globals_, scope)]
                continue
            try:
                if leaf(value):
                    continue
            except Exception:
                continue
            parts, kind = leaf.verbose_code_parts(), type(leaf).__name__
            if kind == "TENSOR_MATCH":
                out += tensor_differences(parts[0], value)
            elif len(parts) == 1:
                out.append(parts[0])
            stop = stop or kind in _STOPS or (kind == "LENGTH_CHECK" and _moved(node, value, parts[0]))
        if not stop:
            todo += [(child, path | {id(node)}) for child in reversed(guard_children(node))]
    # the root's relations between inputs (``L['q'] is L['k']``, shape relations) are expressions, many per
    # guard: Dynamo evaluates them one by one for its own reason, and so does this; a relation on a tensor
    # whose own size or layout failed follows from that failure
    changed = set(re.findall(r"tensor '(L\[[^]]+\])", "\n".join(out)))
    lambdas = [*manager.root.get_epilogue_lambda_guards(), *manager.root.get_leaf_guards()]
    parts = [p for g in lambdas if len(g.verbose_code_parts()) > 1 for p in g.verbose_code_parts()]
    for part in parts[:_MAX_NODES]:
        if not changed & set(re.findall(r"L\[[^]]+\]", part)) and not _holds(part, globals_, scope):
            out.append(part)
    return out


def _moved(node: Any, value: Any, length: str) -> bool:
    """A list of tensors whose length changed still holds the tensors compiled for, moved along (the first
    dropped, one appended): their failures at their old places follow from the move, so the length alone is
    said. False where at no such offset its tensors pass the guards of those compiled for: they changed too
    (a list grown by one whose tensors also changed size), and Dynamo's guards on them, by position, are
    said. A list of numbers is new data with its new length: the length alone is said."""
    import torch
    from torch._C._dynamo.guards import RelationalGuard

    was = re.search(r"== (\d+)", length)
    if not isinstance(value, (list, tuple)) or was is None or not all(isinstance(v, torch.Tensor) for v in value):
        return True
    items = []
    for child in guard_children(node)[:_MAX_CHECKS]:
        if m := re.search(r"\[(\d+)\]$", child.get_source()):
            items.append((int(m[1]), [g for g in child.get_leaf_guards() if not isinstance(g, RelationalGuard)]))
    old, new = int(was[1]), len(value)
    offsets = range(min(0, new - old), max(0, new - old) + 1)  # one list a run of the other's items
    return not items or any(all(_passes(guards, value, k + d) for k, guards in items if k < old) for d in offsets)


def _passes(guards: list[Any], items: Any, i: int) -> bool:
    if not 0 <= i < len(items):
        return True  # an item the shorter list does not have
    try:
        return all(g(items[i]) for g in guards)
    except Exception:
        return False


def _holds(code: str, globals_: dict[str, Any], scope: dict[str, Any]) -> bool:
    try:
        return bool(eval(code.split("  #")[0], globals_, scope))
    except Exception:
        return True  # cannot tell: say nothing


def guard_children(node: Any) -> list[Any]:
    """A node's child managers; a dict's own (keys and values, one pair per entry) come separately."""
    out = list(node.get_child_managers())
    pairs = node.get_key_value_managers() if hasattr(node, "get_key_value_managers") else {}
    return out + [m for _, pair in sorted(pairs.items()) for m in pair if m is not None]


_CHECK_TENSOR = re.compile(
    r"check_tensor\((?P<name>.+?), (?P<cls>\w+), DispatchKeySet\([^)]*\), (?P<dtype>torch\.\w+), device=[^,]*, "
    r"requires_grad=(?P<grad>True|False), size=\[(?P<size>[^\]]*)\], stride=\[(?P<stride>[^\]]*)\]"
)


def tensor_differences(check: str, value: Any) -> list[str]:
    """Every way ``value`` differs from the tensor a ``check_tensor(...)`` guard was built for, each worded
    as Dynamo words its first (``tensor 'x' size mismatch at index 1. expected 5, actual 7``)."""
    import torch

    m = _CHECK_TENSOR.search(check)
    if m is not None and not isinstance(value, torch.Tensor):  # None now (targets=None): in Dynamo's own words
        cls = type(value)
        found = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        want = "torch.Tensor" if m["cls"] == "Tensor" else f"torch.nn.parameter.{m['cls']}"
        return [f"expected type of '{m['name']}' to be <class '{want}'>, but found <class '{found}'>"]
    if m is None or not isinstance(value, torch.Tensor) or type(value).__name__ != m["cls"]:
        return []  # another kind of tensor (a Parameter for a Tensor): that is the change, said by Dynamo
    name, out = m["name"], []
    if str(value.dtype) != m["dtype"]:
        want = getattr(torch, m["dtype"].removeprefix("torch."))
        out.append(f"tensor '{name}' dtype mismatch. expected {_scalar(want)}, actual {_scalar(value.dtype)}")
    if str(value.requires_grad) != m["grad"]:
        out.append(f"tensor '{name}' requires_grad mismatch. expected requires_grad={int(m['grad'] == 'True')}")
    size = [x.strip() for x in m["size"].split(",") if x.strip()]
    if len(size) != value.dim():
        return [*out, f"tensor '{name}' rank mismatch. expected {len(size)}, actual {value.dim()}"]
    grown = [(i, a, b) for i, (a, b) in enumerate(zip(size, value.shape, strict=True)) if a != "None" and int(a) != b]
    out += [f"tensor '{name}' size mismatch at index {i}. expected {a}, actual {b}" for i, a, b in grown]
    stride = [x.strip() for x in m["stride"].split(",") if x.strip()]
    if len(stride) == value.dim() and "None" not in stride + size:
        # a new size moves a tensor's strides with it: only a change of layout is its own change (contiguous to
        # channels_last or transposed, or back), said at every stride that differs
        was, now = ([int(x) for x in size], [int(x) for x in stride]), (list(value.shape), list(value.stride()))
        big = [i for i, (a, b) in enumerate(zip(was[0], now[0], strict=True)) if a > 1 and b > 1]
        if not grown or _layout_key(*was, big) != _layout_key(*now, big):
            kept = _in_order(now[0], was[1])  # the strides the old layout would have at the new size
            moved = [(i, a, b) for i, (a, b) in enumerate(zip(stride, now[1], strict=True)) if int(a) != b]
            moved = [x for x in moved if not grown or now[1][x[0]] != kept[x[0]]] or moved
            out += [f"tensor '{name}' stride mismatch at index {i}. expected {a}, actual {b}" for i, a, b in moved]
    return out


def _layout_key(shape: list[int], stride: list[int], big: list[int]) -> tuple[str, tuple[int, ...]]:
    """A layout by name and the order in memory of the dimensions ``big`` (above 1 in both tensors compared:
    a size-1 dimension's stride is free), outermost first."""
    order = sorted(big, key=lambda i: -stride[i])
    return layout_of(shape, stride), tuple(order)


def _in_order(shape: list[int], stride: list[int]) -> list[int]:
    """Dense strides for ``shape`` with the dimensions in the memory order ``stride`` has."""
    out, step = [0] * len(shape), 1
    for i in sorted(range(len(shape)), key=lambda i: (stride[i], -i)):  # innermost first
        out[i], step = step, step * max(shape[i], 1)
    return out


def _scalar(dtype: Any) -> str:
    """Dynamo's name for a dtype (c10's scalar type): ``Float``, ``Double``, ``Long``, ``BFloat16``."""
    import torch

    return torch.empty(0, dtype=dtype).type().rsplit(".", 1)[-1].removesuffix("Tensor")
