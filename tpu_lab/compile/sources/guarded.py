"""The objects a failed guard names, read as they are now: what a guard on ``self.act`` or ``G['DROPOUT']``
checks (``subjects``), and the inputs or parts of them that are None now (``guarded_nones``). Read by the
attribute and item lookups Dynamo's own guards make, no other call; per compile, never per call."""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from tpu_lab.compile.causes.cause import local_name
from tpu_lab.compile.sources.value_text import describe, length_text

_SOURCE = r"(?:[LG]\['\w+'\]|[A-Za-z_]\w*)(?:\.\w+|\['[^']*'\]|\[\d+\])*"
_SUBJECT = re.compile(
    rf"___check_(?:type|obj)_id\((?P<a>{_SOURCE}), \d+\)|^(?P<b>{_SOURCE}) (?:is|==|!=) "
    rf"|^len\((?P<e>{_SOURCE})\) (?:==|!=) |^not (?P<f>{_SOURCE})$"  # a container's length: is it a dict?
)
_STEP = re.compile(r"\.(\w+)|\['([^']*)'\]|\[(\d+)\]")


def subjects(frame: Any, reasons: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The objects the failed guards check that are not plain inputs (``L['self']._modules['act']``,
    ``G['DROPOUT']``), described as they are now, keyed by Dynamo's source; read by the attribute and
    item lookups Dynamo's own guards make, no other call."""
    out = {}
    for reason in reasons:
        for guard in reason.split(":", 1)[-1].split("\n"):
            m = _SUBJECT.search(guard.strip())
            source = m and (m["a"] or m["b"] or m["e"] or m["f"])
            if source and source not in out:
                try:
                    value = value_at(source, frame)
                except Exception:
                    continue  # a source this reader does not follow: the words say less, never wrong
                if type(value) in (list, tuple):  # its length: what a length guard checks
                    out[source] = length_text(value)
                elif re.fullmatch(r"L\['\w+'\]|\w+", source) is None:  # a plain input is in the signature
                    out[source] = f"str {value[:60]!r}" if isinstance(value, str) else describe(value)
    return tuple(out.items())


_GUARDED = re.compile(rf"{_SUBJECT.pattern}|tensor '(?P<c>{_SOURCE})'|check_tensor\((?P<d>{_SOURCE}),")


def guarded_nones(frame: Any, reasons: Sequence[str]) -> list[str]:
    """The inputs, and parts of them (``settings.top_k``), that are None now and that a failed guard names:
    the inputs shown skip a None (an unused default), but not one whose change made the compile."""
    out = []
    for reason in reasons:
        for guard in reason.split(":", 1)[-1].split("\n"):
            m = _GUARDED.search(guard.strip())
            source = m and next((s for s in m.group("a", "b", "c", "d") if s), None)
            try:
                if source and value_at(source, frame) is None:
                    name = re.sub(r"[LG]\['(\w+)'\]", r"\1", source)
                    out.append(local_name(name) if re.match(r"fn\b", name) else name)  # a module's: self[1].momentum
            except Exception:
                continue  # a source this reader does not follow: the inputs show less, never wrong
    return out


def none_at(name: str, values: dict[str, Any]) -> bool:
    """Whether the input (or its part, ``settings.top_k``) ``name`` is None in a call's ``values``."""
    try:
        return value_at(name, SimpleNamespace(f_locals=values, f_globals={})) is None
    except Exception:
        return False


def value_at(source: str, frame: Any) -> Any:
    root = re.match(r"([LG])\['(\w+)'\]|(\w+)", source)
    if root is None:
        raise LookupError(source)
    if root[3]:  # a bare name: a local (self, an argument), else a global
        value = frame.f_locals[root[3]] if root[3] in frame.f_locals else frame.f_globals[root[3]]
    else:
        value = (frame.f_locals if root[1] == "L" else frame.f_globals)[root[2]]
    rest = source[root.end() :]
    while rest:
        step = _STEP.match(rest)
        if step is None:
            raise LookupError(rest)
        attr, key, index = step.groups()
        value = getattr(value, attr) if attr else value[key] if key is not None else value[int(index)]
        rest = rest[step.end() :]
    return value
