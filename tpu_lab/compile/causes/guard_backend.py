"""A guard on torch.compile's backend in words: the same code compiled again by another torch.compile call
(other options, or another backend callable), whose graphs Dynamo keeps apart."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import Cause

_WRAPPER = re.compile(r"_TorchCompile(?:Inductor)?Wrapper(?:\((?P<options>.*?)\))?(?= \(id=)")


def _options(text: str | None) -> dict[str, str]:
    """torch.compile's options as Dynamo describes its wrapper (``compiler='eager', dynamic=None,
    kwargs={'mode': 'max-autotune'}``), the kwargs dict's entries as options of their own."""
    import ast

    fields = dict(re.findall(r"(\w+)=('[^']*'|\{.*\}|[^,\s]+)", text or ""))
    try:
        extra = ast.literal_eval(fields.pop("kwargs", "{}"))
    except (ValueError, SyntaxError):
        extra = {}
    return fields | ({k: repr(v) for k, v in extra.items()} if isinstance(extra, dict) else {})


def backend_words(g: str) -> Cause:
    """Another torch.compile(...) call on code compiled before: its own backend object. Where Dynamo shows
    both as torch.compile's wrapper, what differs is the call's options (``dynamic=False`` vs ``True``)."""
    found = list(_WRAPPER.finditer(g))
    both = [_options(m["options"]) for m in found]
    if len(both) == 2 and both[0] != both[1]:
        a, b = both
        changed = [
            f"{k}={b.get(k)}, where the first call " + (f"had {k}={a[k]}" if k in a else f"set no {k}")
            for k in dict.fromkeys([*a, *b])
            if a.get(k) != b.get(k)
        ]
        return Cause(
            "backend",
            f"compiled again by another torch.compile call on the same code, with other options ({', '.join(changed)}): "
            "each call's graphs are kept apart",
            g,
            "compile the function once and reuse that compiled object; each torch.compile(...) with other options "
            "compiles its own graphs (and counts toward one recompile limit)",
        )
    if len(both) == 2:
        return Cause(
            "backend",
            "compiled again by another torch.compile call on the same code"
            + (" (same options)" if all(m["options"] for m in found) else "")
            + ": each call's graphs are kept apart",
            g,
            "call torch.compile once and reuse the compiled object instead of compiling the function again",
        )
    return Cause(
        "backend",
        "compiled again with a different backend callable",
        g,
        "reuse one backend object (or functools.partial) for every torch.compile call",
    )
