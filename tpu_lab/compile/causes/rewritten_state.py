"""A tensor the module keeps and its own forward rewrites (YOLOv5's grid per level, rebuilt when the feature
map's size changes): every graph checks it as it was when the graph compiled, so each rewrite compiles again,
and a graph compiled for earlier inputs no longer matches once the code rebuilt the tensor for others. The
placeholder's rank, each size it went through: one change, told as one cause with the line that writes it."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from tpu_lab.compile.causes.cause import Cause, local_name

_GUARD = re.compile(
    r"tensor '(?P<name>.+?)' (?:(?:size|stride) mismatch at index (?P<i>\d+)|(?P<what>rank|dtype|device) mismatch)"
    r"\. expected (?P<a>[^,]+), actual (?P<b>.+)"
)
_KINDS = ("size", "rank", "stride", "dtype", "device", "value")
_INT = re.compile(r"^(?P<name>\S+) == (?P<was>-?\d+)$", re.M)  # an int the module keeps (max_seq_len_cached)

REWRITTEN_FIX = (
    "expected while the code rewrites it; to compile once per input shape, compute it inside the call from the "
    "input every time instead of keeping it on the module (inside the graph it costs little), or build it "
    "outside the compiled function and pass it in (a cache that grows: build it once at the largest size it will "
    "need, before the first compiled call, only where a slice of the larger one holds the same values: a plain "
    "position table does; one whose values depend on the length it was built for, as Dynamic NTK scaling's base "
    "does, does not, and there computing it inside the call each time is the fix)"
)


def rewritten_joined(causes: list[Cause], rewritten: Mapping[str, str]) -> list[Cause]:
    """``causes`` with those whose every tensor is one the module's own code rewrites (``rewritten``: tensor ->
    where, ``Capture.rewritten``) joined into one cause, in the first one's place."""
    causes = _one_fill([_set_by_forward(c, rewritten) for c in causes])
    mine = [c for c in causes if c.kind in _KINDS and (names := _named(c)) and all(n in rewritten for n in names)]
    if all(c.kind == "value" for c in mine):  # an int alone (a step counter) keeps its own words: a cache's length
        return causes  # is one with its tensors only (RoPE's max_seq_len_cached beside cos_cached)
    names = list(dict.fromkeys(n for c in mine for n in _named(c)))
    changes: dict[str, list[str]] = {}
    for c in mine:
        for m in _GUARD.finditer(c.guard):
            what = f"dimension {m['i']}" if m["i"] else {"rank": "dimensions"}.get(m["what"], m["what"])
            changes.setdefault(what, []).append(f"{m['a']} -> {m['b'].strip()}")
        for m in _INT.finditer(c.guard):
            changes.setdefault(m["name"].rsplit(".", 1)[-1], []).append(f"was {m['was']}")
    told = "; ".join(f"{what}: {', '.join(dict.fromkeys(seen))}" for what, seen in changes.items())
    them = "it" if len(names) == 1 else "them"
    by_method = {rewritten[n].split(" (", 1)[0]: rewritten[n] for n in reversed(names)}  # one place per method
    writers = " and ".join(dict.fromkeys(by_method[rewritten[n].split(" (", 1)[0]] for n in names))
    words = (
        f"{', '.join(names)} changed ({told}): {writers} rewrites {them} itself, so each graph holds {them} as "
        "they were when it compiled"
    ).replace("holds it as they were", "holds it as it was")
    joined = Cause("rewritten", words, "\n".join(c.guard for c in mine), REWRITTEN_FIX)
    gone = {id(c) for c in mine[1:]}
    return [joined if c is mine[0] else c for c in causes if id(c) not in gone]


def _one_fill(causes: list[Cause]) -> list[Cause]:
    """The guards on one container the code fills (a key gained, no longer empty): one change, said once, in
    the first one's place with every guard."""
    first: dict[str, int] = {}
    out: list[Cause] = []
    for c in causes:
        filler = c.words.rpartition("; ")[2] if c.fix in (FILLED_FIX, FILLED_ARGUMENT_FIX) else ""
        if filler.endswith(" fills it itself") and filler in first:
            kept = out[first[filler]]
            out[first[filler]] = dataclasses.replace(kept, guard=f"{kept.guard}\n{c.guard}")
            continue
        first.setdefault(filler, len(out)) if filler else None
        out.append(c)
    return out


def _named(cause: Cause) -> list[str]:
    ints = [local_name(m["name"]) for m in _INT.finditer(cause.guard)] if cause.kind == "value" else []
    return [local_name(m["name"]) for m in _GUARD.finditer(cause.guard)] + ints


_FLAG = re.compile(r"^(\S+) == (?:True|False)$", re.M)
FLAG_SET_FIX = (
    "expected once: the module's forward sets it on its first call (a data-dependent init); run one batch through "
    "the uncompiled model before compiling, so every graph is compiled with it set"
)


_EMPTY = re.compile(r"^not (\S+)$", re.M)
FILLED_FIX = (
    "expected once: the first call fills it, and from then on it holds items; to skip even this compile, give it "
    "its items before the first compiled call (create its keys in __init__), or keep what forward records there "
    "outside the compiled function"
)


FILLED_ARGUMENT_FIX = (
    "expected once: the compiled function fills the container you pass on its first call (a decoding state, a "
    "cache), so a call with it empty and a call with it filled are a graph each; every later call, or a fresh "
    "empty one, reuses them"
)
_GAINED = re.compile(r"dict (?P<name>\S+) gained the key ")


def _set_by_forward(cause: Cause, rewritten: Mapping[str, str]) -> Cause:
    """A flag the module's own forward sets (ActNorm's ``self.data_dep_init_done = True`` on its first batch):
    said with the line that sets it, and fixed by running that first call uncompiled. A container it fills
    (SAC's ``self.outputs['mu'] = mu``), compiled while empty, likewise: once, at the second call."""
    filled = [local_name(m[1]) for m in _EMPTY.finditer(cause.guard)]
    if cause.kind == "length" and filled and all(n in rewritten for n in filled):
        writers = " and ".join(dict.fromkeys(rewritten[n] for n in filled))
        words = f"{', '.join(filled)} held no items when the graph compiled; {writers} fills it itself"
        passed = not any(n.startswith("self") for n in filled)  # an argument: no __init__ of the user's to fill it
        return dataclasses.replace(cause, words=words, fix=FILLED_ARGUMENT_FIX if passed else FILLED_FIX)
    if cause.kind == "dict_keys" and (gained := _GAINED.match(cause.words)) and gained["name"] in rewritten:
        words = f"{cause.words}; {rewritten[gained['name']]} fills it itself"
        passed = not gained["name"].startswith("self")  # the module's own dict: its keys can be made in __init__
        return dataclasses.replace(cause, words=words, fix=FILLED_ARGUMENT_FIX if passed else FILLED_FIX)
    names = [local_name(m[1]) for m in _FLAG.finditer(cause.guard)]
    if cause.kind != "flag" or not names or not all(n in rewritten for n in names):
        return cause
    writers = " and ".join(dict.fromkeys(rewritten[n] for n in names))
    them = "it" if len(set(names)) == 1 else "them"
    return dataclasses.replace(cause, words=f"{cause.words}; {writers} sets {them} itself", fix=FLAG_SET_FIX)
