"""An attribute's presence in words (Dynamo's ``hasattr`` guard): an object that gained an attribute the
code sets on its first call (BinaryNet's ``self.weight.org``), or lost one. Pure: strings in, a Cause out."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import Cause, local_name

_HASATTR = re.compile(r"^(?P<not>not )?hasattr\((?P<name>.+), '(?P<attr>\w+)'\)$")


def attribute_words(g: str, line: str) -> Cause | None:
    """``g``: Dynamo's failed guard; ``line``: where the code checks it, in words (`` by your code at f.py:20
    (if not hasattr(self.weight, 'org'):)``). None for any other guard."""
    if moved := re.fullmatch(r"KeyError on (self(?:\.\w+)*\.\w+)", g.strip()):  # its own dict no longer holds it
        return Cause(
            "attribute",
            f"{local_name(moved[1])} is no longer in its object's own attributes, where the graph read it (a module, "
            "parameter or buffer assigned to a module's attribute is kept in its _modules, _parameters or _buffers)",
            g,
            "expected once: give it its final kind before the first compiled call (assign the module in __init__, "
            "or build it once before compiling)",
        )
    m = _HASATTR.match(g.strip())
    if m is None:
        return None
    name, attr = local_name(m["name"]), m["attr"]
    if m["not"]:  # compiled while it was missing: the code (or something) set it since
        return Cause(
            "attribute",
            f"{name} gained the attribute {attr}: the graph was compiled while it did not exist (checked{line})",
            g,
            f"expected once: the first call sets it; set {name}.{attr} before the first compiled call (in "
            "__init__, or once before compiling) so the first graph is compiled with it",
        )
    return Cause(
        "attribute",
        f"{name} lost the attribute {attr} (checked{line}): the graph was compiled while it existed",
        g,
        f"keep {name}.{attr} set (something deleted it between calls), or check for it outside the compiled function",
    )
