"""Hooks added to the submodules of a compiled module after its graph was compiled, where Dynamo does not
guard them: a hook dict it traced non-empty is guarded by its length (removing a hook, or adding one beside
another, recompiles, and the recompile says so), but an empty one is not
(``torch._dynamo.config.skip_nnmodule_hook_guards``), so the graph silently never runs a hook added there.
Checked when a table is built (a weak reference and per-dict counts per submodule, taken at each compile),
never per call."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tpu_lab.compile.sources.module_hooks import HOOK_DICTS, hook_count
from tpu_lab.compile.watching.watch_table import RowCause

HOOKS_FIX = (
    "register hooks before the first compiled call and keep them; after adding one, call torch._dynamo.reset() "
    "so the next call compiles with the hooks as they are, or set torch._dynamo.config.skip_nnmodule_hook_guards "
    "= False before compiling (Dynamo then guards them, and recompiles when they change)"
)


def hooks_cause(snapshots: Sequence[Sequence[tuple[str, Any, tuple[int, ...]]]]) -> RowCause | None:
    """Hooks added since the function's newest graph was compiled to a hook dict that was empty then (each of
    ``snapshots``: name, weak reference, per-dict counts at one compile, oldest first), as a note on that graph
    (no compile of its own), saying so where an older graph was compiled with the hooks as they are now (its
    guards may pick it again); None when none was, or when Dynamo guards hooks."""
    import torch._dynamo.config as config

    if not snapshots or not getattr(config, "skip_nnmodule_hook_guards", False):
        return None
    now = _counts(snapshots[-1])  # the newest graph's alone, unless it changed: the re-check at each compile start
    added = [_named(n) for n, then, count in now if _unguarded(then, count)]
    if not added:
        return None
    fresh = [m for _, ref, then in snapshots[-1] if (m := ref()) is not None and _unguarded(then, hook_count(m))]
    lib = _installed_by(fresh)
    words = (
        f"{lib} added hooks to {', '.join(added)} after this graph was compiled (its own, not yours): the graph "
        "never runs them"
        if lib
        else f"a hook was added to {', '.join(added)} after this graph was compiled: the graph never runs it"
    ) + " (Dynamo does not guard the hooks of a module inside a compiled module while it has none)"
    if any(older and all(count == then for _, then, count in older) for older in map(_counts, snapshots[:-1])):
        words += (  # an older graph compiled with the hook: its guards pass again
            "; an earlier graph of this function was compiled with the hooks as they are now, and serves the calls "
            "its guards still pass"
        )
    fix = (
        f"expected ({lib} installs them as it runs): nothing to change unless what they capture is missing"
        if lib
        else HOOKS_FIX
    )
    return RowCause(words, "", fix, "hooks", 0)


def _unguarded(then: tuple[int, ...], now: tuple[int, ...]) -> bool:
    """A hook added to a dict that was empty at the compile: the one change Dynamo's guards miss."""
    return any(t == 0 and n > 0 for t, n in zip(then, now, strict=True))


def seen_now(
    hooks: Mapping[Any, Sequence[Sequence[tuple[str, Any, tuple[int, ...]]]]], pending: Iterable[Any]
) -> dict[Any, tuple[RowCause, int]]:
    """Per function, the hooks note as things stand at another compile's start, with how many graphs it had then,
    from the snapshots folded (``hooks``) and those of compiles not folded yet (``pending`` captures): a hook
    added and removed again before the table is read is still told, by what a compile in between saw."""
    snapshots = {key: list(s) for key, s in hooks.items()}
    for cap in pending:
        if cap.hooks:
            snapshots.setdefault(cap.function, []).append(cap.hooks)
    return {key: (note, len(s)) for key, s in snapshots.items() if (note := hooks_cause(s)) is not None}


def as_seen(now: RowCause | None, seen: tuple[RowCause, int] | None, snapshots: Sequence[Any]) -> RowCause | None:
    """The hooks note for a table: as the hooks are now, else as a compile in between saw them (undone since,
    or their modules freed), unless the function compiled another graph after that (``snapshots``: its graphs')."""
    if now is not None or seen is None or seen[1] != len(snapshots):
        return now
    note, freed = seen[0], not any(ref() is not None for _, ref, _ in snapshots[-1])
    undone = "" if freed else " and undone since: the calls in between ran the graph as compiled"
    return dataclasses.replace(note, words=f"{note.words}; seen at a later compile{undone}")


def _counts(snapshot: Sequence[tuple[str, Any, tuple[int, ...]]]) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """(name, count at the compile, count now) of each submodule of one snapshot still alive."""
    return [(name, then, hook_count(m)) for name, ref, then in snapshot if (m := ref()) is not None]


def _installed_by(modules: Sequence[Any]) -> str:
    """The library whose functions all the hooks newly on ``modules`` are (transformers' output capturing
    adds its own during a call), '' where any is the user's or none is known."""
    from tpu_lab.compile.sources.packages import USER, package_of

    owners = set()
    for m in modules:
        for attr in HOOK_DICTS:
            for fn in list((getattr(m, attr, None) or {}).values()):
                code = getattr(getattr(fn, "func", fn), "__code__", None)
                owners.add(package_of(code.co_filename) if code is not None else USER)
    return owners.pop() if len(owners) == 1 and USER not in owners and "torch" not in owners else ""


def _named(name: str) -> str:
    """A submodule as the code reaches it: ``1`` of a Sequential is ``self[1]``, ``layers.0.attn``
    ``self.layers[0].attn``."""
    return "self" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in name.split("."))
