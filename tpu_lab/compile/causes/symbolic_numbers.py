"""A number read from tensor data (``.item()``, ``.tolist()``, a data-dependent size) that Dynamo traces as
a symbol (under fullgraph or capture_scalar_outputs) used where a real one is needed: a NumPy call that
must build an array of it, or a branch that must pick a side. Dynamo's text for it is a sympy dump
(``2*TruncToInt(zuf0 + 1.5) > 10``); these are its words and fix. Text in, words out; the fix also reads
whether a capture setting is on now (it is what turned a graph break into this error). Also a value a
graph cannot hold at all: a plain number a function of dynamic numbers returns (``math.gcd``), a TorchScript
object passed to an op (the packed weights of torch.ao's quantized modules)."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.branch_origin import enclosing_loop
from tpu_lab.compile.causes.numpy_values import CALLS_NUMPY, NUMPY_ON_NUMBERS, NUMPY_ON_NUMBERS_FIX

_GUARD = "Could not guard on data-dependent expression"
_EXTRACT = "Could not extract specialized integer from data-dependent expression"  # needed as an int
_LOOP = re.compile(r"^for\b.+?\bin\s+([\w.]+)\s*:")
_CALLED = re.compile(r"call_function <(?:Wrapped function <original (\w+)>|[^>]*?(\w+)[^>]*)>")
_BRANCH = re.compile(r"^(?:if|elif|while|assert)\b|\bif\b.+\belse\b")


def symbolic_number(words: str, code: str) -> tuple[str, list[str]] | None:
    """(words, [fix]) for Dynamo's text ``words`` where it needed the value of a symbolic number at the
    user's line ``code``; None for any other text."""
    if _GUARD not in words and _EXTRACT not in words:
        return None
    if _EXTRACT in words and (loop := _LOOP.match(code.strip())):  # a tensor walked whose length depends on data
        said = (
            f"this loop walks {loop[1]}, whose length depends on tensor data (an op such as unique or nonzero made "
            "it): while tracing, Dynamo knows that length only as a symbol, so it cannot unroll the loop"
        )
        fix = (
            "compute the count in Python from what you know (shapes or lengths, as Python ints) before the loop, "
            "or move the loop out of the compiled function"
        )
        return said, [fix + _captured_here()]
    if "FX node with fake tensors" in words:  # an op run on it (np.percentile): the op is named
        shown, name = _called(words, code)
        into = "turn them into a NumPy array" if "to ndarray" in words else "compute with them"
        said = (
            f"{shown} needs real numbers, but it gets values read from tensor data (.item(), .tolist()): while "
            f"tracing, Dynamo knows those only as symbols, so it cannot {into}"
        )
        return said, [_op_fix(shown, name) + _captured_here()]
    branch = bool(_BRANCH.search(code.strip()))
    what, decide = ("this branch", "which way it goes") if branch else ("this line", "the value it needs")
    said = (
        f"{what} depends on a number read from tensor data (.item(), .tolist(), a data-dependent size): while "
        f"tracing, Dynamo knows it only as a symbol, so it cannot decide {decide}"
    )
    fix = (
        "compute that number outside the compiled function and pass it in (a graph per value), or keep the "
        "work in tensors (masks, torch.where); torch._check(...) helps only where you can state the outcome ahead"
    )
    return said, [fix + _captured_here()]


def _captured_here() -> str:
    """Where a capture setting is on (under fullgraph too), that it is what made this an error, not a break."""
    import torch._dynamo.config as config

    on = [n for n in ("capture_dynamic_output_shape_ops", "capture_scalar_outputs") if getattr(config, n, False)]
    said = " and ".join(f"torch._dynamo.config.{n} = True" for n in on)
    return (
        f"; {said} (set in this process) {'are' if len(on) > 1 else 'is'} what traces that value as a symbol: "
        f"without {'them' if len(on) > 1 else 'it'} Dynamo breaks the graph there and runs that part eagerly, "
        "with no error"
        if on
        else ""
    )


def _called(words: str, code: str) -> tuple[str, str]:
    """(the function an FX node failed in, as the user's line writes it (``np.percentile``); its bare name)."""
    m = _CALLED.search(words)
    name = (m[1] or m[2]) if m else ""
    written = re.search(rf"\b((?:\w+\.)*{re.escape(name)})\(", code) if name else None
    return (written[1] if written else name or "this call"), name


def torch_function(name: str) -> str:
    """``torch.<name>`` where torch has a function of that name (``unique``), else ''."""
    import torch

    return f"torch.{name}" if name and callable(getattr(torch, name, None)) else ""


def _op_fix(shown: str, name: str) -> str:
    torch_own = {"percentile": "torch.quantile"}.get(name, "")  # NumPy's name for torch's op
    torch_own = torch_own or ("" if shown.startswith("torch.") else torch_function(name))
    own = f" ({torch_own})" if torch_own else ""
    return (
        f"keep the values as tensors and use torch's own op{own} inside the compiled function, or call {shown} "
        "outside it and pass the result in"
    )


_RANGE = re.compile(r"^for\b.+?\bin\s+range\(")
_SUBSCRIPT = re.compile(r"[\w)\]]\s*\[[^\]]*[A-Za-z_]")  # x[start:end], self.experts[e]
_SIZED_BY = re.compile(r"\b(torch\.(?:arange|zeros|ones|empty|full|rand|randn|linspace))\((?![\d\s.,-]*\))")
_EXPLICIT = re.compile(r"\.(?:item|tolist)\(")  # reads the value itself: logging, bookkeeping


def python_int_fix(code: str, file: str = "", line: int = 0) -> str:
    """The fix where a tensor stands where Python needs an int on the user's line, so Dynamo reads it back
    (``.item()``) and breaks the graph: a ``range()`` count in a loop header, an index or slice bound of a
    list; '' for any other line (or one that reads the value itself)."""
    if re.match(r"while\b(?!.*\b(?:range|len)\()", enclosing_loop(file, line)[1]):  # greedy NMS's while over data
        return ""  # the loop itself follows the data: control flow, the fix of its own (CONTROL_FIX)
    if _RANGE.match(code.strip()):
        return (
            "range() needs a Python int: pass the count as an int, not a tensor (Dynamo unrolls the loop, so each "
            "count is a graph of its own: keep to a few counts, or run the largest and mask the extra steps)"
        )
    if (made := _SIZED_BY.search(code)) and not (_SUBSCRIPT.search(code) or _EXPLICIT.search(code)):  # a size
        return (
            f"{made[1]}'s size is set by a tensor's value here, so Dynamo reads it back: compute the bounds as Python "
            "ints outside the compiled function and pass them in (Dynamo makes an int argument dynamic), or build "
            "at a fixed size and mask (torch.arange(n) with n from a shape); capture_scalar_outputs would make it a "
            "size known only at run time, which the code after it may not accept (the compile then raises)"
        )
    if (_SUBSCRIPT.search(code) or "slice(" in code) and not _EXPLICIT.search(code):
        return (
            "an element of a tensor is used here where Python needs an int (an index, a slice bound of a list, an "
            "op's int argument), so it is read back with .item(): index with the tensor itself (x[:, idx], "
            "torch.gather, torch.index_select), or compute the int in Python (from shapes or lengths)"
        )
    return ""


_NON_TENSOR = re.compile(r"target: <built-in function (\w+)>")  # gb0208's debug context: math.gcd, math.factorial


def python_result(reason: str, code: str) -> tuple[str, list[str]] | None:
    """(words, [fix]) where Dynamo met a Python function of numbers it had made dynamic (``math.gcd`` of an int
    argument after it changed): the function returns a plain number, which a graph cannot hold; None else."""
    if re.search(  # str(n) of a SymInt: torch 2.14 on, then torch 2.13's words
        r"The type (?:int|float|bool) has a tp_(?:repr|str) C slot|builtin operator `(?:str|repr)` with argument "
        r"types \['(?:int|float)'\]",
        reason,
    ):
        said = (
            "str() or repr() (an f-string too) of a number Dynamo made dynamic (a size or an int argument that "
            "changed): Dynamo cannot turn a number it traces as a symbol into text"
        )
        return said, [
            "key by the numbers themselves (a tuple, (h, w)) in place of their text, or build the text outside "
            "the compiled function and pass it in (each text passed in is still a graph of its own: where it picks "
            "a submodule, as a ModuleDict key does, compile the shared part and pick the head outside)"
        ]
    if "Missing `as_proxy()`" in reason and "ScriptObject" in reason:  # Dynamo's words for it are its internals'
        said = (
            "this call passes a TorchScript object (a ScriptObject, as the packed weights of torch.ao's quantized "
            "modules) to an op, which Dynamo cannot put in a graph"
        )
        return said, ["call it outside the compiled function, or accept the break"]
    target = _NON_TENSOR.search(reason) if "return a non-Tensor" in reason else None
    if "<original item>" in reason and CALLS_NUMPY.search(code):  # Informer's u = c * ln(L)
        return NUMPY_ON_NUMBERS, [NUMPY_ON_NUMBERS_FIX]
    if target is None:
        return None
    called = re.search(rf"(?<![\w.])((?:\w+\.)*{re.escape(target[1])})\(", code)
    name = called[1] if called else target[1]
    said = (
        f"{name} is called on numbers Dynamo made dynamic (an argument that changed between calls): it returns a "
        "plain Python number, which Dynamo cannot put in the graph"
    )
    fix = f"compute {name}(...) outside the compiled function and pass the result in, with what depends on it"
    return said, [fix]
