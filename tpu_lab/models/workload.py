"""Prompts of exact token lengths, for demos and benchmarks: real text from the built-in corpus."""

from __future__ import annotations

import random
from typing import Any

from tpu_lab.models.corpus import sentences


def prompt_ids(tokenizer: Any, length: int, *, offset: int = 0) -> list[int]:
    """``length`` token ids of running corpus text, starting ``offset`` sentences in."""
    text = " ".join(list(sentences())[offset % 500 :][:400])
    ids = tokenizer.encode(text, add_special_tokens=False)
    if length > len(ids):
        ids = ids * (length // len(ids) + 1)
    return ids[:length]


def mixed_lengths(*, prompts: int = 40, distinct: int = 20, low: int = 4, high: int = 200, seed: int = 0) -> list[int]:
    """``prompts`` lengths drawn from ``distinct`` values spread over [low, high], in a shuffled order."""
    step = (high - low) / max(distinct - 1, 1)
    values = sorted({round(low + i * step) for i in range(distinct)})
    lengths = [values[i % len(values)] for i in range(prompts)]
    random.Random(seed).shuffle(lengths)
    return lengths


def mixed_workload(tokenizer: Any, lengths: list[int]) -> list[list[int]]:
    """One prompt (token ids) per length, each from a different place in the corpus."""
    return [prompt_ids(tokenizer, n, offset=i * 37) for i, n in enumerate(lengths)]
