"""Guards on objects rather than values, in words: a type or identity that changed (a replaced submodule,
another instance, an enum member), and torch.compile's shared wrapper of non-module callables."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import Cause, local_name

_TYPE_ID = re.compile(r"___check_type_id\((?P<name>[^,]+), \d+\)(?:, type=<class '(?P<cls>[\w.]+)'>)?")
_OBJ = re.compile(r"___check_obj_id\((?P<name>[^,]+),|ID_MATCH.*?(?P<name2>L\[.+?\]|G\[.+?\])")


def object_words(g: str, at: str) -> Cause | None:
    """A failed type or identity guard in words (``at``: the user's file:line behind it); None for others."""
    if (m := _TYPE_ID.search(g) or _OBJ.search(g)) and _shared_wrapper(m, at):
        was = m["cls"].rsplit(".", 1)[-1] if "cls" in m.groupdict() and m["cls"] else "another callable"
        return Cause(
            "shared_wrapper",
            f"the first compile of this callable: torch.compile wraps every non-module callable in one "
            f"shared function, so Dynamo counts it as a recompile of that wrapper (it last held a {was})",
            g,
            "none for this one; but those callables (partials, objects with __call__) share one recompile "
            "limit (torch._dynamo.config.recompile_limit): for many, compile the function they call once",
        )
    if m := _TYPE_ID.search(g):
        name, was = local_name(m["name"]), (m["cls"] or "?").rsplit(".", 1)[-1]
        module = "._modules[" in m["name"] or ".nn.modules." in (m["cls"] or "")
        return Cause(
            "type",
            f"{name} is now of another type, was {was}" + (" (a submodule was replaced)" if module else ""),
            g,
            "expected once per type; "
            + ("swap submodules before the first compiled call" if module else "pass the same type every call"),
        )
    if m := _OBJ.search(g):
        name = local_name(m["name"] or m["name2"] or "an input")
        if (cls := _enum_class(g)) is not None:
            return Cause(
                "enum",
                f"{name} is another {cls} member (each enum value is its own graph)",
                g,
                "expected once per value; pass an int or a tensor instead if it changes often",
            )
        return Cause(
            "identity",
            f"{name} is a different object than the one compiled for (another module "
            "instance, function or Python object)",
            g,
            "reuse one instance across calls",
        )
    return None


def _shared_wrapper(m: re.Match, where: str) -> bool:
    """A guard on ``fn`` itself in torch.compile's wrapper (``external_utils.inner``): another callable."""
    name = next((v for v in m.groups() if v), "")
    return name.strip() == "fn" and (not where or "external_utils" in where)


def _enum_class(g: str) -> str | None:
    """The class named in an identity guard (``type=<class 'train.Mode'>``) when it is an Enum."""
    import enum
    import sys

    m = re.search(r"type=<class '(?P<module>[\w.]+)\.(?P<cls>\w+)'>", g)
    cls = getattr(sys.modules.get(m["module"]), m["cls"], None) if m else None
    return m["cls"] if m and isinstance(cls, type) and issubclass(cls, enum.Enum) else None
