"""Legacy constructors Dynamo cannot trace (``torch.autograd.Variable``, ``torch.LongTensor(...)``): named as
the user wrote them, with what each returns today, and the call Dynamo traces in their place. Pure: text in,
text out."""

from __future__ import annotations

import dataclasses
import linecache
import re

from tpu_lab.compile.causes.cause import Cause

LEGACY = "a legacy wrapper: Variable(t) returns t.detach(), and Variable(t, requires_grad=True) a new leaf of it"
LEGACY_FIX = (
    "delete the Variable(...) wrapper where its tensor needs no gradient (one the code just made: "
    "Variable(torch.zeros(n)) is torch.zeros(n)); else write Variable(t) as t.detach(), what it returns: the "
    "break goes"
)
_LEAF = re.compile(r"(?:\w+\.)*Variable\(\s*(?P<t>[\w.\[\]]+)\s*,\s*requires_grad\s*=\s*True\s*\)")
_TYPED = "a legacy typed-tensor constructor"
_TYPED_FIX = (
    "build it with torch.tensor(data, dtype=...) or torch.zeros(size, dtype=...) (a sparse one with "
    "torch.sparse_coo_tensor), which Dynamo traces, in place of the legacy constructor"
)


def legacy_said(text: str) -> str:
    """Dynamo's name for a legacy constructor's C code (``<unknown module>._LegacyVariableBase.__new__``,
    ``<unknown module>.LongTensor.__new__``) as the call the user wrote."""
    builtin = r"(?:Dynamo does not know how to trace the builtin )?`?<unknown module>\.{}\.__new__\.?`?"
    pybind = r"(?: This function is either .*?\(perhaps created with pybind\)\.?)?"  # untrue of torch's own C code
    said = r"Dynamo cannot trace torch.autograd.Variable, a constructor in C code ({})"
    text = re.sub(builtin.format("_LegacyVariableBase") + pybind, said.format(LEGACY).replace("\\", ""), text)
    return re.sub(
        builtin.format(r"(\w+Tensor)") + pybind,
        rf"Dynamo cannot trace torch.\1, a constructor in C code ({_TYPED})",
        text,
    )


def legacy_fix(words: str, code: str = "") -> str:
    """The fix for a legacy constructor's break on the user's line ``code``, '' for any other."""
    if LEGACY in words and (leaf := _LEAF.search(code)):  # WGAN-GP's interpolates, then autograd.grad on them
        then = (
            "Dynamo traces that, and the break goes"
            if _torch_at_least(2, 15)
            else "this torch breaks at requires_grad_() instead where the tensor reaches eager code (torch 2.15 does not)"
        )
        return (
            f"write {leaf[0]} as {leaf['t']}.detach().requires_grad_(), what it returns (a new leaf that requires "
            f"grad, which autograd.grad can take as its inputs); {then}"
        )
    return LEGACY_FIX if LEGACY in words else _TYPED_FIX if _TYPED in words else ""


_REJECTED = re.compile(r"expected TensorOptions\(dtype=(\w+).*?\(got TensorOptions\(dtype=(\w+)")
_DTYPES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32"}
_OF = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64"}
_OF |= {"Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}


def typed_rejected(words: str, code: str) -> tuple[str, str] | None:
    """(words, fix) where a legacy typed constructor on the user's line (``torch.FloatTensor(batch)``) rejected
    the data under compile: eagerly it converts a NumPy float64 array, but Dynamo passes the array in as a
    float64 tensor, which the constructor refuses (SAC's replay batch). None for any other failure."""
    rejected, ctor = _REJECTED.search(words), re.search(r"\btorch\.(\w+)Tensor\(", code)
    if rejected is None or ctor is None or ctor[1] not in _OF:
        return None
    want, got = _OF[ctor[1]], _DTYPES.get(rejected[2], rejected[2])
    return (
        f"torch.{ctor[1]}Tensor(...) gets {got} data here: eagerly the legacy constructor converts a NumPy array to "
        f"{want}, but under compile Dynamo passes the array in as a {got} tensor, which torch.{ctor[1]}Tensor "
        "refuses (as it refuses a tensor of another dtype either way)",
        f"build it with torch.tensor(data, dtype=torch.{want}) (or torch.as_tensor(data, dtype=torch.{want})) in place "
        f"of torch.{ctor[1]}Tensor(data): "
        "Dynamo traces that, and eager gives the same tensor",
    )


_SIZE_ARG = re.compile(r"\btorch\.(?P<kind>\w+)Tensor\(\s*(?P<arg>[\w.]+(?:\.size\(\))?)\s*\)")


_TYPE_CHECK = re.compile(
    r"isinstance\(\s*(?P<x>[\w.\[\]]+?)(?:\.data)?\s*,\s*torch\.(?P<cuda>cuda\.)?(?P<kind>\w+)Tensor\s*\)"
)


def sized_typed(cause: Cause, code: str, file: str, line: int) -> Cause:
    """``cause`` with a note on a legacy typed constructor given a size on the user's line
    (``torch.FloatTensor(sizeN)``, ``sizeN = x.size()`` above it): eagerly a tensor of that shape, but Dynamo
    builds one that holds the size's numbers (measured: ``torch.Size([2])`` for a 2-d size), silently or
    raising further on (DnCNN's noise). A legacy type checked with isinstance (CRNN's ``isinstance(input.data,
    torch.cuda.FloatTensor)``), whose ``__instancecheck__`` Dynamo cannot trace, is named with the test of the
    tensor's own properties. The cause as it was where the line has neither."""
    checked = _TYPE_CHECK.search(code) if "__instancecheck__" in cause.words else None
    if checked and checked["kind"] in _OF:
        x, dtype = checked["x"], _OF[checked["kind"]]
        where = f"{x}.is_cuda" if checked["cuda"] else f"not {x}.is_cuda"
        return dataclasses.replace(
            cause,
            words=f"{checked[0]} checks a legacy tensor type, whose custom __instancecheck__ Dynamo cannot trace",
            fix=f"test the tensor's own properties in place of the legacy type: {where} and {x}.dtype == torch.{dtype}"
            " (Dynamo reads both from the tensor it traces): the break goes",
        )
    m = _SIZE_ARG.search(code)
    if m is None or m["kind"] not in _OF:
        return cause
    arg, sized = m["arg"], re.compile(r"(?:\.size\(\)|\.shape|torch\.Size\(.*\))\s*$")
    if not sized.search(arg):  # a name: the nearest assignment above, inside the function, gives it a size
        text = ""  # (a break on the file's first line has no line above)
        for n in range(line - 1, max(line - 50, 0), -1):
            text = linecache.getline(file, n).strip()
            if text.startswith(("def ", "async def ")) or re.match(rf"{re.escape(arg)}\s*=(?!=)", text):
                break
        if not re.match(rf"{re.escape(arg)}\s*=(?!=).*", text) or not sized.search(text):
            return cause
    note = (
        f"write torch.{m['kind']}Tensor({arg}) as torch.empty({arg}, dtype=torch.{_OF[m['kind']]}) (torch.randn({arg}) "
        f"for a normal draw): eagerly it makes a tensor of shape {arg}, but under compile Dynamo builds a tensor that "
        f"holds {arg}'s numbers (a 1-d tensor as long as {arg}), so once this line traces the compiled code computes "
        "on the wrong shape or raises"
    )
    return dataclasses.replace(cause, fix=f"{cause.fix}; and {note}" if cause.fix else note)


def _torch_at_least(major: int, minor: int) -> bool:
    import torch

    found = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return found is not None and (int(found[1]), int(found[2])) >= (major, minor)
