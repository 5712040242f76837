"""Which compiled graph a recompile is told against: Dynamo checks every graph of a function, and each
failed some guard; the one nearest the new call (fewest changes, then the inputs nearest in size) gives
the causes, as a reader comparing the two calls would name them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tpu_lab.compile.causes.cause import Cause, local_name
from tpu_lab.compile.causes.guard_words import TENSOR_MISMATCH
from tpu_lab.compile.causes.own_graph import another_path
from tpu_lab.compile.sources.dynamo_dynamic import pinned
from tpu_lab.compile.sources.frames import MORE

Signature = Sequence[tuple[str, str]]


def nearest(
    per_graph: dict[Any, list[Cause]],
    inputs: dict[Any, Signature],
    signature: Signature,
    failures: Sequence[Any],
    dynamic: frozenset[str] = frozenset(),
    elsewhere: frozenset[Any] = frozenset(),
) -> Any:
    """The graph (a key of ``per_graph``, its causes) nearest the call with ``signature``: ``inputs`` holds
    the inputs each graph was compiled for, where this process saw them; ``failures`` each graph's failed
    guards; ``dynamic``: the numbers (Dynamo's sources) automatic dynamic made symbolic, by now; ``elsewhere``:
    graphs compiled for another instance or callable sharing the code."""
    order = list(per_graph)
    far = len(signature) * 64 + 64  # a graph whose inputs this process did not see
    superseded = _superseded([f for f in failures if f.graph not in elsewhere], {local_name(d) for d in dynamic})
    return min(
        order,
        key=lambda g: (
            # a graph compiled for inputs that look the same as now is nearest: what differs from it is
            # what the table cannot show (a string's value, a list's order), not what another graph names;
            # a flag's value is not in the table either, but its guard names it: that graph is another path
            g not in inputs or _distance(inputs[g], signature) > 0 or any(another_path(c) for c in per_graph[g]),
            # a graph compiled past a number's range the call crossed is the other side: this side's graph is
            _other_side(g, inputs, failures),
            # a graph another instance compiled fails what differs between the instances (their sizes, their
            # settings): where this instance has graphs of its own, in another mode, the call is its own case
            # of those (PointNet++'s second layer, now in eval, against its train graph, not the first's eval one)
            g in elsewhere,
            # a graph for another case (a flag's other value, None for a tensor, another train/eval or grad
            # mode) is another code path: the graph of this path, with its own failed guard, is what the call
            # was meant to reuse (LoRA's merged flag is told against the eval graph, not the train graph)
            any(_other_case(c) for c in per_graph[g]),
            # the graph that took the number dynamic is what the call meant to reuse: what failed there is why
            # (one compiled for another instance is not: U-Net's up2 made sizes dynamic that up1's call held)
            g in superseded,
            sum(_changes(c) for c in _distinct(per_graph[g])),
            # as many changes: one to an attribute of a value of the same type (GELU's approximate) is nearer
            # than a value of another type (a SiLU in its place), which shares nothing with the new call
            sum(c.kind == "type" for c in per_graph[g]),
            _distance(_covered(inputs[g], signature, [f.guard for f in failures if f.graph == g]), signature)
            if g in inputs
            else far,
            order.index(g),
        ),
    )


def _other_side(graph: Any, inputs: dict[Any, Signature], failures: Sequence[Any]) -> bool:
    """Whether ``graph`` was compiled on the other side of a condition on a Python number that the call crossed
    (DDIM's last step, ``t_prev = -1`` past ``0 <= t_prev <= 999``): a graph of the call's own side, failing
    on something else, is the one it was meant to reuse."""
    values = dict(inputs.get(graph, ()))
    for f in failures:
        if not (m := _CROSSED.fullmatch(local_name(f.guard).strip())):
            continue
        value = values.get(m["name"], "")
        if re.fullmatch(r"int -?\d+", value) and int(m["lo"]) <= int(value.split()[1]) <= int(m["hi"]):
            return True
    return False


_CROSSED = re.compile(r"(?P<lo>-?\d+) <= (?P<name>[A-Za-z_][\w.]*) <= (?P<hi>-?\d+)")  # a number's range held


def _other_case(cause: Cause) -> bool:
    """A cause that makes its graph another case of the code: another path, train/eval or grad mode."""
    return another_path(cause) or cause.kind in ("training", "global_state")


_TYPE_GUARD = re.compile(r"expected type of .+? to be <class 'torch\.(?:Tensor|nn\.parameter\.Parameter)'>")


def _superseded(failures: Sequence[Any], made: set[str]) -> set[Any]:
    """Graphs that pin a number to one value (``window_size == 4``) where another graph already holds it
    symbolic (a condition on it failed there): that later graph is the one the call was meant to reuse."""
    pins: dict[Any, set[str]] = {}
    symbolic: set[str] = set()
    for f in failures:
        held = {local_name(v) for v in pinned([f.guard])[0]} & made
        if held:
            pins.setdefault(f.graph, set()).update(held)
        elif (m := TENSOR_MISMATCH.search(f.guard)) and m["what"] == "size":  # a size held static: img dim 2
            pins.setdefault(f.graph, set()).add(f"{local_name(m['name'])}.size()[{m['i']}]")
        elif not _TYPE_GUARD.search(f.guard):  # one that held it as a tensor (DANN's NumPy alpha) holds no number of it
            text = local_name(f.guard)
            symbolic |= {n for n in made if re.search(rf"(?<![\w.]){re.escape(n)}(?![\w(])", text)}
            symbolic |= {f"{m[1]}.size()[{m[2]}]" for m in re.finditer(r"([\w.\[\]']+)\.size\(\)\[(\d+)\]", text)}
    return {g for g, names in pins.items() if names & symbolic}


def _distinct(causes: list[Cause]) -> list[Cause]:
    """One cause per change: the same change named once per input (``input_ids dimension 0 is now 1``,
    ``labels dimension 0 is now 1``) is one change, as a cause merged over its inputs already reads; and the
    bounds one branch's other side crosses (``if t.size(-1) >= length`` on two inputs: three guards) are one;
    so are the items of one list."""
    return list({_change(c): c for c in causes}.values())


def _change(c: Cause) -> tuple[str, str]:
    """What one change is: a cause without the input it names; the items of one list as the list (``n[0]`` and
    ``n[1]`` of ``n=[1, 4]``: one change, nearer than a graph for an int ``n``)."""
    if c.kind in _BOUNDS:
        return ("bound", "")
    if c.kind == "rewritten":  # what the module's own code wrote into its tensors: one change, however many
        return ("rewritten", "")
    if c.kind.startswith("value") and (m := re.match(r"Python \w+ ([\w.]+)\[\d+\] changed", c.words)):
        return ("items", m[1])
    return (c.kind, re.sub(r"^[\w.\[\]'\"]+", "", c.words))


_BOUNDS = ("specialised", "number_branch")  # a size or a number across a condition the graph assumed


def _changes(cause: Cause) -> int:
    """How many changes a cause stands for: one, or each piece of global state one guard found changed
    (``GLOBAL_STATE changed: grad_mode autocast``: two), or each flag a merged cause names, so a graph that
    differs in grad mode alone, or in one flag, is nearer."""
    state = cause.guard.partition("GLOBAL_STATE changed:")[2]
    if cause.kind == "flag":  # flags merged into one cause ("the flag a, b were False") are a change each
        return max(1, len(cause.guard.splitlines()))
    return max(1, len(state.split()))


def _covered(old: Signature, new: Signature, failed: Sequence[str]) -> Signature:
    """A graph's inputs, each that none of its ``failed`` guards names taken as the new call's: its guards
    passed, so the graph covers it (a dimension it made dynamic, 9 then 6 tokens), however it looks."""
    now = dict(new)
    text = "\n".join(failed)

    def named(n: str) -> bool:
        return n in (MORE, "grad mode") or re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", text) is not None

    return tuple((n, d if n not in now or named(n) else now[n]) for n, d in old)


def _distance(old: Signature, new: Signature) -> float:
    """How many shape, dtype and value tokens differ between two input signatures; among numbers that
    differ, nearer ones count a little less (a prompt of 96 is nearer the graph for 48 than for 1)."""
    a, b = dict(old), dict(new)
    total = 0.0
    for name in a.keys() | b.keys():
        ta, tb = re.findall(r"[\w.?-]+", a.get(name, "")), re.findall(r"[\w.?-]+", b.get(name, ""))
        total += abs(len(ta) - len(tb))
        for x, y in zip(ta, tb, strict=False):
            if x != y:
                near = x.isdigit() and y.isdigit() and max(int(x), int(y)) > 0
                total += 1 - (min(int(x), int(y)) / max(int(x), int(y))) * 0.5 if near else 1
    return total
