"""Which of a compiled frame's input tensors the code that called it holds too, under its own name: a layer
Dynamo compiles on its own inside another compiled call (after a graph break) often gets the caller's tensor
as it is (``self.mel(wav)``), and a mark on that tensor before the call reaches the inner frame. Read from the
live stack at the compile, by identity; per compile, never per call. Part of the Dynamo source seam."""

from __future__ import annotations

from typing import Any

from tpu_lab.compile.sources.packages import is_library

_MOST_FRAMES = 64
_MOST_INPUTS = 32


def passed_in(values: dict[str, Any], caller: Any) -> tuple[tuple[str, str, str], ...]:
    """(input name, the name the outermost user frame on the stack holds the same tensor under, that frame's
    function), for each tensor among ``values`` (the compiled frame's inputs) some caller holds; ``caller``:
    the frame that called it. Library frames (torch's, transformers') are passed over: no user name there.
    An input no caller holds, whose name the nearest user frame gives another value (its ``x`` is a 2-D piece,
    the call passes ``x.unsqueeze(0)``), comes as (input name, "", that frame's function)."""
    import torch

    tensors = {id(v): n for n, v in list(values.items())[:_MOST_INPUTS] if isinstance(v, torch.Tensor)}
    found: dict[str, tuple[str, str]] = {}
    other: dict[str, str] = {}  # an input the nearest user frame names alike, holding another value there
    f, seen, nearest = caller, 0, True
    while f is not None and seen < _MOST_FRAMES and tensors:
        seen += 1
        if not is_library(f.f_code.co_filename) and not _compiled(f.f_code):  # a mark inside compiled code raises
            held = _held(f.f_locals)
            if nearest:  # the frame whose line made the call: a name there is what the user reads
                other = {n: f.f_code.co_name for n, v in held if n in tensors.values() and id(v) not in tensors}
                nearest = False
            for name, value in held:
                if id(value) in tensors and isinstance(value, torch.Tensor):
                    found[tensors[id(value)]] = (name, f.f_code.co_name)  # the outermost wins: walked outward
        f = f.f_back
    clashes = tuple((n, "", where) for n, where in other.items() if n not in found)  # "": no caller holds it
    return tuple((inner, outer, where) for inner, (outer, where) in found.items()) + clashes


def _held(local: dict[str, Any]) -> list[tuple[str, Any]]:
    """A frame's locals by name, and the items of its tuples and lists (``D[0]`` of ``model(Q, D)``)."""
    out = []
    for name, value in list(local.items()):
        if name.startswith((".", "___")):  # a comprehension's hidden iterator, a value Dynamo carries
            continue
        out.append((name, value))
        if isinstance(value, (tuple, list)):
            out += [(f"{name}[{i}]", item) for i, item in enumerate(value[:8])]
    return out


def _compiled(code: Any) -> bool:
    """A frame running code Dynamo compiled (its rewrite of a function, or the rest after a graph break): the
    names there are inside the compiled call, where a mark raises."""
    from tpu_lab.compile.sources.resume_code import RESUME

    if code.co_name.startswith(RESUME):
        return True
    try:
        from torch._dynamo.utils import orig_code_map
    except ImportError:  # another torch: a resumed part is still told apart by its name
        return False
    return code in orig_code_map
