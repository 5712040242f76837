"""The shape signature of one model forward: what a graph compiled with ``dynamic=False`` specialises on."""

from __future__ import annotations

from typing import NamedTuple


class ShapeSignature(NamedTuple):
    """What a compiled forward specialises on (with ``dynamic=False``, each new one is a new graph).

    ``phase``: "prefill" (the prompt) or "decode" (one token at a time); ``length``: tokens in this
    forward (the padded prompt for prefill, 1 for decode); ``cache``: static cache length (None without
    one); ``mask``: whether an attention-mask tensor was passed (None is a different graph). A NamedTuple,
    not a dataclass: one is built and hashed for every forward, on the hot path.
    """

    phase: str
    batch: int
    length: int
    cache: int | None
    mask: bool

    def __str__(self) -> str:
        cache = f" cache={self.cache}" if self.cache is not None else ""
        return f"{self.phase} {self.batch}x{self.length}{cache}" + ("" if self.mask else " no-mask")
