"""Sizes a graph pins to one value though Dynamo traced them dynamic, and their fixes: pinned once, the
reason is one of two (a Python number, or an input of fixed size it meets); pinned again, the code fixes
the size (every size a graph, and mark_dynamic would raise); a size met by a tensor the module holds (a
buffer Dynamo keeps at one size); a size used as a dict key; and what that means at the recompile limit."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from types import CodeType
from typing import Any

from tpu_lab.compile.causes.cause import local_name, split_top
from tpu_lab.compile.causes.guard_containers import CACHE
from tpu_lab.compile.causes.guard_sizes import UNTIL_DYNAMIC, with_note
from tpu_lab.compile.causes.resumed import UNTIL_MARKED
from tpu_lab.compile.causes.size_uses import pinned_by
from tpu_lab.compile.sources.frames import RESUME, Capture, FunctionKey
from tpu_lab.compile.watching.heard_pins import FIXED_FIX, PINNED_FIX, heard_pin, static_sizes
from tpu_lab.compile.watching.watch_table import RowCause, WatchRow


def settled(
    causes: list[RowCause],
    shapes: str,
    tpu: bool,
    tried: str = "",
    before: set[str] | None = None,
    cap: Capture | None = None,
) -> list[RowCause]:
    """Size causes whose dimension this very compile made dynamic: nothing more is needed, later sizes
    reuse the graph; the fix left is how to skip even this recompile (off a TPU, which refuses dynamic).
    ``tried``: the dimensions Dynamo traced symbolic before the graph's guards pinned some to one size
    (``unpinned``); ``before``: those pinned so in an earlier compile of the function (updated here). Pinned
    once, the reason is not known (a Python number, or an input of fixed size it meets); pinned again, the
    code fixes the size: every size is a graph, and mark_dynamic would raise; where Dynamo heard the line that
    fixed it (``cap.pins``), or the compiled function's code shows a line that takes the size as a Python
    number, that line is said, first time on."""
    code = cap.code if cap is not None else None
    dims = set(split_top(shapes)) if shapes and not tpu else set()
    gained = [
        c.words.split(" the key ", 1)[1].split(" (absent")[0]
        for c in causes
        if c.kind == "dict_keys" and CACHE in c.words
    ]
    keys = {int(n) for key in gained for n in re.findall(r"\d+", key)}  # sizes a cache is keyed by
    fixed = set(split_top(tried)) - set(split_top(shapes)) if tried and not tpu else set()
    before = set() if before is None else before
    out = []
    for c in causes:
        m = re.search(r"mark_(?:dynamic|unbacked)\((\S+?), (\d+)\)", c.fix) if c.kind in ("size", "size_one") else None
        dim = f"{m[1]} dim {m[2]}" if m else ""
        if c.kind == "size" and (by := _pinned_line(c, fixed, code))[0]:  # a line of the code fixes the size
            unbroken = "; or remove the graph break (see its fix)" if c.fix.startswith("remove the graph break") else ""
            c = dataclasses.replace(c, words=with_note(c.words, by[0]), fix=by[1] + unbroken)
        elif m and dim in dims and c.kind == "size":
            every = ", ".join(d for d in dict.fromkeys(f"{n} dim {i}" for n, i in _MARKS.findall(c.fix)) if d in dims)
            fix = f"none needed: Dynamo made {every or dim} dynamic, so later sizes reuse this graph; to skip even this one: "
            c = dataclasses.replace(c, fix=fix + c.fix if dim not in before else fix.split(";")[0] + _AFTER_PINS)
            c = _held(_together(c, [o for o in causes if o.kind == "size"], dims), cap)
        elif not m and c.kind == "size" and (made := _mismatched(c.guard)) and made <= dims:  # a library's input
            fix = f"none needed: Dynamo made {', '.join(sorted(made))} dynamic, so later sizes reuse this graph"
            rest = c.fix.replace(UNTIL_DYNAMIC, "").removeprefix(UNTIL_MARKED)
            rest = (
                rest.removeprefix("none needed: ")
                if rest.startswith("none needed")
                else f"to skip even this one: {rest}"
            )
            c = dataclasses.replace(c, fix=f"{fix}; {rest}")
        elif (d := _dim_of(c)) and (size := _EXPECTED.search(c.guard)) and int(size[1]) in keys:
            c = dataclasses.replace(c, words=with_note(c.words, _KEYED.format(*d)), fix=FIXED_FIX)
            fixed.add(f"{d[0]} dim {d[1]}")
        elif c.kind == "length" and (j := _PER_SAMPLE.match(c.words)) and f"{j[1]} dim 0" in fixed:  # joined
            said = with_note(c.words.split(": Dynamo fixes")[0], _LISTED.format(j[1], 0, j[2]))
            c = dataclasses.replace(c, words=said, fix=_LISTED_FIX.format(j[2]))
        elif m and dim in fixed and (listed := _list_sized(c.words, causes)):
            c = dataclasses.replace(
                c, words=with_note(c.words, _LISTED.format(m[1], m[2], listed)), fix=_LISTED_FIX.format(listed)
            )
        elif m and dim in fixed and (held := _module_held(c.words, m[1])):
            c = dataclasses.replace(
                c, words=with_note(c.words, _HELD.format(m[1], m[2], held)), fix=_HELD_FIX.format(m[1], held)
            )
        elif (
            c.kind == "size"
            and cap is not None
            and (by := heard_pin(*_fixed_names(c, fixed), cap, static_sizes(cap, dims | fixed)))[0]
        ):
            c = dataclasses.replace(c, words=with_note(c.words, by[0]), fix=by[1])
        elif m and dim in fixed and dim in before:
            note = _FIXED.format(m[1], m[2])
            if (alike := re.match(r"^(.+?), (.+?) dimension \d+ changed", c.words)) and m[1] in alike[0]:
                note += f"; {alike[1]}, {alike[2]} share this size, so the code may read it from any of them"
            c = dataclasses.replace(c, words=with_note(c.words, note), fix=FIXED_FIX)
        elif m and dim in fixed:
            c = dataclasses.replace(
                c, words=with_note(c.words, _PINNED.format(m[1], m[2])), fix=PINNED_FIX.format(m[1], m[2])
            )
        elif not m and (d := _dim_of(c)) and f"{d[0]} dim {d[1]}" in before:  # a resumed frame: no mark to give
            c = dataclasses.replace(c, words=with_note(c.words, _FIXED.format(*d)), fix=FIXED_FIX)
        out.append(c)
    before |= fixed
    return out


# how a size cause names its input and dimension: ``x dimension 0 changed``, a carried ``t changed size (dimension 0:``
_SIZE_SAID = re.compile(r"^(.+?) (?:dimension (\d+) changed|changed size \(dimension (\d+):)")


def _fixed_names(c: RowCause, fixed: set[str]) -> tuple[list[str], str]:
    """(the inputs a size cause names, ``dones, values, rewards dimension 0 changed``, whose dimension this
    graph pinned (``fixed``), that dimension)."""
    m = _SIZE_SAID.match(c.words)
    dim = (m[2] or m[3]) if m else ""
    return ([n for n in m[1].split(", ") if f"{n} dim {dim}" in fixed] if m and dim else []), dim


def _pinned_line(c: RowCause, fixed: set[str], code: CodeType | None) -> tuple[str, str]:
    """(note, fix) for the first such input that a line of ``code`` takes as a Python number."""
    names, dim = _fixed_names(c, fixed)
    return next((by for n in names if (by := pinned_by(code, n, dim))[0]), ("", ""))


def _together(c: RowCause, others: list[RowCause], dims: set[str]) -> RowCause:
    """A mark said with the marks of the other sizes this compile made dynamic (a segment_reduce's ``feat`` and
    ``lengths``; a tensor the module keeps, style transfer's ``self.content_loss_4.target``): marked alone, the
    other still recompiles, so each fix names them all."""
    own = _MARKS.findall(c.fix)
    more = [(n, d) for o in others for n, d in _MARKS.findall(o.fix) if (n, d) not in own and f"{n} dim {d}" in dims]
    more += [(m[1], m[2]) for o in others if (m := _KEPT.match(o.words)) and f"{m[1]} dim {m[2]}" in dims]
    more = [(n, d) for n, d in more if (n, d) not in own]
    if not own or not more:
        return c
    last = f"torch._dynamo.maybe_mark_dynamic({own[-1][0]}, {own[-1][1]})"
    added = "; ".join(f"torch._dynamo.maybe_mark_dynamic({n}, {d})" for n, d in dict.fromkeys(more))
    return dataclasses.replace(c, fix=c.fix.replace(last, f"{last}; {added}: together, as each alone saves nothing", 1))


def _held(c: RowCause, cap: Capture | None) -> RowCause:
    """A mark on a tensor the module keeps (``self.content_loss_4.target``), by a name the user holds: the
    module compiled, or the plain object whose method was compiled (a Kalman filter's ``KF.GenerateBatch``)."""
    if "maybe_mark_dynamic(self." not in c.fix:
        return c
    kind = dict(cap.signature).get("self", "") if cap is not None else ""
    plain = bool(kind) and not re.search(r" \((?:train|eval)\)$", kind)
    holder, said = ("obj", f"obj being the {kind} whose method you compiled") if plain else ("model", "")
    fix = c.fix.replace("maybe_mark_dynamic(self.", f"maybe_mark_dynamic({holder}.")
    last = list(re.finditer(r"torch\._dynamo\.maybe_mark_dynamic\([^()]*\)", fix))[-1]  # then who it is
    said = said or "model being the module you compiled"
    return dataclasses.replace(c, fix=f"{fix[: last.end()]}, {said}{fix[last.end() :]}")


_KEPT = re.compile(r"(self\.[\w.]+), a tensor the module keeps between calls, changed size \(dimension (\d+):")


_AFTER_PINS = (  # the sizes before were pinned: a mark before the first call would not have shared their graphs
    " (the sizes before it were each pinned to a graph of their own, so a mark before the first call saves "
    "nothing: pad to one size before the call to skip those)"
)


def fixed_again(causes: Iterable[RowCause]) -> set[tuple[str, str]]:
    """(input, dim) these causes found pinned to one size a second time: the code fixes that size."""
    return set(re.findall(r"the graph pins (\S+) dim (\d+) to one size again", " ".join(c.words for c in causes)))


def refiled(c: RowCause, dims: Iterable[tuple[str, str]]) -> RowCause:
    """A cause told, on the first pin, that either of two reasons may fix ``dims``' size (a Python number, or
    an input of fixed size it meets), once a later graph pinned it again: the code fixes it, so its fix is
    the later one's (its first, mark_dynamic, would raise)."""
    for n, d in dims:
        if c.fix == PINNED_FIX.format(n, d):
            note = (
                _PINNED.format(n, d).split(": the code either")[0]
                + ", as a later graph did again: "
                + _FIXED.format(n, d).split(": ", 1)[1]
            )
            return dataclasses.replace(c, words=c.words.replace(_PINNED.format(n, d), note), fix=FIXED_FIX)
    return c


def at_limit(causes: list[RowCause], pinned: set[str]) -> list[RowCause]:
    """The causes of a refusal at the recompile limit, with what the function's graphs showed: a dimension a
    graph pinned to one size though Dynamo traced it dynamic (``pinned``) is fixed by the code, so marking it
    dynamic would raise (ConstraintViolationError); the fix is the one its compiles gave, never mark_dynamic."""
    out = []
    for c in causes:
        d = _dim_of(c)
        if d and f"{d[0]} dim {d[1]}" in pinned:
            c = dataclasses.replace(c, fix=FIXED_FIX)
        elif c.kind == "string":  # a mode past the limit, or text that changes per call (a prompt): both said
            c = dataclasses.replace(c, fix=f"{_MORE_VALUES_FIX}; {c.fix.split('; ')[-1]}")
        elif c.fix.startswith("expected once per value"):  # a graph per value, but more values than it allows
            c = dataclasses.replace(c, fix=_MORE_VALUES_FIX)
        out.append(c)
    return out


_MORE_VALUES_FIX = (
    "each value is a graph of its own, and more values came than the recompile limit allows: raise the limit "
    "(where it is set, named here) to at least the number of values you use, before the first call, or compile "
    "only the part every value shares and pick the value's part outside the compiled function"
)


def _mismatched(guard: str) -> set[str]:
    """The dimensions (``input_ids dim 0``) whose size mismatch ``guard`` (one per line) logs, a keyword of a
    ``**kwargs`` wrapper (``kwargs['input_ids']``) by its own name, as the row's dynamic dimensions are."""
    found = re.findall(r"tensor '(.+?)' size mismatch at index (\d+)\.", guard)
    return {_KEYWORD.sub(r"\1", local_name(n)) + f" dim {i}" for n, i in found}


_KEYWORD = re.compile(r"^\w+\['(\w+)'\]$")


def _dim_of(c: RowCause) -> tuple[str, str] | None:
    """(input, dimension) a size cause is about: as its fix marks it, else as its words name it (a resumed
    frame's fix says to remove the break instead)."""
    if c.kind not in ("size", "size_one"):
        return None
    if m := re.search(r"mark_(?:dynamic|unbacked)\((\S+?), (\d+)\)", c.fix):
        return m[1], m[2]
    said = _SIZE_SAID.match(c.words)  # one input only: a merged cause (``a, b dimension 0``) names no one dim
    return (said[1], said[2] or said[3]) if said and ", " not in said[1] else None


def keyed(causes: Iterable[RowCause]) -> list[tuple[str, str]]:
    """(input, dimension) that these causes found used as a dict key (each size its own graph)."""
    return re.findall(r"the code uses (\S+)\.shape\[(\d+)\] as a dict key", " ".join(c.words for c in causes))


def unmark_parts(rows: Mapping[tuple[FunctionKey, Any], WatchRow], function: FunctionKey, name: str, dim: str) -> None:
    """Rows of ``function``'s other parts that said to mark ``name`` dim ``dim`` dynamic, told that it is a dict
    key there (fixed in place)."""
    base = (
        function.name.removeprefix(RESUME).rpartition("_at_")[0] if function.name.startswith(RESUME) else function.name
    )
    where = "the code after the graph break" if function.name.startswith(RESUME) else f"{base}"
    for (k, _), row in rows.items():
        if (
            k != function
            and k.filename == function.filename
            and (k.name == base or k.name.startswith(f"{RESUME}{base}_at_"))
        ):
            row.causes = [unmarked(c, name, dim, where) for c in row.causes]


def unmarked(c: RowCause, name: str, dim: str, where: str) -> RowCause:
    """A cause that told to mark ``name`` dim ``dim`` dynamic, once ``where`` (another part of the function)
    showed the code uses that size as a dict key: marking it would raise there (ConstraintViolationError)."""
    if f"mark_dynamic({name}, {dim})" not in c.fix and f"mark {name} dim {dim} dynamic" not in c.fix:
        return c
    why = (
        f"{where} uses {name}.shape[{dim}] as a dict key, so marking it dynamic would raise (ConstraintViolationError)"
    )
    if c.fix.startswith("none needed"):
        return dataclasses.replace(c, fix=f"{c.fix.split('; to skip even this one')[0]}; {why}")
    return dataclasses.replace(c, fix=f"{FIXED_FIX}; {why}")


_EXPECTED = re.compile(r"size mismatch at index \d+\. expected (\d+)")
_KEYED = (
    "the graph pins {0} dim {1} to one size: the code uses {0}.shape[{1}] as a dict key (the key the cache gained "
    "holds it), so every size is its own graph"
)
_PINNED = (
    "Dynamo traced {0} dim {1} as dynamic, but the graph pins it to this size: the code either uses {0}.shape[{1}] as a "
    "plain Python number (int({0}.shape[{1}]), a loop over range({0}.shape[{1}])), or combines {0} with another "
    "input whose size stayed fixed (broadcasting against it)"
)
_FIXED = (
    "the graph pins {0} dim {1} to one size again, as an earlier graph did: the code fixes this size (it uses "
    "{0}.shape[{1}] as a plain Python number, as int({0}.shape[{1}]) or a loop over range({0}.shape[{1}]) does), "
    "so every size is its own graph"
)


def _list_sized(words: str, causes: list[RowCause]) -> str:
    """A Python list whose length changed as ``words``' size did (``rewards has a different length (was 6, now
    5)`` beside ``log_probs dimension 0 changed 6 -> 5``): a list's length is fixed into every graph, and a
    tensor built from it (torch.tensor(rewards)) has that size, so what meets it is pinned too."""
    size = re.search(r"dimension \d+ changed (\d+) -> (\d+)", words)
    lengths = (re.match(r"^(\S+) has a different length \(was (\d+), now (\d+)\)", c.words) for c in causes)
    return next((m[1] for m in lengths if m and size and m[2] == size[1] and m[3] == size[2]), "")


_MARKS = re.compile(r"mark_(?:dynamic|unbacked)\((\S+?), (\d+)\)")
_PER_SAMPLE = re.compile(r"^([^,\s]+)[^;]*? dimension 0 changed \d+ -> \d+, and (\S+) with it \(one item per sample")
_LISTED = (
    "the graph pins {0} dim {1} to the length of {2}, a Python list: its length is fixed into every graph, and a "
    "tensor built from it (torch.tensor({2})) has that size, so what meets it is fixed too"
)
_LISTED_FIX = (
    "pass {0} in as one tensor (torch.tensor({0}) before the call, with what the function computes from it), so "
    "its length is a tensor size Dynamo can make dynamic; else pad it to a few lengths"
)


def _module_held(words: str, name: str) -> str:
    """A tensor the module holds (``self.cache``) among the inputs whose size changed with ``name``'s: Dynamo
    keeps a module's buffers and parameters at one size, so it pins what meets them."""
    alike = re.match(r"^(.+?) dimension \d+ changed", words)
    return next((n for n in (alike[1].split(", ") if alike else []) if n.startswith("self.") and n != name), "")


_HELD = (
    "the graph pins {0} dim {1} to the size of {2}, a tensor the module holds: Dynamo keeps the sizes of a "
    "module's buffers and parameters fixed, so what meets them is fixed too"
)
_HELD_FIX = (
    "pass {1} into the compiled function as an argument (and return its new value) instead of keeping it on "
    "the module, so its size can change with {0}'s; else keep that size fixed"
)
