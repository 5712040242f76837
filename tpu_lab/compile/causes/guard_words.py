"""Dynamo's failed guards in words, each with the fix that fits it and the backend. Pure: strings in,
``Cause`` out. The guard texts are Dynamo's (torch 2.13-2.14); one this module does not know is shown
verbatim and marked so, never guessed."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from tpu_lab.compile.causes.cause import VERBATIM_FIX, Cause, Failure, bare, local_name, sizes_read
from tpu_lab.compile.causes.guard_aliasing import alias_words
from tpu_lab.compile.causes.guard_attributes import attribute_words
from tpu_lab.compile.causes.guard_backend import backend_words
from tpu_lab.compile.causes.guard_containers import container_words
from tpu_lab.compile.causes.guard_derived import derived_words, size_left_words
from tpu_lab.compile.causes.guard_hooks import hook_words
from tpu_lab.compile.causes.guard_layouts import described, layout_words, offset_words, rank_fix, strides_of_sizes
from tpu_lab.compile.causes.guard_members import member_words
from tpu_lab.compile.causes.guard_objects import none_words, object_words
from tpu_lab.compile.causes.guard_places import as_range, own_bound, set_by, slocs
from tpu_lab.compile.causes.guard_sizes import (
    batch_side_fix,
    is_parameter,
    ragged,
    size_words,
)
from tpu_lab.compile.causes.guard_values import (
    dispatch_words,
    loop_count_words,
    number_condition_words,
    numbers_compared,
    state_words,
    value_words,
)
from tpu_lab.compile.causes.held_numbers import tuple_words
from tpu_lab.compile.causes.numpy_sizes import numpy_relation_words
from tpu_lab.compile.causes.size_values import size_value_words
from tpu_lab.compile.causes.tensor_kinds import tensor_type_words
from tpu_lab.compile.sources.packages import USER, package_of
from tpu_lab.compile.sources.value_text import other_number

_ID = re.compile(r"^(?P<id>\d+/\d+): ", re.M)
_PLACE = re.compile(r"(?P<file>[^\s(]+\.py):(?P<line>\d+) in ")  # the path as Dynamo shortens it
_FILE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in')
TENSOR_MISMATCH = re.compile(  # a tensor's size or stride guard, as Dynamo reports it failed
    r"tensor '(?P<name>.+?)' (?P<what>size|stride) mismatch at index (?P<i>\d+)\. expected (?P<a>\d+), actual (?P<b>\d+)"
)
_RANK = re.compile(r"tensor '(?P<name>.+?)' rank mismatch\. expected (?P<a>\d+), actual (?P<b>\d+)")
_DTYPE = re.compile(r"tensor '(?P<name>.+?)' dtype mismatch\. expected (?P<a>\w+), actual (?P<b>\w+)")
_GRAD = re.compile(r"tensor '(?P<name>.+?)' requires_grad mismatch\. expected requires_grad=(?P<a>\d)")
_DEVICE = re.compile(r"tensor '(?P<name>.+?)' device mismatch.*?expected \w*\(?(?P<a>\w+).*?actual \w*\(?(?P<b>\w+)")
_KEYS = re.compile(
    r"tensor '(?P<name>.+?)' dispatch key set mismatch\. expected DispatchKeySet\((?P<a>[^)]*)\), actual DispatchKeySet\((?P<b>[^)]*)\)"
)
# torch 2.13: "to be a tensor type, ' but found <class 'C'>"; 2.14: "to be <class 'torch.Tensor'>, but found ..."
_TYPE = re.compile(
    r"expected type of '(?P<name>.+?)' to be (?:a tensor type, '|<class '(?P<want>torch\.[\w.]+)'>,) "
    r"but found <class '(?P<cls>[\w.]+)'>"
)
_DUPLICATE = re.compile(r"Duplicate tensors? found(?::)?(?P<names>.*)")
_NONE = re.compile(r"^(?P<name>\S+) is (?P<not>not )?None$")
_VALUE = re.compile(r"^(?P<name>.+?) == (?P<value>-?[\d.e+-]+|-?inf|nan|True|False|'[^']*')$")
_SIZE_ONE = re.compile(r"^2 <= (?P<name>.+?)\.size\(\)\[(?P<i>\d+)\](?P<upper> <= \d+)?$")  # conv: <= 15
_STRIDE_IS_SIZE = re.compile(
    r"(?P<name>\S+)\.stride\(\)\[(?P<i>\d+)\] == (?:\d+\*)?(?P=name)\.size\(\)\[\d+\]"
    r"(?:\*(?:(?P=name)\.size\(\)\[\d+\]|\d+))*"  # 16*mems[0].size()[1]: a fixed size times a dynamic one
)
_BOUND = re.compile(r"\.size\(\)\[\d+\]|\.stride\(\)\[\d+\]|\bs\d+\b")
_DEALLOC = re.compile(r"invalidated because (?P<name>.+?) got deallocated")


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
        if code.startswith("(") and not place:  # no line of the user's: only a library's frame, bracketed
            code, place = "", code
        if not where and (m := _PLACE.search(place)):
            where = f"{m['file']}:{m['line']}"
        places = slocs(comment)
        if own_bound(comment):  # the first use Dynamo shows for its own 0/1 specialisation: no cause of the user's
            (code, where), places = places[0] if places else ("", ""), places[1:]
        out.append(Failure(graph, guard.strip(), code.strip(), where, tuple(places)))
    return out


_OFFSET_OF = re.compile(r"(?P<name>\S+)\.storage_offset\(\)")


def subject(f: Failure) -> str:
    """The input a tensor or value guard is about, as its words name it ('' for other guards)."""
    m = re.match(r"tensor '(?P<name>.+?)' ", f.guard) or _VALUE.match(f.guard) or _OFFSET_OF.search(f.guard)
    return local_name(m["name"]) if m else ""


def _user_line(stack: str) -> str:
    frames = [(f["file"], f["line"]) for f in _FILE.finditer(stack)]
    mine = [f for f in frames if package_of(f[0]) in (USER, "tpu_lab")] or frames
    return f"{mine[-1][0]}:{mine[-1][1]}" if mine else ""


def words(
    f: Failure,
    *,
    tpu: bool = False,
    static: bool = False,
    cache: str = "",
    pinned: frozenset[str] = frozenset(),
    caller: str = "",
    inputs: Mapping[str, str] | None = None,
    pipeline: bool = False,
    changes: frozenset[tuple[str, str, str]] = frozenset(),
) -> Cause:
    """One failed guard in words, with the fix for this backend (``cache``: the KV cache's class;
    ``pinned``: ``name/dim`` the user marked static with ``torch._dynamo.mark_static``; ``caller``: the
    library that called the compiled function (``pipeline``: from inside a transformers pipeline);
    ``inputs``: the new call's inputs, described by name; ``changes``: (name, was, now) of every size that
    changed in this compile)."""
    g, at = f.guard, f.where
    if (cause := member_words(g)) is not None:
        return cause
    if (m := TENSOR_MISMATCH.search(g)) and m["what"] == "size" and f"{local_name(m['name'])}/{m['i']}" in pinned:
        return Cause(
            "size",
            f"{local_name(m['name'])} dimension {m['i']} changed {m['a']} -> {m['b']} (marked with "
            "torch._dynamo.mark_static: every size is its own graph)",
            g,
            "expected under mark_static; drop it (or pad to a few sizes) where sizes vary",
        )
    if m:
        return (
            size_words(
                m, g, tpu, static, cache, caller, pipeline, ragged(local_name(m["name"]), inputs or {}, changes), inputs
            )
            if m["what"] == "size"
            else layout_words(
                local_name(m["name"]),
                f"stride {m['i']}: {m['a']} -> {m['b']}",
                g,
                described(m["name"], inputs or {}),
                is_parameter(m["name"], g),
            )
        )
    if m := _RANK.search(g):
        return Cause(
            "rank",
            f"{local_name(m['name'])} has {m['b']} dimension{'' if m['b'] == '1' else 's'}, was {m['a']}",
            g,
            rank_fix(local_name(m["name"]), is_parameter(m["name"], g)),
        )
    if m := _DTYPE.search(g):
        owned = is_parameter(m["name"], g) or "._buffers[" in m["name"]  # the model was cast, not an input
        return Cause(
            "dtype",
            f"{local_name(m['name'])} dtype changed {m['a']} -> {m['b']}",
            g,
            "expected once per dtype; cast the model (model.to(dtype)) before its first compiled call"
            if owned
            else "expected once per dtype; cast inputs to one dtype before the call",
        )
    if m := _GRAD.search(g):
        was, name = m["a"] == "1", local_name(m["name"])
        if is_parameter(m["name"], g):
            return Cause(
                "requires_grad",
                f"parameter {name} was {'frozen' if was else 'unfrozen'} (requires_grad {was} -> {not was})",
                g,
                "expected once per setting: each set of frozen parameters is a graph of its own (gradual "
                "unfreezing compiles one per stage, which is fine); else freeze or unfreeze before the first call",
            )
        return Cause(
            "requires_grad",
            f"{name}.requires_grad changed {was} -> {not was}",
            g,
            "expected once per setting: a pass that needs the input's own gradient (an adversarial attack, a "
            "saliency map) is a graph of its own, which is fine; where that is not meant, detach() inputs (or set "
            "requires_grad) the same way every call, but only where no gradient must flow back through them (an "
            "earlier layer's output needs its gradient: where a graph break compiles layers apart, remove the break)",
        )
    if m := _KEYS.search(g):
        return dispatch_words(local_name(m["name"]), m["a"], m["b"], g)
    if m := _DEVICE.search(g):
        return Cause(
            "device",
            f"{local_name(m['name'])} moved device: {m['a']} -> {m['b']}",
            g,
            "expected once per device; move inputs to one device before the call",
        )
    if (m := _TYPE.search(g)) and m["cls"] == "NoneType":
        return Cause(
            "none",
            f"{local_name(m['name'])} is now None, was a tensor (each case is its own graph)",
            g,
            none_words(m["name"], False, g, inputs or {}, caller).fix,
        )
    if m:
        return tensor_type_words(local_name(m["name"]), m["cls"], m["want"], g)
    if m := _DEALLOC.search(g):
        return Cause(
            "deallocated",
            f"{local_name(m['name'])} was freed and a new object made (a graph is tied to the "
            "object it was compiled for: an optimizer or module recreated per step)",
            g,
            "create the object once and reuse it",
        )
    if "GLOBAL_STATE" in g:
        return state_words(g)
    if "___check_torch_function_mode_stack" in g:
        return Cause(
            "global_state",
            "the default device or a torch function mode changed (torch.set_default_device, a "
            "TorchFunctionMode or a device context manager was entered or left)",
            g,
            "expected once per mode; keep every compiled call under the same one (a `with torch.device('meta')` "
            "dry run is a mode of its own: run it uncompiled, it needs no graph)",
        )
    if (cause := hook_words(g)) is not None or (cause := attribute_words(g, set_by(f)[0])) is not None:
        return cause
    if ".training" in g:
        name = local_name(g.split(".training")[0].split("(")[-1])
        first, known = re.split(r"[.\[]", name)[0], inputs or {}
        root = known.get(first, "" if any(k.startswith(f"{first}.") for k in known) else None)
        held = re.search(r"(?:\._modules\['[^']+'\]|^fn|L\['self'\])$", g.split(".training")[0].split("(")[-1])
        if root is not None and not held and not re.search(r"\((?:train|eval)\)", root):  # a plain object's field
            return Cause(
                "flag",
                f"the flag {name}.training was {g.rsplit(' ', 1)[-1]} (each value is its own graph)",
                g,
                "expected once per value; pass a constant if it should not change",
                flag=(f"{name}.training", g.rsplit(" ", 1)[-1]),
            )
        return Cause(
            "training",
            f"train/eval switched: {name}.training was {g.rsplit(' ', 1)[-1]}",
            g,
            "expected once per mode (one train graph, one eval graph)",
        )
    if "BACKEND_MATCH" in g:
        return backend_words(g)
    if m := _DUPLICATE.search(g):
        names = " and ".join(local_name(n) for n in re.findall(r'"([^"]+)"', m["names"])) or "two inputs"
        return Cause(
            "aliasing",
            f"{names} are now the same tensor (or no longer are)",
            g,
            "pass distinct tensors (or the same one) consistently",
        )
    if (cause := alias_words(g, inputs or {})) is not None:
        return cause
    if m := _NONE.match(g):
        return none_words(m["name"], m["not"] is None, g, inputs or {}, caller)
    if (cause := container_words(f, caller=caller, inputs=inputs, pipeline=pipeline)) is not None:
        return cause
    m = _SIZE_ONE.match(g)  # Dynamo's own 0/1 specialisation, not a branch of the user's code
    now = _size_now((inputs or {}).get(local_name(m["name"]), ""), int(m["i"])) if m else ""
    if m and (now or not m["upper"]):  # below the range's 2, not past a library's upper bound
        name = local_name(m["name"])
        return Cause(
            "size_one",
            f"{name} dimension {m['i']} is now {now or '0 or 1'} (the graph held is dynamic there, for sizes 2 and "
            "up): Dynamo compiles sizes 0 and 1 as graphs of their own",
            g,
            f"expected once: leave it, or keep that size above 1; torch._dynamo.decorators.mark_unbacked({name}, {m['i']}) "
            f"before the first call shares one graph only where no code compares that size to a number or another size",
        )
    if m := _STRIDE_IS_SIZE.fullmatch(g.strip()):  # a dynamic graph's layout, seen through its symbolic strides
        name = local_name(m["name"])
        detail = f"the graph assumed stride {m['i']} equal to {'a size' if '*' not in g else 'a product of sizes'}"
        shown = (inputs or {}).get(name)
        return strides_of_sizes(name, int(m["i"]), g, shown) or layout_words(name, detail, g, shown, False)
    if (cause := offset_words(g) or size_left_words(g, at)) is not None:  # a pad's length at 0 or 1
        return cause
    kept = as_range(g, ()) if _BOUND.search(g) else ""  # what a condition on one size keeps of it
    if _BOUND.search(g) and " % " not in kept and (cause := size_value_words(g, set_by(f)[0], at, f.code)):
        return cause  # a number computed from a size, held to one value: each value is a graph (not odd sizes)
    if not set_by(f)[1] and (cause := numpy_relation_words(g, set_by(f)[0], f.code, at)):
        return cause  # np.abs(h - w) holds h - w to one value
    if _BOUND.search(g) and re.search(r"[<>]=?|[!=]=", g):
        line, library = set_by(f)
        said = kept or bare(local_name(g))
        crossed = "no longer meets a condition" if re.search(r"%|!=", said) else "crossed a bound"  # odd, now even
        if len(said) > 48:  # sympy's expansion of the code's size arithmetic: which sizes, not the expression
            said = f"a condition on {sizes_read(said)} too long to quote here: it is in full in Dynamo's guard"
        return Cause(
            "specialised",
            f"a size {crossed} the graph assumed ({said})" + (f", set{line}" if line else ""),
            g,
            batch_side_fix(g, inputs or {})
            if library and set(re.findall(r"\.size\(\)\[(\d+)\]", g)) == {"0"}  # only the batch dimension
            else "expected once per side of that bound; to stay on one side, pad that dimension to one side of it"
            if library
            else "expected once per side of that branch; if sizes cross it often, pad them to one side "
            "or express the branch with torch.cond"
            if re.match(r"\s*(?:if|elif|while|assert)\b|.* if .* else ", f.code or "") or not f.code
            else "expected once per side: your line needs these sizes so (an op on both: a broadcast, a view); pad "
            "them to keep one side (a short last segment to the full length)",
            at,
        )
    if (numbers := numbers_compared(g, inputs or {})) and not _VALUE.match(g):
        line, library = set_by(f)
        branch = re.match(r"\s*(?:if|elif|while|assert)\b|.* if .* else ", f.code or "") is not None
        return number_condition_words(g, numbers, line, library or ("" if branch or not f.code else "torch"), at)
    if (cause := object_words(g, at, inputs)) is not None:
        return cause
    if (m := _VALUE.match(g)) and (cause := derived_words(m["name"], m["value"], f)) is not None:
        return cause  # a value computed from the user's numbers: named by them and its line
    if m and (count := loop_count_words(local_name(m["name"]), m["value"], f.code, f.where, g)):
        return count  # a number a loop runs over: Dynamo unrolls the loop, each count its own graph
    if m:
        now = (inputs or {}).get(n := local_name(m["name"]), "")  # shown by its items now: a sequence
        now = now or ("sequence" if any(k.startswith(f"{n}[") for k in inputs or {}) else "")
        now = "" if re.match(r"\s*(?:el)?if\b|\s*while\b", f.code or "") and other_number(m["value"], now) else now
        return value_words(m["name"], m["value"], g, tpu or static, now, caller)
    return tuple_words(g) or Cause("verbatim", f"Dynamo's guard, not translated: {local_name(g)}", g, VERBATIM_FIX)


def _size_now(description: str, dim: int) -> str:
    """Dimension ``dim`` of a tensor's description (``f32[1, 16]``) where it is 0 or 1, else ''."""
    sizes = m[1].split(", ") if (m := re.match(r"\w+\[([\d, ]*)\]", description)) else []
    return sizes[dim] if dim < len(sizes) and sizes[dim] in ("0", "1") else ""
