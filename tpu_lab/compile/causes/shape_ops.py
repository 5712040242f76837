"""A graph break at an operator whose output's shape depends on the tensor's data (``torch.unique``,
``nonzero``, indexing by a mask): named by the torch function the user called, with a fix that holds.
Dynamo's own hint (``capture_dynamic_output_shape_ops = True``) traces the operator, but a compile whose
code then needs the result's size as a Python number (``.tolist()``, ``len()``, a loop over it) raises
``GuardOnDataDependentSymNode`` in place of the break: the hint comes with that warning, and not at all
where the break's own line reads the result back. Text in, a Cause out."""

from __future__ import annotations

import dataclasses
import linecache
import re

from tpu_lab.compile.causes.cause import Cause, call_arguments
from tpu_lab.compile.causes.symbolic_numbers import torch_function
from tpu_lab.compile.sources.dynamo_catalog import shape_op_captured

SHAPED = re.compile(r"Operator `([\w.]+)`'s output shape depends on input Tensor data")
_READ_BACK = re.compile(r"\.(?:tolist|item)\(|^\s*(?:for\b|if\b|elif\b|while\b)")  # len(a list) is no read
CAPTURE = "torch._dynamo.config.capture_dynamic_output_shape_ops = True"
_FIXED_FORM = {  # each data-dependent operator's fixed-size stand-in
    "bincount": "F.one_hot(x, num_classes).sum(0) in place of bincount, whose length follows the largest value",
    "unique": "torch.bincount(x, minlength=n) > 0, or a one-hot sum, in place of unique",
    "nonzero": "a mask and torch.where in place of nonzero or indexing by a mask",
    "repeat_interleave": "its own output_size= argument, the total where a size you hold gives it (x.size(0))",
}


def fixed_size(name: str, library: str = "") -> str:
    """How to do ``name``'s work outside the compiled function or at a fixed size; where it runs inside a
    library's code (``library``: its file:line), the call on the user's line is what to move."""
    outside = "outside the compiled function (return what it takes, use the result after)"
    if library:  # the stand-in would be an edit of the library's code: nothing the user holds
        return f"{name} runs inside {library}: make your line's call {outside}"
    form = _FIXED_FORM.get(name, "a mask and torch.where in place of indexing by a mask")
    return f"compute it {outside}, or at a fixed size ({form})"


def _later_check(code: str, at: tuple[str, int], ranged: bool = False, read: bool = False) -> tuple[int, str]:
    """The first later line of the same function (``at``: the break's file and line, ``code`` that line)
    that branches on the size of what the line assigns (``if top_x.shape[0] == 0:``), or (``ranged``) that
    walks a range over it (``tc[range(t.shape[0]), c]``), or (``read``) reads its values back as a list
    (A2C's ``(has_zeros + 1).numpy().tolist()``: a .tolist() of it raises under the capture setting, where
    .item() only breaks the graph), else (0, "")."""
    target = re.match(r"^\s*([\w\s,()]+?)\s*=(?!=)", code)
    names = sorted(set(re.findall(r"\w+", target[1]))) if target else []
    file, line = at
    if not names or not file:
        return 0, ""
    item = r"(?:\[[^\]]*\])?"  # or one item of it: len(indexes_list[i]) after a list of nonzero results
    size = "|".join(rf"\b{re.escape(n)}{item}\.(?:shape\b|size\(|numel\()|\blen\({re.escape(n)}{item}\)" for n in names)
    indent = len(code) - len(code.lstrip())
    for n in range(line + 1, line + 40):
        text = linecache.getline(file, n)
        if text.strip() and len(text) - len(text.lstrip()) < indent and not text.lstrip().startswith(("#", ")")):
            break  # the block that assigned them has ended (a loop's body; the function)
        if ranged and re.search(rf"\brange\(\s*(?:{size})", text):
            return n, text.strip()
        said = text.split("#", 1)[0]  # code, not a comment
        if read and re.search(rf"\b(?:{'|'.join(map(re.escape, names))})\b[^=]*?\.tolist\(", said):
            return n, text.strip()
        if not ranged and not read and re.match(r"\s*(?:if|elif|while)\b", text) and re.search(size, text):
            return n, text.strip()
    return 0, ""


_EMPTY = re.compile(  # a check for an empty result: a size against 0 (or 1), or its truth
    r"[=!<>]=?\s*[01]\b(?!\.)|\b0\s*[=!<>]|^(?:el)?if\s+(?:not\s+)?(?:len\()?[\w.\[\]]+(?:\.numel\(\)|\))?\s*:"
)


def shape_op_said(cause: Cause, code: str, at: tuple[str, int] = ("", 0), library: str = "") -> Cause:
    """``cause`` (a break's, from Dynamo's text) with a data-dependent-shape operator named and fixed;
    ``code``: the user's line it broke at, ``at``: its file and line, ``library``: file:line of the library
    code it broke in, if any. Any other cause comes back as it is."""
    shaped = SHAPED.search(cause.words)
    if not shaped:
        return _valued_op_said(cause)
    name = re.sub(r"\d+$", "", shaped[1].removeprefix("aten.").split(".")[0].lstrip("_"))  # _unique2: unique
    if shape_op_captured(shaped[1]) is False:  # Dynamo's hint would only change the break's words
        fix = (
            f"call {name} outside the compiled function (return what it takes, compute it after): Dynamo cannot "
            "capture it even with capture_dynamic_output_shape_ops (torch has no fake-tensor rule for its "
            "data-dependent shape); else accept the break"
        )
    elif _READ_BACK.search(code):  # the line itself needs the size as a Python number: the hint only crashes
        fix = (
            f"{fixed_size(name, library)}; this line reads the result back into Python (.tolist(), len(), a loop or branch on "
            f"it), which {CAPTURE} turns from this break into an error (GuardOnDataDependentSymNode)"
        )
    elif (read := _later_check(code, at, read=True))[0]:  # its values read back later: the hint only crashes
        fix = (
            f"{fixed_size(name, library)}; leave capture_dynamic_output_shape_ops off here: line {read[0]} "
            f"({read[1]}) reads the result's values back into Python, which {CAPTURE} turns from this break into "
            "an error (GuardOnDataDependentSymNode)"
        )
    elif (ranged := _later_check(code, at, ranged=True))[0]:  # range() of a traced size: the compile fails
        fix = (
            f"{fixed_size(name, library)}; leave capture_dynamic_output_shape_ops off here: line {ranged[0]} "
            f"({ranged[1]}) takes its size as a Python int in range(), where the setting gains nothing: the graph "
            "breaks there again, or (torch 2.15) the compile fails and the call raises; torch.arange in place of "
            "range there also stops each new size compiling a graph of its own"
        )
    elif (checked := _later_check(code, at))[0] and not _EMPTY.search(checked[1]):  # a rule on the size (OHEM's n_min)
        fix = (
            f"{fixed_size(name, library)}; or set {CAPTURE} before the first call, which traces it, and write the check "
            f"at line {checked[0]} ({checked[1]}) without a Python branch (its rule on the size as tensors: "
            "torch.maximum, torch.where, a mask over sorted values): kept as a branch on that size, it stops the "
            "trace again there (data-dependent branching)"
        )
    elif (checked := _later_check(code, at))[0]:  # the hint traces the op, then that branch stops the trace
        fix = (
            f"{fixed_size(name, library)}; or set {CAPTURE} before the first call and remove the check at line {checked[0]} "
            f"({checked[1]}) where the code after it handles an empty result anyway: a branch on that size "
            "stops the trace again (data-dependent branching), so with the check the setting gains nothing"
        )
    else:
        fix = (
            f"{fixed_size(name, library)}; or set {CAPTURE} before the first call, which traces it, but only where no code after "
            "it in the compiled function needs its size as a Python number (.tolist(), len(), a loop over it, an if "
            "on its shape): there the graph breaks again, or the compile raises GuardOnDataDependentSymNode; an op "
            "it feeds that has no kernel for a size known only at run time (F.ctc_loss, say) breaks the graph there "
            "in its place"
        )
    words = cause.words
    public = torch_function(name)  # the torch function an ATen op serves: aten._unique2 is torch.unique
    one_arg_where = re.search(r"\bwhere\((?:[^(),]|\([^()]*\))+\)", code)  # torch.where(cond): nonzero itself
    if name == "nonzero" and one_arg_where and "nonzero" not in code:
        public = "torch.where with one argument (the indices where it holds, as torch.nonzero)"
        words = words.replace(shaped[0], f"{public} ({shaped[1]}): its output's shape depends on the tensor's data")
        fix = fix.replace(
            "a mask and torch.where in place of nonzero or indexing by a mask",
            "the three-argument torch.where(cond, x, y), or the mask itself, in place of the one-argument form",
        )
    elif name == "nonzero" and "nonzero" not in code and "where(" not in code and re.search(r"\w\[[^\]]", code):
        public = "indexing by a boolean mask (x[mask])"  # the line indexes by a mask: torch runs nonzero for it
        words = words.replace(shaped[0], f"{public} ({shaped[1]}): its output's shape depends on the mask's data")
    elif public:
        words = words.replace(shaped[0], f"`{public}` ({shaped[1]}): its output's shape depends on the tensor's data")
    return dataclasses.replace(cause, words=words, fix=fix)


_VALUED = re.compile(
    r"Operator `aten\.(?!_local_scalar_dense)(\w+)[\w.]*` has a non-Tensor output whose value is dependent"
)
_TENSOR_FORM = {"equal": "(a == b).all()", "allclose": "torch.isclose(a, b).all()", "is_nonzero": "x != 0"}


def _valued_op_said(cause: Cause) -> Cause:
    """A break at an operator that returns a Python value computed from the tensors' data (``torch.equal``:
    a bool): the tensor form of the same test, kept a tensor; never Dynamo's hint to wrap it in a custom op,
    whose Python value a graph cannot hold either (blind round 81 measured it). Any other cause as it is."""
    if not (m := _VALUED.search(cause.words)):
        return cause
    public = torch_function(m[1]) or f"torch.{m[1]}"
    words = cause.words.replace(m[0].split(" has ")[0], f"`{public}` ({m[0].split('`')[1]})", 1)
    form = _TENSOR_FORM.get(m[1], "its tensor form")
    fix = (
        f"test with tensor ops that return a tensor ({form} in place of {public}) and keep the result a tensor: "
        "select with torch.where, or branch with torch.cond, where the code branches on it"
    )
    return dataclasses.replace(cause, words=words, fix=fix)


_SIZING = re.compile(r"\.(?:reshape|view|expand|new_zeros|unfold)\(|\btorch\.(?:zeros|ones|empty|full|arange)\(")


SIZES_FIX = (  # a value read back sets a tensor's size (there, or later): sizes are Python ints in a graph
    "the value also sets a tensor's size ({0}), and a graph's sizes are Python ints, so no mask, torch.where or "
    "torch.cond holds it: compute it outside the compiled function as Python ints (.tolist()) and compile only the "
    "work per size (each value a graph of its own), or leave this part uncompiled"
)


_READ_IN_SIZES = re.compile(r"\.item\(\)|\.tolist\(\)|\bint\(|\bfor\b.+\bin\b")


def sized_here(code: str) -> bool:
    """Whether the user's line ``code`` itself sets sizes from what it reads (Deformable DETR's
    ``value.split([H_ * W_ for H_, W_ in value_spatial_shapes])``, ``x.view(n.item(), -1)``): a value read back
    among the sizes of a sizing call is a size; one read back elsewhere on the line (``loss(out.view(-1, V),
    y).item()``, ``torch.empty(1).uniform_(...).item()``) sets none."""
    for m in re.finditer(rf"{_SIZING.pattern}|\.split\(\s*\[", code):
        start = m.start() + m[0].index("(") + 1
        args = call_arguments(code, start)
        args = code[start:] if args is None else args  # continued on the next line: the rest of this one
        given = re.sub(r"\b\w+\s*=(?!=)[^,]*", "", args)  # keywords: dim=1, dtype=...
        if _READ_IN_SIZES.search(given):  # a value read back among its sizes (n.item(), a tensor iterated)
            return True
    return False


def sizes_set_by(code: str, file: str, line: int) -> str:
    """The line at ``file:line`` where it sets sizes itself (``sized_here``), else a later line of the block
    around it (a branch on a value: ``if T % period != 0:``) that sets a tensor's size with a name the branch
    reads (``out.reshape(B, length // period, period, N)``): "line N (its code)", or ""."""
    if sized_here(code):
        return f"line {line} ({code.strip()})"
    # bare names only: a number (period), never a tensor the condition reads through a method (x.sum() > 0)
    names = set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\b(?!\s*[(.\[])", code)) - {
        "if",
        "elif",
        "while",
        "not",
        "and",
        "or",
    }
    head = linecache.getline(file, line) if file else ""
    indent = len(head) - len(head.lstrip())
    for n in range(line + 1, line + 40):
        text = linecache.getline(file, n)
        if not text:
            break
        if text.strip() and len(text) - len(text.lstrip()) < indent:
            break  # the block around the branch ends
        if _SIZING.search(text) and any(re.search(rf"(?<![\w.]){re.escape(v)}\b", text) for v in names - {"self"}):
            return f"line {n} ({text.strip()})"
    return ""
