"""Causes found against a graph another instance of the same class compiled (its code's graphs are shared
by every instance: a layer compiled on its own, a block per depth), or another callable through one shared
wrapper: said so, with the fix for a number each instance holds its own value of; and a graph compiled at a
later call than the function's first, whose inputs a mark on the first call's tensor never reached. Pure."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.causes.guard_derived import RAISE_LIMIT
from tpu_lab.compile.causes.own_graph import INSTANCES_SHARE, per_instance

_NUMBER = re.compile(r"^(?:a )?Python (?:int|float) ")  # a number of the instance's, or one computed from it


def whose_graph(
    causes: list[Cause], whose: str | None, signature: Sequence[tuple[str, str]] = (), logged: str = ""
) -> list[Cause]:
    """Causes found against a graph another instance or callable compiled, saying so: on an instance's
    own attributes (``self.decay``, or ``s.decay`` where the method calls it ``s``: an input of the instance's
    class in ``signature``) the change is that instance; against another callable's graph, whose. ``logged``:
    the guard Dynamo logged failing first, kept on the one cause said for another callable."""
    if shared := [c for c in causes if c.kind == "shared_wrapper"][:1]:  # another callable: the rest follows
        guards = shared[0].guard.splitlines()
        if logged and logged not in guards and any(logged in c.guard.splitlines() for c in causes):
            shared = [dataclasses.replace(shared[0], guard="\n".join([*guards, logged]))]  # Dynamo's word for it
        causes = shared
    if not whose:
        return causes
    if not whose.startswith("another instance of "):  # the shared wrapper's last callable, or the graph's
        held, n = re.subn(r"\(it last held [^)]*\)$", lambda _: f"(it last held {whose})", causes[0].words)
        words = held if n else f"{causes[0].words} (compared with the graph of {whose})"
        return [dataclasses.replace(causes[0], words=words), *causes[1:]]
    note = f" ({whose} than the one the graph was compiled for: {INSTANCES_SHARE})"
    cls = whose.removeprefix("another instance of ")
    names = {"self"} | {n for n, d in signature if d.split(" ", 1)[0] == cls}
    on_instance = re.compile(rf"(?<![\w.])(?:{'|'.join(map(re.escape, sorted(names)))})\b")
    out = [dataclasses.replace(c, words=c.words + note) if on_instance.search(c.words) else c for c in causes]
    configured = (  # a container each instance holds (NeRF's embed_fns): its length is that instance's configuration
        f"expected once per configuration: each {cls} whose container has another length is a graph of its own, "
        "passed in or not (the code runs over every item); keep the configurations few"
    )
    out = [dataclasses.replace(c, fix=configured) if c.kind == "length" and note in c.words else c for c in out]
    built = (  # another instance built with None where the graph's held a value (SGNS(weights=None)): its build
        f"expected once per configuration: this {cls} was built so (None where the graph's {cls} held a value), "
        "nothing set it between calls; each case is a graph of its own, so keep the configurations few"
    )
    out = [dataclasses.replace(c, fix=built) if c.kind == "none" and note in c.words else c for c in out]
    # a module's int attribute that differs per instance (HF's self.layer_idx, each layer compiled on its own):
    # Dynamo keeps it static, so every instance is a graph of its own, whatever else differs; it counts first
    own = [c for c in out if per_instance(c)]
    if not own:  # a float per instance (a drop-path rate per block): each instance's value is a graph as well
        limit = (
            f"or, as each {cls} holds its own value, raise torch._dynamo.config.recompile_limit above the number of "
            f"{cls} instances (a graph each, plus those of another mode, such as eval), or compile the module that "
            "calls them all once"
        )
        return [  # the general limit hint is said per instance instead
            dataclasses.replace(c, fix=f"{c.fix.replace(RAISE_LIMIT, '')}; {limit}")
            if _NUMBER.match(c.words) and note in c.words and "later values reuse this graph" not in c.words
            else c
            for c in out
        ]
    if ".config." in own[0].words:  # a model of another configuration (a draft and a target model): not a layer
        fix = f"expected once per configuration: each {cls} whose config differs (its depth, its sizes) is a graph of its own"
        return [dataclasses.replace(own[0], fix=fix), *(c for c in out if c is not own[0])]
    fix = (
        f"none per instance, but each {cls} (a layer compiled on its own) is a graph of its own, up to the recompile "
        f"limit: raise torch._dynamo.config.recompile_limit above the number of {cls} instances (a graph each, plus "
        "those of another mode, such as eval), or compile the module that calls them all once"
    )
    return [dataclasses.replace(own[0], fix=fix), *(c for c in out if c is not own[0])]


_FIRST_MARK = "mark the dimension dynamic before the first call ("
MARK_SAID = re.compile(  # either mark phrase, with its parenthesised calls: for what rewrites or replaces it
    r"mark the dimension dynamic (?:before the first call|on every call's input, before the call) \((?:[^()]|\([^()]*\))*\)"
)
_EACH_MARK = (
    "mark the dimension dynamic on every call's input, before the call (a mark on the first call's alone does not "
    "reach this graph, compiled at a later call: "
)


def marked_each_call(causes: list[Cause], graph: str) -> list[Cause]:
    """``causes`` told against ``graph`` (Dynamo's ``frame/n``): where it is not the function's first graph (an
    einops cache or a train/eval switch compiled it at a later call), the mark is said on every call's input."""
    if not re.fullmatch(r"\d+/[1-9]\d*", graph):
        return causes
    return [
        dataclasses.replace(c, fix=c.fix.replace(_FIRST_MARK, _EACH_MARK)) if _FIRST_MARK in c.fix else c
        for c in causes
    ]


_EACH_CASE_MARK = (
    "mark the dimension dynamic on every call's input, before the call (a mark on the first call's alone does not "
    "reach the graphs compiled at later calls for other cases: "
)
# what a graph of its own for another case is compiled for at a later call (a flag, a value, a mode, a type)
_OTHER_CASES = {"flag", "value", "value_dynamic", "training", "global_state", "none", "kwargs", "string"}
_OTHER_CASES |= {"derived", "enum", "type", "identity", "dtype", "device", "requires_grad", "dict_keys", "global"}
_OTHER_CASES |= {"number_branch", "tensor_type", "members", "attribute", "hooks", "aliasing", "lr", "view_base"}


def marked_each_call_for_cases(rows: Sequence[tuple[object, Any]]) -> None:
    """``rows`` ((function, row) pairs) with each mark said "before the first call" said on every call's input
    where the same function compiled a graph for another case (label smoothing's epsilon, evaluation's grad
    mode): that graph, compiled at a later call, meets an unmarked input and recompiles on its sizes."""
    cases = {f for f, r in rows for c in r.causes if c.count and c.kind in _OTHER_CASES}
    for f, r in rows:
        if f in cases:
            r.causes = [dataclasses.replace(c, fix=c.fix.replace(_FIRST_MARK, _EACH_CASE_MARK)) for c in r.causes]


def shared_limit(fixes: list[str], function: str, told: Sequence[str], limit: int | None) -> list[str]:
    """The fixes of a refusal at the recompile limit for a method whose instances share its graphs (``told``: the
    words of the causes its rows told; ConvNeXt's twelve LayerNorms each compiled with ``m.compile()``): one code, one limit,
    a graph per instance's configuration, said first; ``fixes`` as they were for any other function."""
    if not any(INSTANCES_SHARE in words for words in told):
        return fixes
    # the class the causes named (a resumed frame's name holds none), else the method's own
    named = (m[1] for words in told if (m := re.search(r"another instance of ([\w.]+) than", words)))
    owner = next(named, "") or function.split(" (")[0].rpartition(".")[0] or function
    shared = (
        f"the instances of {owner} share this code's graphs and its one recompile limit ({limit}): each instance's "
        "configuration (its parameter shapes, its flags) is a graph of its own, so many instances spend the limit "
        "however each is called; raise torch._dynamo.config.recompile_limit above the number of configurations "
        f"before the first call, or compile the model (or a block that holds them) in place of each {owner}"
    ).replace(" (None)", "")
    return [shared, *fixes]
