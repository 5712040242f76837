"""A compile's cause: words, Dynamo's guard behind them, the fix; and the short label per guard family."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tpu_lab.compile.sources.frames import CARRIED_VALUE

BAKED = "; its value is baked into the graph"  # how a changed number is said; later steps match on it


@dataclass(frozen=True)
class Cause:
    """Why a compile happened, in words, with Dynamo's guard behind them and the fix."""

    kind: str
    """The guard family: ``size``, ``dtype``, ``value``, ``lr``, ``grad_mode``, ``verbatim``, ..."""
    words: str
    guard: str = ""
    fix: str = ""
    where: str = ""
    flag: tuple[str, str] | None = None
    """For a flag that changed: its name and the value the earlier graph had (``("sync", "False")``)."""

    def __str__(self) -> str:
        return self.words


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
    also: tuple[tuple[str, str], ...] = ()
    """(code, file:line) of every place Dynamo names for it: both bounds' lines of a range (``2 <= t <= 11``)."""


CARRIED = CARRIED_VALUE  # a resumed frame's input (Dynamo's ``___stack0``): a value computed before the break


@functools.lru_cache(maxsize=8192)  # pure, and called per failed guard of every graph Dynamo held
def local_name(source: str) -> str:
    """Dynamo's name for an input (``L['x']``, ``G['m']._modules['1']``) as the user wrote it.
    ``fn`` is torch.compile's wrapper holding the compiled object (a module, a callable object, a
    functools.partial): its attributes read as ``self.weight``, a partial's bound keyword as ``k``."""
    s = _dict_sources(source.strip())
    s = re.sub(r"L\['([^']+)'\]", r"\1", s)
    s = re.sub(r"\b___from_numpy\(([^()]+)\)", r"\1", s)  # a NumPy array Dynamo reads as a tensor: by its name
    s = re.sub(r"\b___stack\d+\b", CARRIED, s)  # a resumed frame's input
    s = re.sub(r"G\['([^']+)'\]", r"\1", s)
    s = re.sub(r"(?<![\w.])__import_(\w+)", lambda m: m[1].replace("_dot_", "."), s)  # Dynamo's alias of a module
    s = re.sub(r"\.__dict__\['_(?:modules|parameters|buffers)'\]\['([^']+)'\]", r".\1", s)  # Dynamo reads them raw
    s = re.sub(r"\._modules\['(\d+)'\]", r"[\1]", s)  # a Sequential's or ModuleList's child
    s = re.sub(r"\._(?:modules|parameters|buffers)\['([^']+)'\]", r".\1", s)
    s = re.sub(r"\._orig_mod(?=[.\[])", "", s)  # a compiled module's own: model.block1 reads it through the wrapper
    s = re.sub(r"(?<![\w.])fn\.keywords\['([^']+)'\]", r"\1", s)  # anywhere: a guard's expression holds several
    s = re.sub(r"^(['\"]?)fn\.__self__(?=[.\[']|$)", r"\1self", s)  # torch.compile(obj.method): its instance
    return re.sub(r"^(['\"]?)fn(?=[.\[])", r"\1self", s)  # quoted too: a guard's "tensor 'fn.weight' ..."


def bare(expr: str) -> str:
    """``(((-1) + k + T) // k)`` -> ``(-1 + k + T) // k``: the parentheses a reader needs, not Dynamo's."""
    expr = re.sub(r"\((-?\d+)\)", r"\1", expr)
    while expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]):
        expr = expr[1:-1]
    return expr


def held_expr(expr: str) -> str:
    """A guard's expression as a cause quotes it: whole where short, else by the sizes it reads (Swin's padding
    arithmetic runs to thousands of characters; Dynamo's guard beside it keeps it whole)."""
    said = bare(local_name(expr))
    if len(said) <= 100:
        return said
    return f"an expression of {sizes_read(said)} too long to quote here"


def sizes_read(text: str) -> str:
    """The sizes an expression reads (``x.size()[0] and y.size()[1]``), a value carried over a break's whole
    (``the value carried over the graph break[2].size()[0]``, named by its line later), else "sizes"."""
    found = re.findall(rf"(?:{re.escape(CARRIED)})?[\w.\[\]']*\.size\(\)\[\d+\]", text)
    return " and ".join(sorted(set(found))) or "sizes"


_HINTED = re.compile(r"(?P<src>\S+\.__closure__\[\d+\]\.cell_contents) [^\n]*\(HINT: guard on \"(?P<name>\w+)\"\)")


def hinted_names(reasons: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Closure variables Dynamo names in a guard's hint (``args[4][16].__closure__[0].cell_contents == 16  # ...
    (HINT: guard on "window_size")``: a mask_mod's window inside flex_attention's arguments), as (the guard's
    name for it, the variable's name)."""
    return tuple(dict.fromkeys((local_name(m["src"]), m["name"]) for r in reasons for m in _HINTED.finditer(r)))


def call_arguments(text: str, start: int) -> str | None:
    """The text between a call's parentheses, from just after its ``(`` at ``start``; None where the call does
    not close on ``text`` (a call continued on the next line)."""
    depth = 1
    for i in range(start, len(text)):
        depth += (text[i] == "(") - (text[i] == ")")
        if depth == 0:
            return text[start:i]
    return None


def split_top(text: str) -> list[str]:
    """``text`` split at each ", " outside brackets and quotes: a list of names, one of which may be a call
    (``self.out_att(x, adj) dim 0, h dim 1``: two) or a key (``batch['a, b'] dim 0``: one)."""
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(text):
        if quote or (ch in "'\"" and text[i - 1 : i] in ("[", "(")):  # a quoted key's brackets and commas are its own
            quote = "" if ch == quote else quote or ch
            continue
        depth += (ch in "([{") - (ch in ")]}")
        if depth == 0 and text.startswith(", ", i):
            parts.append(text[start:i])
            start = i + 2
    return [*parts, text[start:]] if text else []


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


_DICT_ITEM = re.compile(r"dict\.__getitem__\((?P<d>[^,]+?), list\(dict\.keys\((?P=d)\)\)\[(?P<i>\d+)\]\)")
_DICT_GET = re.compile(r"dict\.__getitem__\((?P<d>[^,]+?), (?P<k>'[^']*'|\d+)\)")
_DICT_KEY = re.compile(r"list\(dict\.keys\((?P<d>[^()]+?)\)\)\[(?P<i>\d+)\]")
_LIST_GET = re.compile(r"(?:list|tuple)\.__getitem__\((?P<d>[^,()]+), (?P<i>\d+)\)")  # a list's item, by index
_DICT_AT = re.compile(r"(?<![\w.\]'])(?P<d>[\w.\[\]']+?)\[list\(dict\.keys\((?P=d)\)\)\[(?P<i>\d+)\]\]")


def _dict_sources(s: str) -> str:
    """Dynamo's source forms for a dict's entries as Python reads them: ``dict.__getitem__(d, list(dict.keys(d))[0])``
    -> ``list(d.values())[0]``, ``dict.__getitem__(d, 'k')`` -> ``d['k']``, ``list(dict.keys(d))[0]`` -> ``list(d)[0]``."""
    s = _DICT_ITEM.sub(r"list(\g<d>.values())[\g<i>]", s)
    s = _DICT_AT.sub(r"list(\g<d>.values())[\g<i>]", s)  # d[list(dict.keys(d))[0]]: an optimizer's state
    s = _DICT_GET.sub(r"\g<d>[\g<k>]", s)
    s = _LIST_GET.sub(r"\g<d>[\g<i>]", s)
    return _DICT_KEY.sub(r"list(\g<d>)[\g<i>]", s)


_TYPE_CHECK = re.compile(r"___check_type_id\((?P<name>[^,()]+), \d+\)(?:, type=<class '(?P<cls>[\w.]+)'>)?")
_SAME_OBJECT = re.compile(r"___check_obj_id\((?P<name>[^,()]+), \d+\)(?:, type=<class '(?P<cls>[\w.]+)'>)?")


_CONTAINS = re.compile(r"(?P<not>not )?___dict_contains\((?P<key>'[^']*'|\([^()]*\)|[\w.]+), (?P<dict>[^()]+)\)")


def readable_guard(guard: str, names: tuple[tuple[str, str], ...] = ()) -> str:
    """Dynamo's guard text as the user's code names things (what it checks is unchanged): inputs by their
    names (``args[0]`` -> ``pixel_values``, ``L['x']`` -> ``x``), a module's children as attributes, a
    type check as ``type(x) is float``, an identity check as ``x is the same object``. Guards merged into one
    text (one per line) are each read so."""
    if "\n" in guard:
        return "\n".join(readable_guard(line, names) for line in guard.splitlines())
    g = _TYPE_CHECK.sub(
        lambda m: f"type({m['name']}) is {m['cls'].rsplit('.', 1)[-1]}" if m["cls"] else f"type({m['name']}) unchanged",
        guard,
    )
    g = _SAME_OBJECT.sub(
        lambda m: f"{m['name']} is the same object" + (f" (a {m['cls'].rsplit('.', 1)[-1]})" if m["cls"] else ""), g
    )
    g = _dict_sources(g)  # before the split below: Dynamo's dict forms hold spaces
    internal = ("L[", "G[", "___stack", "___from_numpy", "._modules[", "._parameters[", "._buffers[")
    g = " ".join(local_name(part) if any(i in part for i in internal) else part for part in g.split(" "))
    for raw, user in names:
        g = re.sub(re.escape(raw) + r"(?![\w(])", user, g)
    g = re.sub(r"\bkwargs\['(\w+)'\]", r"\1", g)  # a keyword passed through **kwargs: the user's own keyword
    g = _CONTAINS.sub(lambda m: f"{m['key']} {'not in' if m['not'] else 'in'} {m['dict']}", g)  # Dynamo's helper
    # Dynamo's hint to make parameters dynamic follows any failed guard on one; it is about sizes only
    g = re.sub(r"(mismatch\. expected (?!size)[^\n]*?)\. Guard failed on a parameter, consider using [^\n]*", r"\1", g)
    return g.replace("GLOBAL_STATE changed", "global state changed")


VERBATIM_FIX = (
    "no advice for a guard shown as Dynamo wrote it: it names what changed; TORCH_LOGS=recompiles_verbose prints "
    "every guard that failed"
)

KIND_LABELS = {
    "size": "a tensor size changed",
    "stride": "a tensor's memory layout changed",
    "offset": "a tensor's storage offset changed (a view vs a tensor of its own)",
    "view_base": "an input's base changed (the tensor a view input was taken from: none now, or of fewer dimensions)",
    "rank": "a tensor's number of dimensions changed",
    "rewritten": "a tensor the module's own forward rewrites changed",
    "dtype": "a dtype changed",
    "device": "a device changed",
    "requires_grad": "requires_grad changed",
    "tensor_type": "another kind of value where a tensor was compiled for (nn.Parameter, a subclass, a plain tensor, a Python number)",
    "size_one": "a size of 0 or 1 (Dynamo compiles those on their own)",
    "length": "a container's length changed (a list, tuple or dict)",
    "kwargs": "keyword arguments added or dropped",
    "dict_keys": "dict keys changed",
    "value": "a Python value baked into the graph changed",
    "value_dynamic": "a Python number changed, then made dynamic",
    "members": "the values a list holds changed (your code tests membership in it)",
    "set_items": "a Python set's items changed (baked into the graph)",
    "torch_function": "another op through a tensor subclass's __torch_function__ (compiled on its own)",
    "derived": "a value computed from Python numbers changed (baked into the graph)",
    "loop_position": "a loop resumed at another position after a graph break inside it",
    "flag": "a Python flag changed",
    "string": "a Python string changed",
    "global": "a global baked into the graph changed",
    "lr": "the optimizer's learning rate changed",
    "optimizer_step": "the optimizer's step count changed (a Python int)",
    "deallocated": "an object was freed and recreated",
    "identity": "a different object",
    "global_state": "global state changed",
    "training": "train/eval switched",
    "hooks": "hooks added or removed",
    "parameters": "a module's parameters were added or removed",
    "attribute": "an object gained or lost an attribute (hasattr)",
    "specialised": "a size crossed a bound the graph assumed",
    "size_value": "a number computed from a size changed",
    "number_branch": "a Python number crossed a condition the graph assumed",
    "loop_count": "a Python int a loop runs over changed (the loop is unrolled)",
    "cache_length": "the KV cache length changed",
    "none": "None vs a value",
    "aliasing": "inputs aliasing changed",
    "enum": "an enum value changed",
    "type": "a value's type changed",
    "shared_wrapper": "another callable through torch.compile's shared wrapper",
    "inference": "inference tensor vs normal tensor",
    "dispatch": "a tensor's dispatch keys changed",
    "parameter_shape": "a parameter's shape changed",
    "cache_state": "the KV cache went from empty to filled",
    "optimizer_state": "the optimizer's state was created",
}
"""A short label per guard family, for the summary under a table."""


LOOP_RANGE = re.compile(r"^\s*for\b.+?\bin\s+range\((?P<args>.*)\)\s*:")  # a loop's count, in range()
LOOP_COUNT_FIX = (  # a number a loop runs over (for _ in range(n)): Dynamo unrolls the loop, a graph per count
    "keep {0} to a few values (or run the largest count and mask the extra steps), or compile only the loop's body "
    "(one step's or one node's work) and keep the loop in Python, so one graph serves every count; a tensor in its "
    "place would break the graph at range()"
)
SPARSE_FIX = (
    "keep the sparse op out of the compiled function: compile the dense layers around it and call it between "
    "them, or pass the matrix dense (.to_dense()) or as an edge list (index_add_, scatter_add)"
)


_FALLBACK = "none needed for the break itself: Dynamo runs that part eagerly between two graphs and goes on"


def without_fullgraph_hint(fix: str) -> str:
    """``fix`` without Dynamo's hint to set ``fullgraph=False``, for code that ran with it off already."""
    return "; ".join(h for h in fix.split("; ") if "fullgraph=False" not in h)


def as_logged(cause: Cause) -> Cause:
    """A graph break Dynamo logged and went on past, so fullgraph is off already: its hint to set
    ``fullgraph=False`` (a backend's fallback) is no fix."""
    if "fullgraph=False" not in cause.fix:
        return cause
    return dataclasses.replace(cause, fix=without_fullgraph_hint(cause.fix) or _FALLBACK)


def shown_as_module(description: str) -> bool:
    """Whether an input's description is a module's (``MLP (train)``, ``Sparsemax (eval)``)."""
    return re.search(r" \((?:train|eval)\)$", description) is not None


SKIPPED_LATER = (  # AWD-LSTM's LockedDropout: eval returns x as it is, and training runs eagerly from then on
    "{0} compiled graphs before, on inputs where it does tensor work; on these (eval mode, a flag, an empty "
    "input) it does none, and Dynamo now skips its code for every later call, those with tensor work included: "
    "call it on such inputs uncompiled (evaluate with the uncompiled model), or run torch._dynamo.reset() after "
    "them, so {0} compiles again"
)
"""The fix where Dynamo skipped a function that compiled graphs before: on these inputs it had no tensor work."""
