"""A graph break inside torch's own code that an argument of the user's call avoids: torch's transformer
layers read a mask's values back (``.item()``) to detect a causal mask unless told it is one. Where the
break is in such a function, its fix is that argument, never capture_scalar_outputs (the value decides a
branch there, so the setting only moves the break). Text in, a fix out."""

from __future__ import annotations

import linecache
import re

from tpu_lab.compile.sources.packages import torch_folder

_AVOIDED = {  # torch's function the break is in -> the argument that skips its read of tensor data
    "_detect_is_causal_mask": (
        "pass is_causal=True with the causal mask (nn.TransformerDecoder: tgt_is_causal=True; an encoder or "
        "nn.MultiheadAttention: is_causal=True): torch then skips reading the mask's values back to check it, "
        "and the break goes"
    ),
}


def avoided_by_argument(library: str) -> str:
    """The fix for a break at ``library`` (``torch/nn/modules/transformer.py:1249``, as a break names its
    place) where it is inside a torch function an argument of the user's call skips; '' elsewhere."""
    m = re.fullmatch(r"torch/(?P<path>.+\.py):(?P<line>\d+)", library)
    folder = torch_folder()
    if m is None or not folder:
        return ""
    path = f"{folder}/{m['path']}"
    for n in range(int(m["line"]), max(int(m["line"]) - 200, 0), -1):  # the def the line is in
        if d := re.match(r"\s*def (\w+)\(", linecache.getline(path, n)):
            return _AVOIDED.get(d[1], "")
    return ""
