"""What happens next, said where it is known: what a compile made dynamic, once per function (the inputs
and dimensions automatic dynamic shapes made symbolic: later sizes and values reuse the graph; a Python
number whose own cause already says so is not said twice), and a container that grows at every compile
(each length its own graph, up to the recompile limit); a flag that made a graph, kept in the row's inputs
(each value is a graph of its own)."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence

from tpu_lab.compile.causes.cause import BAKED, Cause, local_name, split_top
from tpu_lab.compile.causes.explain import TPU_DYNAMIC
from tpu_lab.compile.causes.first_compile import CA_MARK, is_compiled_autograd
from tpu_lab.compile.causes.guard_containers import CACHE, CACHE_FIX, GLOBAL_DICT
from tpu_lab.compile.sources.dynamo_dynamic import pinned
from tpu_lab.compile.sources.frames import Capture, renamed, signature_text
from tpu_lab.compile.watching.watch_table import RowCause


def unpinned(shapes: str, guards: list[str] | None, names: Sequence[tuple[str, str]]) -> str:
    """``shapes`` (``"x dim 0, x dim 1"``: symbolic in the graph) less the dimensions the graph's own guards
    pin to one size (a dict lookup on a size, ``mark_static``): those are not dynamic, whatever the shapes say."""
    if not guards:
        return shapes
    values, sizes = pinned(guards)
    fixed = {f"{renamed(local_name(source), names)} dim {dim}" for source, dim in sizes}
    fixed |= {renamed(local_name(source), names) for source in values}  # a number the graph checks for one value
    return ", ".join(d for d in split_top(shapes) if d and d not in fixed)


def told_dynamic(scalars: Iterable[str], causes: Iterable[Cause], shapes: str = "") -> list[str]:
    """The Python numbers (Dynamo's sources) made dynamic whose own cause already says so, by the user's names;
    and those of ``shapes`` (what the graph made dynamic, by name) a cause names so (a carried ``lam``)."""
    said = " ".join(c.words for c in causes)
    named = [d for d in split_top(shapes) if d and f"Dynamo made {d} dynamic" in said]
    return [local_name(n) for n in scalars if f"Dynamo made {local_name(n)} dynamic" in said] + named


_MARKED_FIX = "none needed while every tensor passed there carries the mark (it stays with that tensor object)"


def dynamic_note(
    shapes: str,
    told: Iterable[str],
    seen: str,
    *,
    first: bool,
    tpu: bool,
    static: bool = False,
    every: bool = False,
    marked: Mapping[str, str] | None = None,
    failed: bool = False,
    numpy: frozenset[str] = frozenset(),
) -> tuple[str, RowCause | None, str]:
    """``shapes``: ``"x dim 0, n"`` made dynamic in this graph; ``told``: numbers whose cause says so;
    ``seen``: what was said for this function before; ``marked``: dims the call's tensors carry a mark on
    (``x dim 0`` -> ``mark_dynamic`` or ``maybe_mark_dynamic``); ``failed``: an earlier compile of the function failed; ``numpy``: numpy scalar inputs. Returns (the row's dynamic field, the note to add or None, what has now been said)."""
    told, marked = list(told), marked or {}
    dynamic = ", ".join(dict.fromkeys([*filter(None, split_top(shapes)), *told]))
    said = ", ".join(filter(None, [seen, *told]))
    new = [d for d in split_top(dynamic) if d and d not in split_top(said)]
    if not new:
        return dynamic, None, said
    fix = TPU_DYNAMIC if tpu else "none needed: new sizes and values reuse this graph"
    words = f"Dynamo made {', '.join(new)} dynamic (automatic dynamic shapes)"
    yours, others = [d for d in new if d in marked], [d for d in new if d not in marked]
    if yours:  # the user's own marks, whatever automatic dynamic would have done (or with it off)
        kinds = ", ".join(sorted({marked[d] for d in yours}))
        who = f"your code marked them ({kinds})" if kinds != CA_MARK else f"{CA_MARK} marks the sizes it captures"
        words = f"{', '.join(yours)} dynamic, as {who}"
        words += (
            f"; Dynamo made {', '.join(others)} dynamic (automatic dynamic shapes)" if others and not static else ""
        )
        fix = _MARKED_FIX if static else fix
    elif first and failed:  # Dynamo kept the sizes of the call whose compile failed, and compared with them
        words = f"Dynamo made {', '.join(new)} dynamic from this first graph (automatic dynamic shapes: the size "
        words += "differs from the earlier call whose compile failed)"
    elif first and set(new) <= numpy:  # Dynamo reads a numpy scalar as a 0-d tensor
        words = f"{', '.join(new)} dynamic from the first compile (a numpy scalar, which Dynamo reads as a tensor)"
    elif first and every:
        words = f"{', '.join(new)} dynamic from the first compile (torch.compile(dynamic=True))"
    elif first:  # automatic dynamic needs an earlier graph of this code: one before the watch, or another frame's
        words = f"{', '.join(new)} dynamic from this function's first compile in the watch: your code did not mark it, "
        words += "so Dynamo had seen that size change in an earlier compile of the same code (automatic dynamic shapes)"
    elif every:  # torch.compile(dynamic=True): a new graph's sizes are dynamic from its start
        words = f"{', '.join(new)} dynamic from this graph's start (torch.compile(dynamic=True))"
    elif static:  # automatic dynamic is off: only the user's marks make a dimension dynamic
        words = f"{', '.join(new)} dynamic, as your code marked them (automatic dynamic shapes are off)"
        fix = _MARKED_FIX
    return dynamic, RowCause(words, "", fix, "dynamic", 0), ", ".join(filter(None, [said, *new]))


_LENGTH = re.compile(r"^(?P<name>.+?) (?:has a different length \(was (?P<n>\d+)\)$|holds items now; )")


_GAINED = re.compile(r"^(?:dict )?(\S+?)(?: \(a global dict\))? gained the key ")  # a cache's name


_UNROLLED = "unrolled into the graph"  # a loop over a module's list: a configuration, told so, not grown per step


def growing(
    causes: list[RowCause], lengths: dict[str, list[int]], limit: int | None, resumed: bool = False
) -> list[RowCause]:
    """Length causes of a container whose length only went up from compile to compile (``lengths``: the
    function's lengths so far, by container, updated here) named as growing: appended to every step. A global
    dict that grows is a cache filled on a miss; its length said beside the key it gained is one change. In
    the part of a function after a graph break (``resumed``) a list the code before it built from the data
    (a CTC decoder's kept tokens) is no container appended to: its length just differs each time."""
    out = []
    at_most = f", at most {limit}" if limit else ""
    keyed = {m[1] for c in causes if c.kind == "dict_keys" and CACHE in c.words and (m := _GAINED.match(c.words))}
    lens = [c for c in causes if c.kind == "length" and (m := _LENGTH.match(c.words))]
    told = {m["name"].removesuffix(GLOBAL_DICT): c for c in lens if (m := _LENGTH.match(c.words))}
    for c in causes:
        m = _LENGTH.match(c.words) if c.kind == "length" else None
        name = m["name"].removesuffix(GLOBAL_DICT) if m else ""
        seen = lengths.setdefault(name, []) if m else []
        if m:
            seen.append(int(m["n"] or 0))  # "holds items now": it was empty
        if m and name in keyed:
            continue  # the key it gained says it
        if c.kind == "dict_keys" and CACHE in c.words:
            words = c.words.replace("up to the recompile limit", f"at most {limit}") if limit else c.words
            same = told.get(gained[1]) if (gained := _GAINED.match(c.words)) else None  # its length's guard too
            guard = "\n".join(filter(None, [c.guard, same.guard if same else ""]))
            shown = "\n".join(filter(None, [c.shown_guard, same.shown_guard if same else ""]))
            c = dataclasses.replace(c, words=words, guard=guard, shown_guard=shown)
        elif m and len(seen) >= 2 and all(a < b for a, b in itertools.pairwise(seen)) and _UNROLLED not in c.fix:
            words = f"{m['name']} grows at every compile (was {m['n'] or 0}): each new length compiles a graph of its own{at_most}"
            fix = "keep what grows out of the compiled function (append outside it, or keep a running tensor), or pass a fixed-size tensor"
            if resumed and m["name"] == name and not name.startswith("self."):  # built before the break
                words = f"{name} had another length at every compile (before: {', '.join(map(str, seen))}): the code before the graph break builds it from the data, and each length compiles a graph of its own{at_most}"
                fix = "remove the graph break before it (see its fix) so it stays inside one graph, or build it outside the compiled function"
            if m["name"] != name:  # a global dict that gains a key per compile: a cache the code fills on a miss
                words = f"{name} (a global dict: {CACHE}) grows at every compile (was {m['n'] or 0}): each new key compiles a graph of its own{at_most}"
                fix = CACHE_FIX
            c = dataclasses.replace(c, words=words, fix=fix)
        out.append(c)
    return out


def flags_now(causes: list[Cause]) -> dict[str, str]:
    """Flags whose change made this graph (``need_weights``, ``self.use_cache``) with their new values:
    each value is a graph of its own, so the inputs the rows show must tell them apart."""
    return {c.flag[0]: str(c.flag[1] == "False") for c in causes if c.flag and c.flag[1] in ("True", "False")}


def flags_before(rows: dict, function: object, causes: list[Cause]) -> dict:
    """``rows`` (by function and inputs) with the earlier rows of ``function`` showing each flag that
    changed now at the value they were compiled with, so the first row reads ``sync: False`` too."""
    out = rows
    for name, old in (c.flag for c in causes if c.flag):
        out = {}
        for (key, shown), row in rows.items():
            if key == function and not _shows(shown, name) and (key, _added(shown, [(name, old)])) not in rows:
                shown = _added(shown, [(name, old)])
                row.signature = signature_text(shown)
            out[(key, shown)] = row
        rows = out
    return out


def with_flags(
    shown: tuple[tuple[str, str], ...],
    flags: dict[str, str],
    causes: list[Cause],
    call: Sequence[tuple[str, str]] = (),
) -> tuple[tuple[str, str], ...]:
    """A row's inputs with the flags its function's graphs differ by (``flags``, updated here with those
    this compile's ``causes`` changed), where the inputs do not show them: at the value this ``call`` passed
    (its boolean arguments), else at the value the flag's last change left."""
    flags.update(flags_now(causes))
    passed = dict(call)
    return _added(shown, [(n, passed.get(n, v)) for n, v in flags.items() if not _shows(shown, n)])


def _shows(shown: tuple[tuple[str, str], ...], flag: str) -> bool:
    """The inputs already show ``flag``: by its name, or as the keyword of a ``**kwargs`` the user's own
    function takes (``kwargs['density']``), at the value this call passed."""
    return any(n == flag or re.fullmatch(rf"\w+\[{re.escape(repr(flag))}\]", n) for n, _ in shown)


def _added(shown: tuple[tuple[str, str], ...], extra: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``shown`` with ``extra`` inputs added, before the grad mode (said last, always)."""
    grad = tuple(e for e in shown[-1:] if e[0] == "grad mode")
    return shown[: len(shown) - len(grad)] + tuple(extra) + grad


_LAYOUT = re.compile(r"^(?P<name>.+?)(?:, .+?)?(?:'s|: their) memory layout changed(?: to (?P<layout>[\w-]+))?")


def in_layout(causes: list[RowCause]) -> list[RowCause]:
    """Causes saying later sizes or values reuse this graph, where the same compile changed an input's memory
    layout: they reuse it only in that layout (the graph's stride guards hold it; another layout, even the one
    before, is a graph of its own)."""
    found = next((m for c in causes if c.kind == "stride" and (m := _LAYOUT.match(c.words))), None)
    if found is None:
        return causes
    layout = found["layout"] if found["layout"] != "non-contiguous" else ""  # views differ among themselves
    held = f"{found['name']} stays {layout}" if layout else f"{found['name']} keeps this memory layout"
    said = f"reuse this graph only while {held}"
    return [
        dataclasses.replace(
            c, words=c.words.replace("reuse this graph", said, 1), fix=c.fix.replace("reuse this graph", said, 1)
        )
        if c.kind != "stride"
        else c
        for c in causes
    ]


_WALKED = re.compile(
    r"\b(?P<root>\w+)(?:\.\w+\[\d+\])*\.(?P<attr>\w+)\[\d+\]\.(?P=attr)\b"
)  # tree.children[0].children
TREE_FIX = (
    "the code walks a Python tree ({path}), so each shape of tree is a graph of its own: compile the work of "
    "one node (a function over its tensors) and keep the recursion in Python, or batch the nodes level by level "
    "into tensors"
)


def told_as(causes: list[RowCause], told: list[RowCause]) -> list[RowCause]:
    """``causes`` said as ``told`` (the same function's other compiles) showed them: what pins a number, and a
    Python tree the code walks (each shape a graph)."""
    return walked_tree(as_told(causes, told), told)


def walked_tree(causes: list[RowCause], told: Iterable[RowCause] = ()) -> list[RowCause]:
    """Causes of a compile whose guards walk a recursive Python structure (``tree.children[0].children``), or
    of a function whose other compiles (``told``) showed one: every change in it is a new tree shape, so the
    fix is the recursion's, not each value's."""
    found = next((m for c in [*causes, *told] if (m := _WALKED.search(c.words))), None)
    if found is None:
        return causes
    fix = TREE_FIX.format(path=re.sub(r"\[\d+\]", "[i]", found[0]))  # one fix for every node it names
    return [
        dataclasses.replace(c, fix=fix)
        if c.kind not in ("first", "dynamic", "value_dynamic") and found["root"] in c.words
        else c
        for c in causes
    ]


def as_told(causes: list[RowCause], told: Iterable[RowCause]) -> list[RowCause]:
    """``causes`` that say a number changed and is baked in, said as ``told`` says the same number's change
    where a graph showed what pins it (torch needs one value there, an nn.Module's int attribute is kept
    static): a refusal at the limit (no new graph) and a compile before Dynamo marked it dynamic read alike."""
    known = {c.guard.split(" == ")[0]: c for c in told if c.kind == "value" and any(w in c.words for w in _PINNED)}
    out = []
    for c in causes:
        before = known.get(c.guard.split(" == ")[0]) if c.kind == "value" and BAKED in c.words else None
        if c.kind == "value" and _UNPLACED in c.words:  # where a graph showed the line, and this one did not
            before = known.get(c.guard.split(" == ")[0])
            before = before if before and _PLACED in before.words else None
        if before and (was := re.search(r"\(was ([^;():]+)[;)]", c.words)):
            c = dataclasses.replace(
                c, words=re.sub(r"\(was [^;():]+", f"(was {was[1]}", before.words, count=1), fix=before.fix
            )
        stem = c.fix.split("; where it must be")[0]  # a derived value's fix, as a graph's own guards revised it
        if revised := next((t.fix for t in told if c.kind == t.kind == "derived" and t.fix.startswith(stem)), ""):
            c = dataclasses.replace(c, fix=revised)
        out.append(c)
    return out


_UNPLACED = "but it is used as a plain Python number, which needs"  # no line said
_PLACED = "(from your line "
_PINNED = (" still compiles a graph", "Dynamo keeps an nn.Module's int attribute static")


def marks_of(cap: Capture) -> dict[str, str]:
    """The dims the call's tensors carry a mark on (``x dim 0``), as the inputs show them: which mark (compiled
    autograd marks its graph's own sizes)."""
    return {
        f"{name} dim {i}": CA_MARK if is_compiled_autograd(cap.function) else m[1]
        for name, said in cap.shown
        for m in re.finditer(r"\b((?:maybe_)?mark_dynamic|mark_unbacked)\[([\d, ]+)\]", said)
        for i in m[2].split(", ")
    }


_EXPECTED = re.compile(r"^(?:expected once|none needed)[^;]*; ")  # true of a graph compiled, not of one refused


def refused_fixes(fixes: list[str], limit: int | None) -> list[str]:
    """The fixes of a compile refused at the recompile limit: "expected once" holds for a graph that compiles, not
    for calls that now run uncompiled; said once, first, as the limit's own fix."""
    if not any(_EXPECTED.match(f) for f in fixes):
        return list(dict.fromkeys(fixes))
    spent = (
        f"the recompile limit ({limit}) is spent, so these inputs run uncompiled: raise "
        "torch._dynamo.config.recompile_limit (or the function's own recompile_limit=) above it, or keep the "
        "inputs to the graphs already compiled"
    ).replace(" (None)", "")
    return [spent, *dict.fromkeys(_EXPECTED.sub("", f) for f in fixes)]


_PINS = re.compile(r"the graph pins (\S+) dim (\d+)")


def unpinned_note(note: RowCause | None, causes: list[RowCause]) -> RowCause | None:
    """The compile's "Dynamo made ... dynamic" note without the dimensions a cause beside it says the graph pins
    (Switch MoE's expert sizes: traced dynamic, then fixed by the code): never both of one dimension; None where
    none is left."""
    pins = {f"{m[1]} dim {m[2]}" for c in causes for m in _PINS.finditer(c.words)}
    made = re.match(r"Dynamo made (.+?) dynamic \(automatic dynamic shapes\)$", note.words) if note else None
    if note is None or made is None or not pins & set(split_top(made[1])):
        return note
    left = [d for d in split_top(made[1]) if d not in pins]
    return (
        dataclasses.replace(note, words=f"Dynamo made {', '.join(left)} dynamic (automatic dynamic shapes)")
        if left
        else None
    )
