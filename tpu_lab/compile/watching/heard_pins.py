"""A size pinned to one value where Dynamo's shape environment heard it fixed (``cap.pins``), in words: the
user's line that fixed it, torch's own code under that line, the conditions that left one value, or an input
of fixed size it meets."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.branch_origin import calls_vmap
from tpu_lab.compile.causes.cause import local_name
from tpu_lab.compile.sources.dynamo_pins import Pin
from tpu_lab.compile.sources.frames import Capture, renamed, where_label
from tpu_lab.compile.sources.packages import package_of


def heard_pin(names: list[str], dim: str, cap: Capture, static: dict[str, set[int]]) -> tuple[str, str]:
    """(note, fix) for the first of ``names`` whose dimension ``dim`` Dynamo heard fixed (``cap.pins``); ``static``: the
    other inputs' sizes this graph keeps at one value, which a size that meets them is fixed to until they
    change. Said by the compiled function's file (no code object is needed: a log read later says the same)."""
    at = _pinned_at(cap)
    n = next((n for n in names if f"{n} dim {dim}" in at), "")
    if not n or (cap.code is not None and package_of(cap.code.co_filename) == "torch"):  # a torch.func transform
        return "", ""  # compiled itself (vmap(grad(f))): its size words stand
    pin, home = at[f"{n} dim {dim}"], cap.function.filename
    if pin.refined:  # no one line: the bounds torch's checks set on it (a zero pad of max_length - T) leave one value
        return f"the graph pins {n} dim {dim} to one size: {_REFINED.format(pin.value)}", _PAD_FIX
    if _COUNTED.search(pin.code or ""):  # torch.split(x, 1, dim=0): as many pieces as the size, a Python number
        return _pin_note(n, dim, pin, home) + f", {_COUNT_WORDS}", COUNT_FIX
    met = [o for o, sizes in static.items() if o != n and pin.value.isdigit() and int(pin.value) in sizes]
    if met:  # broadcast against an input Dynamo kept at its first size: both go dynamic once it changes too
        note = _pin_note(n, dim, pin, home) + f", where {n} meets {', '.join(met)}, kept at that size so far"
        return note, PINNED_FIX.format(n, dim)
    if pin.inside:  # torch's own code under the user's line (F.linear on forward-AD dual tensors): nothing to edit
        return _pin_note(n, dim, pin, home) + f", inside torch ({pin.inside}), so every size is its own graph", _PAD_FIX
    if calls_vmap(home, cap.function.line):  # vmap traces the dimension it maps over at one size, wherever fixed
        return _pin_note(n, dim, pin, home) + f" ({_VMAP})", FIXED_FIX
    return _pin_note(n, dim, pin, home) + ", so every size is its own graph", _pin_fix(pin, home)


_COUNTED = re.compile(r"\b(?:split|unbind|tensor_split)\(|\brange\(|\.tolist\(\)")
_COUNT_WORDS = (
    "where the size sets how many pieces the code makes or how many times a loop runs (a Python number), so every "
    "size is its own graph"
)
COUNT_FIX = (
    "pad to a few sizes (buckets), or keep the loop over the pieces (or steps) in Python and compile what each one "
    "runs; a mark cannot help here (mark_dynamic would raise: ConstraintViolationError)"
)
_REFINED = (
    "the conditions Dynamo met on it (sizes of 2 and more, and the checks torch makes on tensors the code builds "
    "from it, such as a pad of a maximum length minus this size) leave only {0}"
)
_PAD_FIX = (
    "pad to one size before the call (or to a few sizes), so the compiled function sees few sizes: no line of your "
    "code fixes it to edit (mark_dynamic would raise here: ConstraintViolationError)"
)
_VMAP = "torch.func.vmap, which this function calls, traces the dimension it maps over at one size"


def static_sizes(cap: Capture, dims: set[str]) -> dict[str, set[int]]:
    """Each tensor input's sizes this graph kept at one value from the start (``dims``: those it traced
    dynamic, pinned or not)."""
    found: dict[str, set[int]] = {}
    for name, said in cap.shown:
        if m := re.search(r"\[([\d, ]+)\]", said):
            sizes = [int(v) for v in m[1].split(", ")]
            found[name] = {v for i, v in enumerate(sizes) if f"{name} dim {i}" not in dims}
    return found


def _pinned_at(cap: Capture) -> dict[str, Pin]:
    """The sizes the compile fixed, by the user's names (``x dim 1``)."""
    found = ((_PIN_SOURCE.fullmatch(p.source), p) for p in cap.pins)
    return {f"{renamed(local_name(m['source']), cap.names)} dim {m['dim']}": p for m, p in found if m}


_PIN_SOURCE = re.compile(r"(?P<source>.+?)\.size\(\)\[(?P<dim>\d+)\]")


def _where(pin: Pin, home: str) -> str:
    return f"line {pin.line}" if pin.file == home else where_label(pin.file, pin.line)


def _pin_note(name: str, dim: str, pin: Pin, home: str) -> str:
    said = f"{_where(pin, home)} ({pin.code})" if pin.code else _where(pin, home)
    return f"the graph pins {name} dim {dim} to one size: Dynamo fixed it to {pin.value} at {said}"


def _pin_fix(pin: Pin, home: str) -> str:
    return (
        f"at {_where(pin, home)}, keep the size symbolic: there it is needed as one number (a call that takes a "
        "plain int) or equal to a tensor of fixed size (broadcasting against it); compute it there with tensor ops "
        "that take the size as they go (torch.arange), or pad to a few sizes (mark_dynamic would raise here: "
        "ConstraintViolationError)"
    )


PINNED_FIX = (
    "if {0} meets another input of fixed size, once that input's size changes too Dynamo can make both dynamic; "
    "to skip the wait, mark {0} dim {1} dynamic together with the same dimension of each input it is combined with "
    "(torch._dynamo.maybe_mark_dynamic on each, before the first call); if the code uses the size as a Python "
    "number, pad to a few sizes instead (where it does, a mark cannot help, and mark_dynamic raises: "
    "ConstraintViolationError)"
)
FIXED_FIX = (
    "pad to a few sizes (buckets), or keep the size out of Python control flow (where a loop runs over it, "
    "vectorise it); mark_dynamic would raise here (ConstraintViolationError: the code specialises it)"
)
