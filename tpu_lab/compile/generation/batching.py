"""One generate call's batch: prompts checked and tokenised, rows left-padded to one length and filled up
to a batch bucket with masked filler rows that stop at once, and each row's new tokens cut apart again.
Rows never see each other (attention and the cache are per row), so greedy tokens equal generating each
prompt alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpu_lab.compile.generation.session_checks import token_ids
from tpu_lab.errors import InvalidArgument

Prompt = str | Sequence[int]


def as_prompts(
    prompt: Prompt | Sequence[Prompt], tokenizer: Any, vocab_size: int | None = None
) -> tuple[list[tuple[str, list[int]]], bool]:
    """(text, token ids) per prompt, and whether a single prompt was given (not a list of them).

    A ``str`` or a list of ints is one prompt; a list of strs, or a list of lists of ints, is a batch.
    Token ids must lie in ``[0, vocab_size)``."""
    if isinstance(prompt, (bytes, bytearray)):
        raise InvalidArgument(
            "A prompt must be text or a list of token ids, got bytes.", fix="Decode it first: data.decode('utf-8')."
        )
    if isinstance(prompt, str) or (isinstance(prompt, Sequence) and prompt and all(isinstance(p, int) for p in prompt)):
        return [_one(prompt, tokenizer, None, vocab_size)], True  # type: ignore[arg-type]
    if not isinstance(prompt, Sequence):
        raise InvalidArgument(
            f"A prompt must be text, a list of token ids, or a list of either; got {type(prompt).__name__}.",
            fix="Pass a str, a list of ints, or a list of strs (a batch).",
        )
    if not prompt:
        raise InvalidArgument("The list of prompts is empty.", fix="Pass at least one prompt, e.g. ['Hello'].")
    kinds = {"text" if isinstance(p, str) else "ids" for p in prompt}
    if len(kinds) > 1:
        raise InvalidArgument(
            "The list mixes text prompts and token-id prompts.",
            fix="Pass only strs, or only lists of ints (tokenizer(text)['input_ids'] turns text into ids).",
        )
    return [_one(p, tokenizer, i, vocab_size) for i, p in enumerate(prompt)], False


def _one(prompt: Any, tokenizer: Any, index: int | None, vocab_size: int | None) -> tuple[str, list[int]]:
    where = "" if index is None else f" (prompt {index} of the list)"
    if isinstance(prompt, str):
        if not prompt.strip():
            raise InvalidArgument(
                f"The prompt is empty{where}.", fix="Pass some text, e.g. 'The French Bread Law states'."
            )
        return prompt, tokenizer(prompt, return_tensors="pt")["input_ids"][0].tolist()
    if not isinstance(prompt, Sequence) or any(isinstance(i, bool) or not isinstance(i, int) for i in prompt):
        raise InvalidArgument(
            f"A prompt must be text or a list of token ids{where}.", fix="Pass a str or a list of ints."
        )
    if not prompt:
        raise InvalidArgument(f"The prompt {list(prompt)!r} has no tokens{where}.", fix="Pass some text.")
    return f"<{len(prompt)} token ids>", token_ids(prompt, vocab_size)  # not decoded: callers with ids have the text


def check_cache_fits(prompts: int, longest: int, padded: int, max_new: int, max_cache_len: int | None) -> None:
    """Refuse a call whose padded prompt plus new tokens would overflow the fixed static cache."""
    if max_cache_len is None or padded + max_new <= max_cache_len:
        return
    which = "The prompt" if prompts == 1 else f"The longest of these {prompts} prompts"
    raise InvalidArgument(
        f"{which} ({longest} tokens, padded to {padded}) plus max_new_tokens={max_new} does not fit "
        f"max_cache_len={max_cache_len}.",
        cause=None if prompts == 1 else "every row of a batch is padded to its longest prompt's bucket",
        fix=f"Shorten the prompt or max_new_tokens, generate the longest prompt on its own, or create the "
        f"session with max_cache_len >= {padded + max_new}.",
    )


def padded_inputs(rows: Sequence[list[int]], length: int, batch: int, pad_id: int, filler_id: int) -> tuple[Any, Any]:
    """input_ids and attention_mask of ``batch`` rows of ``length``: each prompt left-padded, then filler
    rows masked out but for one real token at the end (a zero in the mask's last column reads as right
    padding to transformers, and a fully masked row can turn attention into NaNs)."""
    import torch

    fill = batch - len(rows)
    ids = [[pad_id] * (length - len(r)) + r for r in rows] + [[pad_id] * (length - 1) + [filler_id]] * fill
    mask = [[0] * (length - len(r)) + [1] * len(r) for r in rows] + [[0] * (length - 1) + [1]] * fill
    return torch.tensor(ids), torch.tensor(mask)


def generate_options(
    pad_id: int, max_new_tokens: int, max_cache_len: int | None, kwargs: dict[str, Any], real: int, batch: int
) -> dict[str, Any]:
    """``model.generate`` arguments: greedy, a static cache (of ``max_cache_len`` when fixed), no
    auto-compile (the session compiles forward itself), then the caller's ``kwargs``, then a criterion
    that stops the filler rows."""
    gen: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "do_sample": False,
        "cache_implementation": "static",
        "pad_token_id": pad_id,
        "disable_compile": True,
    }
    if max_cache_len is not None:
        gen["max_cache_len"] = max_cache_len
    gen.update(kwargs)
    if batch > real:
        gen["stopping_criteria"] = [*gen.get("stopping_criteria", []), stop_filler_rows(real, batch)]
    return gen


def stop_filler_rows(real: int, batch: int) -> Any:
    """A stopping criterion that marks filler rows finished from the first step, so generate stops as soon
    as every real prompt has (their later tokens are padding and never returned)."""
    import torch
    from transformers import StoppingCriteria

    done = torch.tensor([False] * real + [True] * (batch - real))

    class FillerRowsDone(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return done.to(input_ids.device)

    return FillerRowsDone()


def new_tokens(row: list[int], eos: set[int]) -> list[int]:
    """A row's generated tokens up to and including its first end-of-sequence token: what generating it
    alone returns (in a batch, a finished row continues with padding until every row is done)."""
    for i, token in enumerate(row):
        if token in eos:
            return row[: i + 1]
    return row


def eos_ids(value: Any) -> set[int]:
    """generation_config.eos_token_id (an int, a list, or None) as a set."""
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, (list, tuple)) else {int(value)}
