"""Guards on containers, in words: a list's or a dict's length, a dict's keys (gained, lost, reordered),
the keyword arguments of a call, a ModuleList's depth, an optimizer's per-parameter state."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from tpu_lab.compile.causes.cause import Cause, Failure, local_name
from tpu_lab.compile.causes.guard_hooks import forward_replaced
from tpu_lab.compile.causes.guard_loops import iterator_words
from tpu_lab.compile.causes.length_fixes import emptied_fix, global_dict, length_fix, not_passed_fix, on_module
from tpu_lab.compile.causes.library_memos import memo_words
from tpu_lab.compile.causes.rewritten_state import FILLED_FIX

_LEN = re.compile(r"^len\((?P<name>.+?)\) (?:==|!=) (?P<n>\d+)$")  # != : how Dynamo words a dict's length
_KEY = re.compile(r"list\(dict\.keys\((?P<name>.+?)\)\)\[(?P<i>\d+)\] == (?P<key>.+)$")
# the key may be a tuple ((4, 8): a cache keyed by sizes), so the dict is what follows the last ", "
_CONTAINS = re.compile(r"(?:___dict_contains|___key_in)\((?P<key>.+), (?P<name>[LG]\[.+?\](?:\S*?)|[\w.\[\]']+)\)")
_NOT = re.compile(r"^not (?P<name>[\w\[\]'.]+)$")
_MISSING = re.compile(r"^KeyError on (?P<name>.+?)\[(?P<key>'[^']*'|\d+)\]$")  # the key the graph read is gone
_PARAMETER_LIST = re.compile(r"^(?P<name>.+)\._size == (?P<n>\d+)$")  # nn.ParameterList keeps its length in _size


def container_words(
    f: Failure, *, caller: str = "", inputs: Mapping[str, str] | None = None, pipeline: bool = False
) -> Cause | None:
    """A failed guard on a container in words (``inputs``: the new call's, by name; ``pipeline``: called
    from inside a transformers pipeline); None for others."""
    g = f.guard
    if (loop := iterator_words(f)) is not None:  # a loop's iterator carried over a graph break
        return loop
    if (m := _NOT.match(g)) and local_name(m["name"]) == "kwargs":
        passed = [n[len("kwargs['") : -2] for n in (inputs or {}) if n.startswith("kwargs['")]  # by keyword
        return Cause(
            "kwargs",
            "keyword arguments were passed"
            + (f" ({', '.join(passed)})" if passed else "")
            + "; the graph was compiled for a call without any",
            g,
            "expected once per set of keyword arguments; pass the same ones every call",
        )
    if m := _MISSING.match(g):
        name, key = local_name(m["name"]), m["key"].strip("'")
        if name == "kwargs":
            return Cause(
                "kwargs",
                f"the keyword argument {key} was passed before and is not now",
                g,
                f"pass {key} the same way every call (always, with the same value type)",
            )
        if name.endswith(("._parameters", "._buffers")):  # pruning, weight norm: a parameter made an attribute
            owner, what = name.rpartition("._")[::2]
            return Cause(
                "parameters",
                f"{owner} has no {what[:-1]} {m['key']} now (the graph read it): another module built without it "
                "(bias=False), or it was removed or replaced by a plain attribute, as torch.nn.utils.prune, "
                "weight_norm and parametrizations do",
                g,
                "expected once per module configuration (a module built without it is a graph of its own); where "
                "your code removes it (pruning, weight_norm), make such changes before the first compiled call",
            )
        return Cause(
            "dict_keys", f"{name} has no key {m['key']} now; the graph read it", g, f"keep the same keys in {name}"
        )
    if m := _NOT.match(g):  # truthiness: the graph was compiled while the container was empty
        name = local_name(m["name"])
        if memo := memo_words(name, g):  # torch.distributions.kl._KL_MEMOIZE: the library's own memo
            return memo
        if re.search(r"(^|\.)state$", name):  # an optimizer's per-parameter state, empty before its first step
            return Cause("optimizer_state", _STATE_CREATED, g, _STATE_FIX)
        if global_dict(m["name"], inputs):
            return Cause(
                "length",
                f"{name}{GLOBAL_DICT} holds items now; the graph was compiled while it was empty",
                g,
                not_passed_fix(name),
            )
        what = "positional arguments were passed" if name == "args" else f"{name} holds items now"
        return Cause(
            "length",
            f"{what}; the graph was compiled while {'there were none' if name == 'args' else 'it was empty'}",
            g,
            "call it the same way every time"
            if name == "args"
            else f"{FILLED_FIX}; if it gains a key per new input (a cache keyed by size), each key is a graph of its own: "
            "read it outside the compiled function and pass in only what the code needs"
            if on_module(name, inputs)  # Reformer's cache: filled at the first call, a compile once
            else not_passed_fix(name)
            if m["name"].startswith("G[")
            else emptied_fix(name),
        )
    if (m := _PARAMETER_LIST.match(g)) and any("nn/modules/container.py" in w for _, w in f.also):  # len() in torch
        return Cause(
            "length",
            f"the length of {local_name(m['name'])} (an nn.ParameterList) changed (was {m['n']}): each parameter in it "
            "is an input of the graph, so each length compiles a graph of its own",
            g,
            "expected once per length (a prompt or adapter appended per task is a graph per task): raise "
            "torch._dynamo.config.recompile_limit above the number of lengths you use, or create them all up front "
            "and weigh the ones not yet in use by zero (a mask tensor), so one graph serves every length",
        )
    m = _LEN.match(g)
    if m and (memo := memo_words(local_name(m["name"]), g, m["n"])):  # einops' _type2backend, grown in a compile
        return memo
    if m and local_name(m["name"]) == "args":  # a wrapper's *args: positional ones
        return Cause(
            "args",
            f"the number of positional arguments changed (was {m['n']})",
            g,
            "call it the same way every time (the same arguments, positional or by keyword)",
        )
    if m and local_name(m["name"]) == "kwargs":
        fix = (
            "expected once per set of keyword arguments (with and without labels, say, are two graphs); to keep "
            "one, pass the same ones every call, each a value of the same kind (a tensor every time, not None)"
        )
        if caller and pipeline:  # the pipeline chose them, e.g. for the last, smaller batch
            fix = (
                f"{caller} chose these keyword arguments: expected once per case; to keep one graph, make every "
                "call alike (e.g. a number of inputs that batch_size divides)"
            )
        elif caller:  # the library's calls differ from the user's own (a direct call, then generate())
            fix = (
                f"{caller} chose these keyword arguments: one graph per way of calling the model is expected; to "
                "keep one graph, call the model the same way everywhere (or compile each calling path separately)"
            )
        now = f"; {f.code}" if f.code.startswith("now passed:") else ""  # the keywords of this call
        were = "there was 1" if m["n"] == "1" else f"there were {m['n']}"
        return Cause("kwargs", f"a keyword argument was added or dropped ({were}{now})", g, fix)
    if m and re.search(r"(^|\.)state\[", m["name"]) and m["n"] == "0":  # an optimizer's per-parameter state
        return Cause("optimizer_state", _STATE_CREATED, g, _STATE_FIX)
    if m and re.search(r"(^|\.)param_groups$", m["name"]):  # torch's optimizer step reads every group
        return Cause(
            "length",
            f"the optimizer has another number of param groups (was {m['n']}; add_param_group, as progressive "
            "unfreezing does): its compiled step is a graph per number of groups",
            g,
            "expected once per group added: nothing to change (creating every group at the start only moves this "
            "compile to the step where their parameters first get gradients)",
        )
    if m and m["name"].endswith("._modules"):  # a ModuleList or Sequential grew or shrank
        return Cause(
            "length",
            f"{local_name(m['name']).removesuffix('._modules')} has another number of modules (was {m['n']})",
            g,
            "expected once per model depth; add or remove layers before the first compiled call",
        )
    if m and "!=" in g and not global_dict(m["name"], inputs):  # Dynamo words a dict's length with !=
        name = local_name(m["name"])
        keys = [n[len(name) + 1 : -1] for n in (inputs or {}) if n.startswith(f"{name}[")]
        return Cause(
            "dict_keys",
            f"dict {name} has another number of keys (was {m['n']}" + (f"; now {', '.join(keys)})" if keys else ")"),
            g,
            "pass the dict with the same keys every call",
        )
    if m and m["name"].endswith(("._parameters", "._buffers")):  # remove_weight_norm, a parametrization
        owner, what = local_name(m["name"].rpartition("._")[0]), m["name"].rpartition("._")[2]
        return Cause(
            "parameters",
            f"{owner} has another number of {what} (was {m['n']}): some were added or removed (weight norm removed, "
            "a parametrization registered)",
            g,
            "expected once; change a module's parameters (remove_weight_norm, fusing) before its first compiled call",
        )
    if m:
        held = re.search(r"\blen=(\d+)", (inputs or {}).get(local_name(m["name"]), ""))
        shorter = f", now {held[1]}" if held and int(held[1]) < int(m["n"]) else ""  # never read as growing
        return Cause(
            "length",
            f"{local_name(m['name'])}{GLOBAL_DICT if global_dict(m['name'], inputs) else ''} has a different length (was {m['n']}{shorter})",
            g,
            length_fix(m["name"], f, inputs),
        )
    if m := _CONTAINS.search(g):  # "not ___dict_contains(k, d)": k was absent when compiled
        now = "gained" if g.lstrip().startswith("not ") else "lost"
        name = local_name(m["name"])
        if m["name"].startswith("G[") and now == "gained" and (of := re.fullmatch(r"\(\d{9,}, (.+)\)", m["key"])):
            words = f"{name} (a global dict) gained a key for one more object (its id, with {of[1]}){_PER_OBJECT}"
            return Cause("dict_keys", words, g, _PER_OBJECT_FIX)  # parametrize.cached(): (id(module), 'weight')
        if m["name"].startswith("G[") and now == "gained" and m["key"].startswith("<class "):  # einops' backends
            words = f"{name} (a global dict) gained the key {m['key']}{_PER_TYPE}"
            return Cause("dict_keys", words, g, _PER_TYPE_FIX)
        if m["name"].startswith("G[") and now == "gained":  # a global the code fills on a miss: a cache
            return Cause("dict_keys", f"{name} (a global dict) gained the key {m['key']}{CACHE_WORDS}", g, CACHE_FIX)
        if replaced := forward_replaced(g, name, m["key"], (inputs or {}).get("self", "")):
            return replaced
        if on_module(name, inputs) and now == "gained" and re.fullmatch(r"'[A-Za-z_]\w*'", m["key"]):  # a setting
            words = f"dict {name} gained the key {m['key']}{_SETTING}"
            return Cause("dict_keys", words, g, _SETTING_FIX)
        if on_module(name, inputs) and now == "gained":  # a module's own cache, never passed in
            return Cause("dict_keys", f"dict {name} gained the key {m['key']}{CACHE_WORDS}", g, CACHE_FIX)
        flag = (inputs or {}).get(f"{name}[{m['key']}]") in ("True", "False")  # a flag passed only sometimes
        fix = (
            f"expected once per case: a flag passed only sometimes picks a code path (each set of keys and each "
            f"value of {m['key']} is a graph); pass it every call, at its default where unused, if its value rarely "
            "changes"
            if flag
            else "pass the dict with the same keys every call"
        )
        return Cause("dict_keys", f"dict {name} {now} the key {m['key']}", g, fix)
    if m := _KEY.search(g):
        return Cause(
            "dict_keys",
            f"the keys of dict {local_name(m['name'])} changed (added, dropped or reordered; key {m['i']} was {m['key']})",
            g,
            "pass the dict with the same keys in the same order every call",
        )
    return None


GLOBAL_DICT = " (a global dict)"


CACHE = "a cache filled on a miss"
CACHE_WORDS = (
    f" (absent when this graph was compiled): {CACHE} gains one key per new size, and each key "
    "is a graph of its own, up to the recompile limit"
)
_PER_OBJECT = " (absent when this graph was compiled): a cache keyed by object gains one key per object it holds"
_PER_OBJECT_FIX = "fill it before the first compiled call (run what fills it once outside, under the same context)"
_PER_TYPE = (
    " (absent when this graph was compiled): a registry keyed by type, filled once for each new type it meets "
    "(einops' backends: a Parameter beside a plain tensor)"
)
_PER_TYPE_FIX = (
    "expected once per type: nothing in your code to change (to skip even this compile, run one call before "
    "compiling, so the registry holds every type the calls pass)"
)
_SETTING = " (absent when this graph was compiled): a setting the code reads picks its path, each setting a graph"
_SETTING_FIX = (
    "expected once per setting (a config the code reads inside forward: each set of keys and values is a graph "
    "of its own); in a sweep that changes it, call torch._dynamo.reset() between settings so the graphs of "
    "settings done with do not count toward the recompile limit"
)
CACHE_FIX = (
    "keep the cached values in one tensor computed for the longest size outside the compiled function and slice "
    "it inside by the size (t[:n]): from the second size on, one graph serves every size; or fill the cache outside, before "
    "the first compiled call, for every key (no misses then, but each key read is still a graph of its own), or "
    "pad to a few sizes"
)


def one_dict_change(causes: list[Cause]) -> list[Cause]:
    """A dict with another number of keys fails its key-order guard too: one change, said once (the number
    of keys, with the keys now), with both guards; never a second cause on the same dict's keys."""
    counted = {m[1]: i for i, c in enumerate(causes) if (m := re.match(r"dict (\S+) has another number of", c.words))}
    return _folded(causes, [counted.get(m[1]) if (m := _REORDERED.match(c.words)) else None for c in causes])


def none_not_shorter(causes: list[Cause]) -> list[Cause]:
    """A container that is now None fails its length guard too: one change, said once (that it is None), with
    both guards; never "points has a different length" beside "points is now None"."""
    nones = {m[1]: i for i, c in enumerate(causes) if (m := re.match(r"(\S+) is now None\b", c.words))}
    return _folded(causes, [nones.get(m[1]) if (m := _LENGTH_OF.match(c.words)) else None for c in causes])


def _folded(causes: list[Cause], into: list[int | None]) -> list[Cause]:
    """``causes`` without those ``into`` names another cause for (by index), whose guards that one takes."""
    out = []
    for i, c in enumerate(causes):
        moved = [causes[j].guard for j, k in enumerate(into) if k == i]
        if into[i] is None:
            out.append(dataclasses.replace(c, guard="\n".join([c.guard, *moved])) if moved else c)
    return out


_REORDERED = re.compile(r"the keys of dict (\S+) changed")
_LENGTH_OF = re.compile(r"^(\S+) has a different length \(")


_STATE_CREATED = "the optimizer's state was created on its first step (momentum or Adam buffers appear then)"
_STATE_FIX = "expected once: the state is created at the first step, and kept from then on"


def optimizer_step(name: str, value: str, g: str) -> Cause | None:
    """An optimizer's step count kept as a Python int per parameter (``list(opt.state.values())[0]['step']
    == 3``: transformers' Adafactor), read by its compiled step as a constant; None for any other value."""
    if not re.search(r"\.state\.values\(\)\)\[\d+\]\['step'\]$", name) or "." in value:
        return None
    each = re.sub(r"^list\((.+)\.values\(\)\)\[\d+\]", r"\1[p]", name)  # one per parameter p: said once
    return Cause("optimizer_step", _STEP_WORDS.format(each, value), g, _STEP_FIX)


_STEP_WORDS = (
    "the optimizer's step count {0} changed (was {1}): this optimizer keeps it as a Python int, which its compiled "
    "step() reads as a constant, so each step is a graph of its own, until the recompile limit"
)
_STEP_FIX = (
    "leave this optimizer's step() uncompiled (compile the model's forward and loss), or use an optimizer that "
    "keeps its step count in a tensor (torch.optim's Adam, AdamW, SGD)"
)
