"""A few seconds of training for the tiny models, so a lesson prompt continues in English.

Random weights write byte soup that reads like an encoding bug (issue 13). A short next-token training
run over the built-in corpus (deterministic: fixed seed, fixed order, one thread) teaches a 200k-parameter
model the corpus's sentence patterns: "The French Bread Law states" continues "that ...".
"""

from __future__ import annotations

import random
from typing import Any

from tpu_lab.models.corpus import sentences

STEPS = 150
BATCH = 16
WINDOW = 32
LEARNING_RATE = 1e-2
SEED = 0


def corpus_ids(tokenizer: Any) -> list[int]:
    """The corpus as one token stream, sentences shuffled once (the same every build), joined by spaces
    the way ``models.workload`` joins them for prompts."""
    text = list(sentences())
    random.Random(SEED).shuffle(text)
    return tokenizer.encode(" ".join(text), add_special_tokens=False)


def train_briefly(model: Any, tokenizer: Any, *, steps: int = STEPS) -> float:
    """Train ``model`` in place on random windows of the corpus; return the last batch's loss."""
    import torch

    data = torch.tensor(corpus_ids(tokenizer))
    generator = torch.Generator().manual_seed(SEED)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LEARNING_RATE, total_steps=steps, pct_start=0.1)
    threads = torch.get_num_threads()
    # One thread: faster for a model this small (measured: 0.02 s/step vs 0.4 s/step with 2 threads on a
    # loaded 2-core machine) and the same result on any machine's thread count.
    torch.set_num_threads(1)
    model.train()
    try:
        loss = torch.tensor(float("nan"))
        for _ in range(steps):
            starts = torch.randint(0, len(data) - WINDOW - 1, (BATCH,), generator=generator)
            batch = torch.stack([data[i : i + WINDOW] for i in starts.tolist()])
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
    finally:
        model.eval()
        torch.set_num_threads(threads)
    return loss.item()


def unprintable_token_ids(tokenizer: Any, vocab_size: int) -> list[int]:
    """Token ids whose decoded text is not whole characters: the lone bytes >= 0x80 of the byte-level
    alphabet (half a UTF-8 character, shown as U+FFFD) and the padding ids past the tokenizer's vocabulary.
    The corpus is ASCII, so no merged token contains them; suppressing them keeps generated text printable."""
    bad = [i for i in range(len(tokenizer)) if "\ufffd" in tokenizer.decode([i])]
    return bad + list(range(len(tokenizer), vocab_size))
