"""Dynamo's failed guards in words, each with the fix that fits it and the backend. Pure: strings in,
``Cause`` out. The guard texts are Dynamo's (torch 2.13-2.14); one this module does not know is shown
verbatim and marked so, never guessed."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


class Failure(NamedTuple):
    """One failed guard, parsed from one of Dynamo's recompile reasons."""

    graph: str
    """The compiled graph it was checked against (Dynamo's compile id, e.g. ``"0/1"``)."""
    guard: str
    """The guard itself, without Dynamo's trailing source comment."""
    code: str
    """The user's line behind the guard, when Dynamo names one (``if x.size(0) > 30:``)."""
    where: str
    """That line's file:line, e.g. ``train.py:81``."""


@dataclass(frozen=True)
class Cause:
    """Why a compile happened, in words, with Dynamo's guard behind them and the fix."""

    kind: str
    """The guard family: ``size``, ``dtype``, ``value``, ``lr``, ``grad_mode``, ``verbatim``, ..."""
    words: str
    guard: str = ""
    fix: str = ""
    where: str = ""

    def __str__(self) -> str:
        return self.words


_ID = re.compile(r"^(?P<id>\d+/\d+): ", re.M)
_PLACE = re.compile(r"(?P<file>[^\s/]+\.py):(?P<line>\d+) in ")
_FILE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in')
_TENSOR = re.compile(
    r"tensor '(?P<name>.+?)' (?P<what>size|stride) mismatch at index (?P<i>\d+)\. expected (?P<a>\d+), actual (?P<b>\d+)"
)
_RANK = re.compile(r"tensor '(?P<name>.+?)' rank mismatch\. expected (?P<a>\d+), actual (?P<b>\d+)")
_DTYPE = re.compile(r"tensor '(?P<name>.+?)' dtype mismatch\. expected (?P<a>\w+), actual (?P<b>\w+)")
_GRAD = re.compile(r"tensor '(?P<name>.+?)' requires_grad mismatch\. expected requires_grad=(?P<a>\d)")
_DEVICE = re.compile(
    r"tensor '(?P<name>.+?)' (?:dispatch key set|device) mismatch.*?expected \w*\(?(?P<a>\w+).*?actual \w*\(?(?P<b>\w+)"
)
_TYPE = re.compile(r"expected type of '(?P<name>.+?)' to be a tensor type, ' but found <class '(?P<cls>[\w.]+)'>")
_LEN = re.compile(r"^len\((?P<name>.+?)\) == (?P<n>\d+)$")
_KEY = re.compile(r"list\(dict\.keys\((?P<name>.+?)\)\)\[(?P<i>\d+)\] == (?P<key>.+)$")
_CONTAINS = re.compile(r"(?:___dict_contains|___key_in)\((?P<key>.+?), (?P<name>.+?)\)")
_VALUE = re.compile(r"^(?P<name>.+?) == (?P<value>-?[\d.e+-]+|True|False|'[^']*')$")
_BOUND = re.compile(r"\.size\(\)\[\d+\]|\.stride\(\)\[\d+\]|\bs\d+\b")
_DEALLOC = re.compile(r"invalidated because (?P<name>.+?) got deallocated")
_OBJ = re.compile(r"___check_obj_id\((?P<name>[^,]+),|ID_MATCH.*?(?P<name2>L\[.+?\]|G\[.+?\])")
_STATE = {
    "grad_mode": (
        "grad mode changed (torch.no_grad(), inference_mode or enable_grad around the call)",
        "expected once per mode; run each call under the same mode (always no_grad for evaluation)",
    ),
    "num_threads": (
        "torch's thread count changed (torch.set_num_threads; torch.utils.benchmark.Timer sets it)",
        "set the thread count once before compiling (Timer(..., num_threads=torch.get_num_threads()))",
    ),
    "deterministic_algorithms": (
        "torch.use_deterministic_algorithms() was switched",
        "set it once, before the first compiled call",
    ),
    "default_dtype": (
        "torch's default dtype changed (torch.set_default_dtype)",
        "set the default dtype once, before the first compiled call",
    ),
    "autocast": (
        "autocast was switched on or off, or its dtype changed (torch.autocast around the call)",
        "call the compiled function under the same autocast setting each time",
    ),
    "torch_function": (
        "a torch function mode was entered or left around the call",
        "enter the same modes around every call",
    ),
}


def parse(reasons: Sequence[str]) -> list[Failure]:
    """Dynamo's recompile reasons (one per compiled graph it checked) as failures, one per failed guard."""
    out = []
    for reason in reasons:
        head, _, stack = reason.partition("\nUser stack trace:")
        m = _ID.match(head)
        graph, text = (m["id"], head[m.end() :]) if m else ("", head)
        where = _user_line(stack)
        # one failed guard per graph (Dynamo stops at the first unless recompiles_verbose is on)
        guard, _, comment = text.partition("  # ")
        code, _, place = comment.partition("  # ")
        if not where and (m := _PLACE.search(place)):
            where = f"{m['file']}:{m['line']}"
        out.append(Failure(graph, guard.strip(), code.strip(), where))
    return out


def _user_line(stack: str) -> str:
    frames = [(f["file"], f["line"]) for f in _FILE.finditer(stack)]
    mine = [f for f in frames if "/torch/" not in f[0] and "/site-packages/" not in f[0]] or frames
    return f"{mine[-1][0]}:{mine[-1][1]}" if mine else ""


def _local(source: str) -> str:
    """Dynamo's name for an input (``L['x']``, ``G['m']._modules['1']``) as the user wrote it."""
    s = re.sub(r"L\['([^']+)'\]", r"\1", source.strip())
    s = re.sub(r"G\['([^']+)'\]", r"\1", s)
    return re.sub(r"\._modules\['([^']+)'\]", r".\1", s)


def words(f: Failure, *, tpu: bool = False, static: bool = False) -> Cause:
    """One failed guard in words, with the fix for this backend."""
    g, at = f.guard, f.where
    if m := _TENSOR.search(g):
        return (
            _size(m, g, tpu, static)
            if m["what"] == "size"
            else Cause(
                "stride",
                f"{_local(m['name'])}'s memory layout changed (stride {m['i']}: {m['a']} -> {m['b']}; "
                "a transposed, sliced or channels_last tensor)",
                g,
                "call .contiguous() on it before the compiled call",
            )
        )
    if m := _RANK.search(g):
        return Cause(
            "rank",
            f"{_local(m['name'])} has {m['b']} dimensions, was {m['a']}",
            g,
            "expected once per rank; reshape inputs to one rank if this keeps changing",
        )
    if m := _DTYPE.search(g):
        return Cause(
            "dtype",
            f"{_local(m['name'])} dtype changed {m['a']} -> {m['b']}",
            g,
            "expected once per dtype; cast inputs to one dtype before the call",
        )
    if m := _GRAD.search(g):
        was = m["a"] == "1"
        return Cause(
            "requires_grad",
            f"{_local(m['name'])}.requires_grad changed {was} -> {not was}",
            g,
            "expected once per setting; detach() inputs (or set requires_grad) the same way every call",
        )
    if m := _DEVICE.search(g):
        return Cause(
            "device",
            f"{_local(m['name'])} moved device: {m['a']} -> {m['b']}",
            g,
            "expected once per device; move inputs to one device before the call",
        )
    if m := _TYPE.search(g):
        return Cause(
            "tensor_type",
            f"{_local(m['name'])} is now a {m['cls'].rsplit('.', 1)[-1]}, not the plain tensor "
            "compiled for (nn.Parameter vs Tensor)",
            g,
            "pass the same kind each time (p.detach() for a plain tensor)",
        )
    if m := _DEALLOC.search(g):
        return Cause(
            "deallocated",
            f"{_local(m['name'])} was freed and a new object made (a graph is tied to the "
            "object it was compiled for: an optimizer or module recreated per step)",
            g,
            "create the object once and reuse it",
        )
    if "GLOBAL_STATE" in g:
        return _state(g)
    if any(h in g for h in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")):
        name = _local(g.split("._", 1)[0].split("(")[-1])
        return Cause(
            "hooks",
            f"a hook was added to or removed from {name}",
            g,
            "register hooks once, before the first compiled call",
        )
    if ".training" in g:
        name = _local(g.split(".training")[0].split("(")[-1])
        return Cause(
            "training",
            f"train/eval switched: {name}.training was {g.rsplit(' ', 1)[-1]}",
            g,
            "expected once per mode (one train graph, one eval graph)",
        )
    if "BACKEND_MATCH" in g:
        return Cause(
            "backend",
            "compiled again with a different backend callable",
            g,
            "reuse one backend object (or functools.partial) for every torch.compile call",
        )
    if "Duplicate tensor found" in g or "aliasing" in g.lower():
        return Cause(
            "aliasing",
            "two inputs are now the same tensor (or no longer are)",
            g,
            "pass distinct tensors (or the same one) consistently",
        )
    if m := _LEN.match(g):
        return Cause(
            "length",
            f"{_local(m['name'])} has a different length (was {m['n']})",
            g,
            "keep the list/tuple the same length, or pass one stacked tensor",
        )
    if (m := _KEY.search(g)) or (m := _CONTAINS.search(g)):
        return Cause(
            "dict_keys",
            f"dict {_local(m['name'])}'s keys changed (added, dropped or reordered; had {m['key']})",
            g,
            "pass the dict with the same keys in the same order every call",
        )
    if _BOUND.search(g) and re.search(r"[<>]=?|==", g):
        line = f" by your code at {_short(at)}" + (f" ({f.code})" if f.code else "") if at else ""
        return Cause(
            "specialised",
            f"a size crossed a bound the graph assumed ({g}), set{line}",
            g,
            "expected once per side of that branch; if sizes cross it often, pad them to one side "
            "or express the branch with torch.cond",
            at,
        )
    if m := _OBJ.search(g):
        name = _local(m["name"] or m["name2"] or "an input")
        return Cause(
            "identity",
            f"{name} is a different object than the one compiled for (another module "
            "instance, function or Python object)",
            g,
            "reuse one instance across calls",
        )
    if m := _VALUE.match(g):
        return _value(m["name"], m["value"], g)
    return Cause("verbatim", f"Dynamo's guard, not translated: {g}", g)


def _size(m: re.Match, g: str, tpu: bool, static: bool) -> Cause:
    name, i, a, b = _local(m["name"]), m["i"], m["a"], m["b"]
    bucket = "pad to a few bucket sizes (tl.recommend_buckets): torch_tpu rejects dynamic shapes"
    if ("cache" in name or "keys" in name or "values" in name) and i == "2":
        return Cause(
            "cache_length",
            f"static cache length changed {a} -> {b}",
            g,
            "fix max_cache_len so every call shares one cache size",
        )
    if "input_ids" in name and i == "1":
        words = f"prompt length changed {a} -> {b} (a new prompt length, or prefill <-> decode)"
    elif "attention_mask" in name:
        words = f"attention mask length changed {a} -> {b}"
    else:
        words = f"{name} dimension {i} changed {a} -> {b}"
    dynamic = f"mark the dimension dynamic before the first call (torch._dynamo.mark_dynamic({name}, {i}))"
    if tpu:
        fix = bucket
    elif i == "0" and int(b) < int(a):
        fix = f"for a short last batch, DataLoader(drop_last=True) or pad it to {a}; else {dynamic}"
    else:
        fix = f"{dynamic}, or pad to a few sizes"
    if static and not tpu:
        words += " (compiled with dynamic=False: every size is its own graph)"
        fix = f"pad to a few sizes, or {dynamic}: it is honoured under dynamic=False too"
    if not tpu:
        fix += "; on a TPU: pad to buckets instead (torch_tpu rejects dynamic shapes)"
    return Cause("size", words, g, fix)


def _value(raw: str, value: str, g: str) -> Cause:
    name = _local(raw)
    if "param_groups" in name and "'lr'" in name:
        return Cause(
            "lr",
            f"the optimizer's learning rate changed (was {value}; an LR scheduler sets a new one each "
            "step, and a Python float is baked into the graph)",
            g,
            "hold the learning rate in a tensor: the optimizer's lr=torch.tensor(0.01)",
        )
    kind = "string" if value.startswith("'") else "float" if re.search(r"[.e]", value) else "int"
    if raw.startswith("G["):
        return Cause(
            "global",
            f"the global {name} changed (was {value}; its value is baked into the graph)",
            g,
            "pass it as an argument (a tensor if it changes often) instead of reading a global",
        )
    if value in ("True", "False"):
        return Cause(
            "flag",
            f"the flag {name} was {value} (each value is its own graph)",
            g,
            "expected once per value; pass a constant if it should not change",
        )
    if "cell_contents" in raw:
        name = "a closure variable"
    fix = "pass it as a tensor (torch.tensor(value)) so the graph reads it at run time"
    return Cause(
        "value",
        f"Python {kind} {name} changed (was {value}; its value is baked into the graph)",
        g,
        fix if kind != "string" else "expected once per value",
    )


def _state(g: str) -> Cause:
    fields = g.split("GLOBAL_STATE changed:", 1)[-1].split()
    said = [next((v for k, v in _STATE.items() if f.startswith(k)), None) for f in fields]
    if not fields or None in said:
        return Cause("verbatim", f"Dynamo's guard, not translated: {g}", g)
    return Cause("global_state", "; ".join(s[0] for s in said if s), g, "; ".join(s[1] for s in said if s))


def _short(where: str) -> str:
    """``/a/b/train.py:81`` -> ``train.py:81``; a notebook cell -> its cell."""
    from tpu_lab.compile.frames import where_label

    path, _, line = where.rpartition(":")
    return where_label(path, int(line)) if line.isdigit() else where


def short_guard(guard: str, width: int = 60) -> str:
    """A guard cut to ``width`` characters for a table cell (the whole text stays in to_dict and on hover)."""
    g = " ".join(guard.split())
    return g if len(g) <= width else g[: width - 1] + "…"


_UNHELPFUL = ("Please report an issue", "fundamental", "Please file an issue")


def graph_break_words(reason: str) -> Cause:
    """A graph break in words, with Dynamo's own hints as the fix (its explanation where it gives one)."""
    lines = [line.strip() for line in reason.strip().splitlines()]
    hints = [h.split("Hint:", 1)[1].strip() for h in lines if h.startswith("Hint:")]
    hints = [h for h in hints if not any(u in h for u in _UNHELPFUL)]
    if "generic_jump" in reason or "Data-dependent branching" in reason:
        return Cause(
            "data_dependent",
            "data-dependent branching: an if/while on a tensor's value",
            lines[0] if lines else reason,
            "express the branch with torch.cond, or make it branchless (torch.where, torch.clamp)",
        )
    explanation = next((h.split("Explanation:", 1)[1].strip() for h in lines if h.startswith("Explanation:")), "")
    first = next((h for h in lines if h and not h.startswith("Encountered graph break")), reason.strip())
    return Cause("graph_break", explanation or first, first, "; ".join(hints[:2]))
