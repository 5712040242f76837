"""What one ``GenerationSession.generate`` call did: shapes, compiles by phase and why, and what it cost."""

from __future__ import annotations

from dataclasses import dataclass

from tpu_lab.compile.signature import ShapeSignature


@dataclass(frozen=True)
class GenerationRecord:
    """One ``generate`` call: shapes, compiles by phase and why, and what it cost."""

    prompt: str
    """The prompt text (``"<N token ids>"`` for a prompt given as token ids)."""
    prompt_tokens: int
    """Tokens in the prompt before padding."""
    padded_length: int
    """Tokens after left-padding to the bucket (= prompt_tokens without buckets)."""
    bucket: int | None
    """The bucket used, None without buckets."""
    prefill: ShapeSignature
    """The prefill forward's shape signature."""
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
    """New tokens per wall second."""
    text: str
    """The generated text (prompt excluded)."""
    token_ids: tuple[int, ...]
    """The generated token ids."""
    limit_hit: bool = False
    """Dynamo's recompile limit was hit: some forwards ran uncompiled."""
    warmup: bool = False

    @property
    def compiles(self) -> int:
        return self.compiles_prefill + self.compiles_decode
