"""A small built-in English corpus to train the tiny models' tokenizer offline (deterministic)."""

from __future__ import annotations

from collections.abc import Iterator

SUBJECTS = [
    "The French Bread Law",
    "A tensor processing unit",
    "The compiler",
    "Every notebook",
    "The model",
    "A static cache",
    "The tokenizer",
    "Each process",
    "The baker",
    "A workshop teacher",
    "The researcher",
    "An engineer",
    "The attention layer",
    "The key value cache",
    "A shape bucket",
    "The launcher",
]
VERBS = [
    "states that",
    "shows that",
    "explains why",
    "decides when",
    "measures how",
    "reports that",
    "predicts where",
    "checks whether",
    "remembers that",
    "learns how",
]
OBJECTS = [
    "a farmer can sell bread at a fair price",
    "every new input shape triggers a compilation",
    "the graph stays stable when inputs stay on the CPU",
    "each chip runs one process",
    "the heads must divide evenly across the ranks",
    "tied weights share one tensor",
    "the prompt is padded on the left to the next bucket",
    "the cached call is much faster",
    "the market price depends on the harvest",
    "the first token arrives after the prefill",
    "twenty prompts of different lengths cost twenty graphs",
    "the kernel already holds the device",
]
EXTRA = [
    "Hello world! How are you today? I am fine, thank you.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048.",
    "def generate(prompt, max_new_tokens=8): return model(prompt)",
    "Once upon a time, in a small village, there lived a baker who loved bread.",
    "Questions, answers; lists: apples, oranges, pears. Quotes: \"yes\" and 'no'.",
]


def sentences() -> Iterator[str]:
    """About two thousand sentences, always in the same order."""
    yield from EXTRA
    for i, subject in enumerate(SUBJECTS):
        for j, verb in enumerate(VERBS):
            for k, obj in enumerate(OBJECTS):
                end = ".!?"[(i + j + k) % 3]
                yield f"{subject} {verb} {obj}{end}"
