"""A graph break inside a library's code that the user's own setting avoids: torch's transformer layers read
a mask's values back (``.item()``) to detect a causal mask unless told it is one (an argument of the call);
a model's random skip per layer (LayerDrop) branches on a tensor draw unless its config's probability is 0.
Where the break is such a one, its fix is that setting, never capture_scalar_outputs (the value decides a
branch there, so the setting only moves the break). Text in, a fix out."""

from __future__ import annotations

import linecache
import re

from tpu_lab.compile.sources.packages import torch_folder, unshortened

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


def config_switch(library: str, words: str) -> str:
    """The fix for a data-dependent branch at ``library`` (a file:line as a break names it) whose value
    (``words``: ``computed from line 739: skip = p < self.config.layerdrop``) compares a tensor draw made just
    above with a setting of the model's config: that setting at 0 skips the draw; '' elsewhere."""
    m = re.fullmatch(r"(?P<path>.+\.py):\d+", library)
    origin = re.search(r"computed from line (\d+): .*?\b(\w+)\s*[<>]=?\s*self\.config\.(\w+)", words)
    file = unshortened(m["path"]) if m and origin else ""
    if not (file and origin):
        return ""
    line, drawn, setting = int(origin[1]), origin[2], origin[3]
    above = (linecache.getline(file, n) for n in range(line - 1, max(line - 12, 0), -1))
    if not any(re.match(rf"\s*{drawn}\s*=\s*torch\.rand", text) for text in above):
        return ""
    return (
        f"a random skip per layer (LayerDrop: config.{setting}) draws a tensor and branches on it: set "
        f"model.config.{setting} = 0.0 before the first call ({setting}=0.0 in from_pretrained or the config), so "
        "no draw is made and the layers compile in one graph; keep it above 0 only where that regularisation is "
        "worth the breaks"
    )
