"""Why something compiled, in words: Dynamo's guard text mapped to a sentence a user can act on, and the
inputs that changed since the function last compiled. Pure: strings in, strings out."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tpu_lab.compile.causes import guard_words
from tpu_lab.compile.causes.call_cases import in_case, keywords_named, torch_function_cause
from tpu_lab.compile.causes.cause import BAKED, VERBATIM_FIX, Cause, Failure, hinted_names, local_name, shown_as_module
from tpu_lab.compile.causes.guard_containers import none_not_shorter, one_dict_change
from tpu_lab.compile.causes.guard_layouts import RANK_FIX
from tpu_lab.compile.causes.guard_sizes import STATIC_WORDS, without_note
from tpu_lab.compile.causes.guard_values import closures_unnamed
from tpu_lab.compile.causes.held_numbers import (
    held_cause,
    module_int_fix,
    module_static,
    number_use,
    placed,
    static_number_fix,
)
from tpu_lab.compile.causes.instances import marked_each_call, whose_graph
from tpu_lab.compile.causes.joined import calling_style, followers_joined, merged, per_sample_list
from tpu_lab.compile.causes.nearest_graph import nearest
from tpu_lab.compile.causes.resumed import in_resumed_frame
from tpu_lab.compile.causes.rewritten_state import rewritten_joined
from tpu_lab.compile.sources.dynamo_limit import RAISES_FULLGRAPH
from tpu_lab.compile.sources.frames import RESUME, Capture, renamed
from tpu_lab.compile.sources.packages import USER, package_of
from tpu_lab.compile.sources.stack_place import calling_library

LIMIT_TEXT = (
    "recompile limit reached: Dynamo gave up on this function, so calls that need a new graph run "
    "UNCOMPILED (only a log line says so)."
)
LIMIT_RAISED_TEXT = (
    "recompile limit reached where torch.compile(fullgraph=True) or torch._dynamo.config.fail_on_recompile_limit_hit "
    "makes it an error: the call that needed a new graph RAISED FailOnRecompileLimitHit, and so does every later "
    "call that needs one (the row says which setting)."
)
TPU_DYNAMIC = "torch_tpu's tpu backend rejects dynamic shapes: pad to buckets instead"
Signature = Sequence[tuple[str, str]]


def limit_raised(raises: str, fullgraph: bool) -> tuple[str, str]:
    """(words, fix) for a refusal at the recompile limit that raised instead of running the call uncompiled:
    ``raises`` is the setting that made it an error (Dynamo's config, else ``fullgraph=True``)."""
    words = (
        f"the call raised FailOnRecompileLimitHit ({raises} turns the limit into an error), and so does every "
        "later call that needs a new graph"
    )
    off = "drop fullgraph=True" if raises == RAISES_FULLGRAPH else f"set {raises.replace('True', 'False')}"
    if raises != RAISES_FULLGRAPH and fullgraph:
        off += " and drop fullgraph=True"
    return words, f"raise the recompile limit, or {off} so calls past it run uncompiled instead of raising"


def explain(reason: str | None, *, limit_hit: bool = False) -> str:
    """One sentence for a recompile reason (Dynamo's guard text or a source's own words)."""
    if limit_hit:
        return LIMIT_TEXT
    if not reason:
        return "first compile"
    if "NoneType" in reason and "mask" in reason:
        return (
            "attention mask is None instead of a tensor: the prompt filled its bucket exactly, no padding, "
            "so transformers dropped the mask (a second graph for the same shape)"
        )
    failures = guard_words.parse([reason])
    if not failures or not failures[0].graph:
        return reason.strip().splitlines()[0]  # a source's own words (torch_tpu's cache miss)
    return "; ".join(dict.fromkeys(_in_words(f).words for f in failures))


def _in_words(f: Failure, **how: Any) -> Cause:
    """One failed guard in words or, where that fails on tpu_lab's own error, Dynamo's guard as it wrote it,
    saying so: the watch never fails the user's code."""
    try:
        return guard_words.words(f, **how)
    except Exception as e:  # a bug here must not end the user's `with tl.watch()` block
        said = f"{type(e).__name__}: {e}"[:120]
        return Cause(
            "verbatim", f"Dynamo's guard, not translated ({said}): {local_name(f.guard)}", f.guard, VERBATIM_FIX
        )


def causes_of(
    reasons: Sequence[str],
    graphs: Sequence[tuple[str, Signature]],
    signature: Signature,
    *,
    tpu: bool = False,
    static: bool = False,
    names: Sequence[tuple[str, str]] = (),
    caller: str = "",
    dynamic: frozenset[str] = frozenset(),
    limit: int | None = None,
    subjects: tuple[tuple[str, str], ...] = (),
    pipeline: bool = False,
    baked: Mapping[str, tuple[str, str]] | None = None,
    compared: Sequence[tuple[str, str]] = (),
    rewritten: Sequence[tuple[str, str]] = (),
) -> list[Cause]:
    """Why a compile happened: the guards that failed against the compiled graph closest to the new
    inputs. Dynamo checks every graph it holds; a guard failing only against a far graph (a dtype
    compiled long ago, a size a later dynamic graph covers) is no cause. Closest: fewest distinct
    failures, then fewest differing input tokens, ties to the most recent graph (Dynamo lists it first).
    ``names``: Dynamo's input names -> the user's; ``caller``: the library that called the function;
    ``dynamic``: Python numbers (by Dynamo's source) that automatic dynamic shapes made symbolic in the
    new graph; ``limit``: the recompile limit, for numbers whose every value is a graph; ``pipeline``: called
    from inside a transformers pipeline; ``baked``: numbers made dynamic that the new graph pins, each with (the guard, Dynamo's comment on it);
    ``compared``: graphs compiled for another instance or callable (``Capture.compared``), said where picked;
    ``rewritten``: tensors the module's own forward rewrites (``Capture.rewritten``), each with where."""
    failures = guard_words.parse(reasons)
    if not failures:
        return []
    marks = ((n, re.search(r"mark_static\[([\d, ]+)\]", d)) for n, d in signature)
    pinned = frozenset(f"{n}/{i.strip()}" for n, m in marks if m for i in m[1].split(","))
    cache = next((d.split()[0] for _, d in signature if d.split()[0].endswith("Cache")), "")
    now = dict(signature) | {local_name(source): d for source, d in subjects}  # what the guards checked, now
    per_graph: dict[str, list[Cause]] = {}
    for graph in dict.fromkeys(f.graph for f in failures):
        sizes = (guard_words.TENSOR_MISMATCH.search(f.guard) for f in failures if f.graph == graph)
        changes = frozenset((local_name(m["name"]), m["a"], m["b"]) for m in sizes if m and m["what"] == "size")
        how = {"tpu": tpu, "static": static, "cache": cache, "pinned": pinned, "caller": caller, "inputs": now}
        found = [(f, _in_words(f, **how, pipeline=pipeline, changes=changes)) for f in failures if f.graph == graph]
        per_graph[graph] = rewritten_joined(
            [
                dataclasses.replace(
                    c, words=closures_unnamed(renamed(c.words, names)), fix=renamed(c.fix, names), flag=_flag(c, names)
                )
                for c in calling_style(
                    per_sample_list(
                        followers_joined(
                            one_dict_change(
                                none_not_shorter(
                                    merged(
                                        [_next_values(f, c, dynamic, limit, baked or {}, now) for f, c in _grad(found)]
                                    )
                                )
                            )
                        ),
                        now,
                    )
                )
            ],
            dict(rewritten),
        )
    for causes in per_graph.values():  # the note on automatic dynamic shapes, said once per compile
        said = [i for i, c in enumerate(causes) if STATIC_WORDS in c.words]
        for i in said[1:]:
            causes[i] = dataclasses.replace(causes[i], words=without_note(causes[i].words, STATIC_WORDS))
    inputs = dict(graphs)
    best = nearest(per_graph, inputs, signature, failures, dynamic, frozenset(dict(compared)))
    told = [in_case(keywords_named(c, inputs.get(best), signature), graphs, best) for c in per_graph[best]]
    logged = next(f.guard for f in failures if f.graph == best)  # Dynamo's first failure against it
    return whose_graph(marked_each_call(told, best), dict(compared).get(best), signature, logged)


def _grad(found: list[tuple[guard_words.Failure, Cause]]) -> list[tuple[guard_words.Failure, Cause]]:
    """Without the tensors that stopped requiring grad when grad mode went off in the same compile: made
    under torch.no_grad(), they follow from that change (a parameter frozen by the user is its own change)."""
    if not any("GLOBAL_STATE" in c.guard and "grad_mode" in c.guard for _, c in found):
        return found
    return [(f, c) for f, c in found if not (c.kind == "requires_grad" and c.words.endswith("changed True -> False"))]


def _flag(cause: Cause, names: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """A flag's name as the rows show the input: the user's name, a keyword through **kwargs by its keyword
    (``kwargs['use_cache']`` -> ``use_cache``), so a row never shows one flag twice."""
    if cause.flag is None:
        return None
    return re.sub(r"^kwargs\['(\w+)'\]$", r"\1", renamed(cause.flag[0], names)), cause.flag[1]


_BAKED = BAKED + ")"


def _next_values(
    f: guard_words.Failure,
    cause: Cause,
    dynamic: frozenset[str],
    limit: int | None,
    baked: Mapping[str, tuple[str, str]],
    now: Mapping[str, str],
) -> tuple[str, Cause]:
    """(the input a guard is about, its cause) with what happens to the next values of a Python number:
    made dynamic by this recompile (later values reuse this graph), made dynamic while a value computed from
    it stays baked in (each value still a graph), 0 or 1 (compiled apart from other values, always), or one
    graph per value (up to the limit). ``now``: the inputs as the new call passed them."""
    name = guard_words.subject(f)
    at_most = f", at most {limit}" if limit else ""
    if cause.kind in ("derived", "loop_position"):
        return name, dataclasses.replace(cause, words=cause.words.removesuffix(")") + f"{at_most})")
    source = local_name(f.guard.split(" == ", 1)[0])  # Dynamo writes L['n'] or n, by torch version
    pin = placed(next((p for d, p in baked.items() if local_name(d) == source), None), f)
    if cause.kind == "lr" and source in {local_name(d) for d in dynamic} and not pin:  # pinned: each lr a graph
        was = re.search(r"\(was ([^;]+);", cause.words)
        words = f"the optimizer's learning rate changed (was {was[1] if was else '?'}): Dynamo made it dynamic, so later values reuse this graph"
        fix = (
            "none needed: later values reuse this graph (an lr held in a tensor, lr=torch.tensor(0.01), never "
            "recompiles for a new value; it saves no compile where another change forces one anyway)"
        )
        return name, dataclasses.replace(cause, words=words, fix=fix)
    if cause.kind == "optimizer_step" and not pin:  # LAMB only counts it: no graph pins it
        words = (
            cause.words.split(": this optimizer keeps", 1)[0]
            + ": Dynamo made it dynamic, so later steps reuse this graph"
        )
        return name, dataclasses.replace(cause, words=words, fix="none needed: later steps reuse this graph")
    if cause.kind == "tensor_type" and "Python number is baked" in cause.words:
        m = re.search(r"expected type of '(.+?)'", f.guard)  # a tensor then a number: made dynamic as a number?
        pinned = {local_name(d) for d in baked}  # made dynamic, yet the new graph holds one value (pred == True)
        zero_one = re.fullmatch(r"int [01]", now.get(name, ""))  # DANN's 0 for a tensor: its graph holds alpha == 0
        if m and local_name(m[1]) in {local_name(d) for d in dynamic} - pinned and not zero_one:
            words = cause.words.replace(
                "a Python number is baked into the graph",
                f"Dynamo made {local_name(m[1])} dynamic, so later values reuse this graph",
            )
            return name, dataclasses.replace(
                cause,
                words=words,
                fix="none needed: later values reuse this graph; passing a tensor every call (torch.tensor(value)) keeps to one graph from the start",
            )
    if cause.kind == "global" and (use := number_use(name, f.code)):  # pool.k into topk's k: a number there
        return name, dataclasses.replace(
            cause, fix=f"keep it to a few values: {use}, so each value is a graph of its own"
        )
    if cause.kind != "value" or not cause.words.endswith(_BAKED):
        return name, cause
    if pin and (held := held_cause(cause, name, pin, at_most, baked=_BAKED, now=now.get(name, ""))):
        return name, held
    if source in {local_name(d) for d in dynamic}:  # an int made dynamic takes 0 and 1 too (DANN's alpha 0 -> 1, 2)
        words = cause.words.removesuffix(_BAKED) + f"): Dynamo made {name} dynamic, so later values reuse this graph"
        fix = "none needed: later values reuse this graph"
        return name, dataclasses.replace(cause, kind="value_dynamic", words=words, fix=fix)
    # Dynamo's 0/1 specialisation of an argument (or its item), which automatic dynamic makes dynamic after it;
    # a module's int attribute stays static, each value a graph (allow_unspec_int_on_nn_module aside)
    int_changed = cause.words.startswith("Python int ")  # a float on a module: made dynamic, as anywhere
    int_01 = bool(re.fullmatch(r"int [01]", now.get(name, ""))) and int_changed
    if int_01 and re.fullmatch(r"[A-Za-z_]\w*(?:\[\d+\])*", name):
        words = cause.words.removesuffix(_BAKED) + (
            f", now {now[name][4:]}: Dynamo compiles 0 and 1 apart from other values)"
        )
        fix = "expected once: 0 and 1 always get graphs of their own (a one-token decode step, a batch of one)"
        return name, dataclasses.replace(cause, words=words, fix=fix)
    if name.partition(".")[2] and shown_as_module(now.get(name.partition(".")[0], "")) and int_changed:  # a module's
        words = cause.words.removesuffix(_BAKED) + f"): {module_static(name)}{at_most}"
        return name, dataclasses.replace(cause, words=words, fix=module_int_fix(name))
    if limit:
        words = cause.words.removesuffix(")") + f": each new value compiles a graph of its own, at most {limit})"
        fix = cause.fix
        if fix.startswith("usually none"):  # Dynamo kept it static, so the general hope does not apply
            fix = static_number_fix(name, module=shown_as_module(now.get("self", "nn.Module (train)")))
        return name, dataclasses.replace(cause, words=words, fix=fix)
    return name, cause


def capture_causes(
    capture: Capture,
    *,
    tpu: bool = False,
    dynamic: frozenset[str] = frozenset(),
    limit: int | None = None,
    baked: Mapping[str, tuple[str, str]] | None = None,
) -> list[Cause]:
    """``causes_of`` for one compile as the Dynamo source heard it."""
    found = causes_of(
        capture.reasons,
        capture.graphs,
        capture.signature,
        tpu=tpu,
        static=capture.static,
        names=(*capture.names, *hinted_names(capture.reasons)),
        caller=capture.caller,
        dynamic=dynamic,
        limit=limit,
        subjects=capture.subjects,
        pipeline=capture.pipeline,
        baked=baked,
        compared=capture.compared,
        rewritten=capture.rewritten,
    )
    package = package_of(capture.function.filename) if capture.function.filename else USER
    found = _read_by_library(found, package, calling_library(capture.callers))
    if found and "__torch_function__" in capture.function.name:  # torch's arguments, compiled on their own
        return [torch_function_cause(found)]
    if not capture.function.name.startswith(RESUME):
        return found
    return in_resumed_frame(found, capture.function, capture.names)


_HELD = re.compile(r"^compute what depends on (.+?) outside the compiled function and pass it in as a tensor")


def _read_by_library(causes: list[Cause], package: str, caller: str) -> list[Cause]:
    """``causes`` of a library's compiled function (transformers' forward): a number its code reads as a plain
    Python value (``int(L * (1 - self.config.mask_ratio))``) is no tensor the user could pass in its place; a
    rank that changes where the library's own code called it (``caller``: torch's ``swa_update`` per parameter)
    is none of the user's inputs."""
    if package in (USER, "tpu_lab"):
        return causes
    whose = f"{package}'" if package.endswith("s") else f"{package}'s"  # transformers' code, torch's code
    return [
        dataclasses.replace(
            c,
            fix=f"expected once per value of {m[1]}: {whose} code reads it as a plain Python number, so a "
            "tensor in its place would not do; keep it to a few values, set before the first compiled call",
        )
        if (m := _HELD.match(c.fix))
        else dataclasses.replace(
            c,
            fix=f"none needed: {whose} code passes it tensors of more than one rank (one call per parameter, say: a "
            "weight, then a bias), none of them yours to reshape; Dynamo makes their sizes dynamic, so it settles "
            "at a few graphs",
        )
        if c.fix == RANK_FIX and caller
        else dataclasses.replace(c, fix=_LIBRARY_SIZES.format(whose=whose, caller=caller))
        if caller and c.kind == "size" and "mark_dynamic(" in c.fix
        else c
        for c in causes
    ]


# flex_attention's own helpers, compiled on their own where the user's function ran eagerly
_LIBRARY_SIZES = "none needed: {whose} own function, called by {caller}'s code with tensors none of yours to mark"
