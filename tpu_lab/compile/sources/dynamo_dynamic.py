"""What Dynamo's automatic dynamic shapes decided for a compiled code object, read from its per-code state
(``torch._dynamo.pgo``): the Python numbers it made symbolic. Part of the Dynamo source seam."""

from __future__ import annotations

from typing import Any


def dynamic_scalars(record: Any) -> frozenset[str]:
    """The Python numbers (Dynamo's sources, ``L['n']``) that automatic dynamic shapes has made symbolic
    for this record's code, from Dynamo's per-code state (``pgo``): a scalar entry marked auto-dynamic."""
    try:
        from torch._dynamo import pgo

        states, dynamic = pgo.get_code_state(), pgo.auto_dynamic
    except (ImportError, AttributeError):  # another torch: none known, the words stay the general ones
        return frozenset()
    where = (
        getattr(record, "co_filename", None),
        getattr(record, "co_firstlineno", None),
        getattr(record, "co_name", None),
    )
    out = set()
    for key, state in list(states.items()):
        if (getattr(key, "filename", None), getattr(key, "firstlineno", None), getattr(key, "name", None)) != where:
            continue
        for source, entry in getattr(state, "automatic_dynamic", {}).items():
            if getattr(entry, "scalar", None) is dynamic and not isinstance(getattr(entry, "size", None), tuple):
                out.add(source)
    return frozenset(out)
