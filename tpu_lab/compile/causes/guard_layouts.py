"""A tensor's memory layout, rank or storage offset changed: a stride (channels_last, a transposed or sliced
view), the offset of a view into a larger tensor, or the number of dimensions (with the fix for each kind of
tensor), in words, with the layout to keep. Pure: strings in, ``Cause`` out."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from tpu_lab.compile.causes.cause import Cause, local_name
from tpu_lab.compile.causes.guard_sizes import PARAMETER_FIX

_LAYOUTS = ("channels_last_3d", "channels_last", "non-contiguous")


def described(source: str, inputs: Mapping[str, str]) -> str | None:
    """The input ``source`` as the call passed it (``i64[2, 16, 8] non-contiguous``); a value carried over a graph
    break (``___stack0``) by its place: a resumed frame takes the carried values first, in order."""
    if (now := inputs.get(local_name(source))) is not None:
        return now
    carried = re.fullmatch(r"___stack(\d+)", source.strip())
    described = [d for n, d in inputs.items() if n != "grad mode"]
    return described[int(carried[1])] if carried and int(carried[1]) < len(described) else None


def strides_of_sizes(name: str, i: int, g: str, now: str | None) -> Cause | None:
    """A contiguous tensor's stride guard in a dynamic graph (``img.stride()[0] == img.size()[1]*img.size()[1]``:
    as many size factors as dimensions after ``i``, one size put for another the graph held equal) failing on
    a tensor still contiguous (``now``, as described): its sizes broke a relation the graph held, its layout did
    not change. None for any other guard or tensor."""
    shape = re.match(r"\w+\[([\d, ]+)\](.*)", now or "")  # f32[3, 16, 48] requires_grad: contiguous still
    factors = g.strip().partition(" == ")[2].split("*")
    if shape is None or any(k in shape[2] for k in _LAYOUTS) or len(factors) != len(shape[1].split(", ")) - i - 1:
        return None
    return Cause(
        "specialised",
        f"{name}'s strides follow its sizes, which broke a relation the graph held (its layout did not change)",
        g,
        "none of its own: it goes with the size change (see that cause)",
    )


def layout_words(name: str, detail: str, g: str, now: str | None, parameter: bool) -> Cause:
    """A tensor's memory layout changed (a stride guard): named as it is now where the call's input is
    described (``now``: ``f32[2, 3, 16, 16] channels_last``; contiguous where no layout is said), else in general."""
    layout = next((k for k in _LAYOUTS if now and now.endswith(f" {k}")), "contiguous" if now else "")
    whose = f"{name}'" if name.endswith("s") else f"{name}'s"  # labels' layout, not labels's
    sizes = re.search(r"\[([\d, ]+)\]", now or "")
    at = re.match(r"stride (\d+): \d+ -> (\d+)", detail)
    shape = [int(d) for d in sizes[1].split(", ")] if sizes else []
    # the new tensor's stride there is not what its own sizes give: a slice of a longer one (else a real change)
    if at and int(at[1]) < len(shape) and shape[int(at[1])] == 1 and int(at[2]) != math.prod(shape[int(at[1]) + 1 :]):
        return Cause(  # a size-1 dimension's stride: no layout at all, but a slice of a longer tensor carries it
            "stride",
            f"{whose} stride along its size-1 dimension {at[1]} changed ({detail.split(': ', 1)[1]}): the same "
            "layout, but a slice of a longer tensor keeps that tensor's stride there, and Dynamo guards it",
            g,
            f"where {name} is passed or made, {name}.clone(memory_format=torch.contiguous_format) gives it the same "
            "strides every call (.contiguous() keeps a tensor that already is contiguous as it is)",
        )
    was = int(w[1]) if (w := re.match(r"stride \d+: (\d+)", detail)) else 0
    if at and int(at[1]) < len(shape) and shape[int(at[1])] > 1 and min(was, int(at[2])) >= math.prod(shape):
        return Cause(  # both strides reach past its own elements: a slice of a larger tensor whose size changed
            "stride",
            f"{whose} stride {at[1]} changed ({detail.split(': ', 1)[1]}) while its own sizes stayed: it is a view "
            "(a slice) of a larger tensor whose size changed, and its strides follow that size",
            g,
            f".contiguous() where {name} is made (after the slice) gives it strides of its own sizes, so the larger "
            "tensor's size no longer reaches its graph; or keep that tensor at one size",
        )
    if layout == "non-contiguous":
        words = f"{whose} memory layout changed to non-contiguous ({detail}: a transposed, sliced or expanded view)"
    elif layout:
        words = f"{whose} memory layout changed to {layout} ({detail})"
    else:
        words = f"{whose} memory layout changed ({detail}; a transposed, sliced or channels_last tensor)"
    dims = now.count(",") + 1 if now and "[" in now else 4  # channels_last is for 4-D tensors, _3d for 5-D
    form = {4: "channels_last", 5: "channels_last_3d"}.get(dims)
    who = name if re.fullmatch(r"[\w.]+(?:\[[\w'\"]+\])*", name) else "x"  # as the call names it: past[0]
    other = f", or always {who}.to(memory_format=torch.{form})" if form else ""
    fix = (
        "expected once per memory format: convert the model once, before the first compiled call "
        "(model.to(memory_format=torch.channels_last)), and leave it so"
        if parameter
        else f"pass it in one memory format every call (always {who}.contiguous(){other})"
    )
    return Cause("stride", words, g, fix)


_OFFSET = re.compile(r"^(?:(?P<lo>\d+) <= )?(?P<name>.+?)\.storage_offset\(\)(?: (?P<op>[<>=!]=?) (?P<n>\d+))?$")


def offset_words(g: str) -> Cause | None:
    """A storage-offset guard (``2 <= past[0].storage_offset()``): a dynamic graph built for a view into a
    larger tensor (split, chunk, slicing) met a tensor of its own, or the other way round; so does a stride
    bound (``stride_bound_words``)."""
    m = _OFFSET.match(g.strip())
    if m is None:
        return stride_bound_words(g)
    name = local_name(m["name"])
    held = f"offset {m['lo']} or more" if m["lo"] else f"offset {m['op']} {m['n']}" if m["op"] else "another offset"
    return Cause(
        "offset",
        f"the storage offset of {name} changed (the graph assumed {held}): a view into a larger tensor (from "
        "split, chunk or slicing) and a tensor of its own are graphs of their own",
        g,
        f"pass {name} the same way every call: where it is made as a view, .clone() it (every call then passes a "
        "tensor of its own), or always pass a view",
    )


_STRIDE_BOUND = re.compile(r"^(?P<lo>\d+) <= (?P<name>.+?)\.stride\(\)\[(?P<i>\d+)\]$")


def stride_bound_words(g: str) -> Cause | None:
    """A stride held at 2 or more (``2 <= input.stride()[0]``): a dynamic graph built for a strided view (a
    column ``trg[:, t]``) met a tensor laid out as its own (``output.argmax(1)``), whose stride there is 1."""
    m = _STRIDE_BOUND.match(g.strip())
    if m is None:
        return None
    name = local_name(m["name"])
    return Cause(
        "stride",
        f"{name}'s stride {m['i']} fell below {m['lo']}: the graph was compiled for a strided view (a column or "
        f"every other element of a larger tensor), and {name} now is not one (a tensor of its own, an expanded "
        "one, or a dimension of size 1)",
        g,
        f"pass {name} the same way every call: .contiguous() where it is made as a strided view (a tensor of its "
        "own every call), or always pass a view",
    )


def rank_fix(name: str, parameter: bool) -> str:
    """The fix for ``name`` having another number of dimensions: a module's own tensor (or parameter) made at
    another rank, a parameter (static shapes: a graph per shape), or an input."""
    if name.startswith("self.") and parameter:  # LSQ's step size: a [1] placeholder, then a 0-d Parameter
        return (
            f"the module's own parameter {name} was replaced by one of another rank: create it at its final rank "
            "(torch.ones(()) for a 0-d scale), or replace it before the first compiled call; no setting shares a "
            "graph across ranks (force_parameter_static_shapes is about sizes)"
        )
    if parameter:
        return PARAMETER_FIX
    if name.startswith("self."):
        return (
            f"the module's own {name} was made at another rank (a placeholder such as torch.empty(0) replaced by the "
            "real tensor): create it at its final rank (its sizes 0 at first), so only a size changes"
        )
    return RANK_FIX


RANK_FIX = "expected once per rank; reshape inputs to one rank if this keeps changing"
