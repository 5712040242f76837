"""What one ``GenerationSession.generate`` call did for one prompt: shapes (batch included), compiles by
phase and why, and what it cost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpu_lab.compile.generation.signature import ShapeSignature
from tpu_lab.compile.generation.tally import ForwardCall


@dataclass(frozen=True)
class GenerationRecord:
    """One prompt of a ``generate`` call: its shapes, the call's compiles by phase and why, and what it
    cost. Prompts generated together in one batch share the call's fields (compiles, reasons, times):
    count a batch once, or read ``session.total_compiles``."""

    prompt: str
    """The prompt text (``"<N token ids>"`` for a prompt given as token ids)."""
    prompt_tokens: int
    """Tokens in the prompt before padding."""
    padded_length: int
    """Tokens after left-padding: the length bucket of the batch's longest prompt (its length without buckets)."""
    bucket: int | None
    """The length bucket used, None without buckets."""
    prefill: ShapeSignature
    """The prefill forward's shape signature (batch x length)."""
    decode: ShapeSignature | None
    """The decode forwards' signature (None when no token was decoded after the first)."""
    compiles_prefill: int
    compiles_decode: int
    reasons: tuple[str, ...]
    """Why each compile in this call happened, in words."""
    compile_seconds: float
    wall_seconds: float
    ttft_seconds: float
    """Time to first token: the prefill forward, compiles included."""
    new_tokens: int
    tokens_per_second: float
    """This prompt's new tokens per wall second of the call."""
    text: str
    """The generated text (prompt excluded)."""
    token_ids: tuple[int, ...]
    """The generated token ids, up to and including the first end-of-sequence token."""
    limit_hit: bool = False
    """Dynamo's recompile limit was hit: some forwards ran uncompiled."""
    warmup: bool = False
    batch_size: int = 1
    """Prompts generated together in the call (1 for a single prompt)."""
    padded_batch: int = 1
    """Rows the call ran with: ``batch_size`` filled up to the batch bucket with masked filler rows."""
    batch_bucket: int | None = None
    """The batch bucket used, None without batch buckets."""
    row: int = 0
    """This prompt's row in the batch."""

    @property
    def compiles(self) -> int:
        return self.compiles_prefill + self.compiles_decode

    @property
    def batch_shape(self) -> tuple[int, int]:
        """(rows, tokens) of the prefill: ``padded_batch`` x ``padded_length``."""
        return self.padded_batch, self.padded_length


def call_fields(forwards: Sequence[tuple[ForwardCall, str]], wall: float, ttft: float) -> dict[str, Any]:
    """The record fields every prompt of one call shares, from its forwards and why each compiled."""
    calls = [call for call, _ in forwards]
    counts = [sum(not e.limit_hit for e in c.events) for c in calls]
    return {
        "prefill": calls[0].signature,
        "decode": calls[1].signature if len(calls) > 1 else None,
        "compiles_prefill": sum(n for n, c in zip(counts, calls, strict=True) if c.signature.phase == "prefill"),
        "compiles_decode": sum(n for n, c in zip(counts, calls, strict=True) if c.signature.phase == "decode"),
        "reasons": tuple(r for (_, r), n in zip(forwards, counts, strict=True) if r and n),
        "compile_seconds": sum(e.seconds for c in calls for e in c.events if not e.limit_hit),
        "wall_seconds": wall,
        "ttft_seconds": ttft,
        "limit_hit": any(e.limit_hit for c in calls for e in c.events),
    }


def row_records(
    texts: Sequence[str], rows: Sequence[list[int]], news: Sequence[list[int]], tokenizer: Any, shared: dict[str, Any]
) -> list[GenerationRecord]:
    """One record per prompt of a call: its own tokens, and the ``shared`` fields of the call."""
    wall = shared["wall_seconds"]
    return [
        GenerationRecord(
            prompt=text,
            prompt_tokens=len(ids),
            row=i,
            new_tokens=len(new),
            tokens_per_second=len(new) / wall if wall > 0 else 0.0,
            text=tokenizer.decode(new, skip_special_tokens=True),
            token_ids=tuple(new),
            **shared,
        )
        for i, (text, ids, new) in enumerate(zip(texts, rows, news, strict=True))
    ]
