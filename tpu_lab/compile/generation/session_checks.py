"""What ``GenerationSession`` checks before anything compiles or generates: that the model is a
transformers model, the backend exists, the recompile limit is a count, prompts are valid token ids, and
every shape fits both the model's position limit and this device's memory (estimated up front, so a
bucket of a million tokens is refused in milliseconds instead of failing after minutes or swapping)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpu_lab._checks import positive_int
from tpu_lab.errors import InvalidArgument

COMPILE_PHASES = {"all": ("prefill", "decode"), "decode": ("decode",), "none": ()}
# Refuse shapes whose estimated memory exceeds this share of the device's (or host's) memory.
MEMORY_SHARE = 0.9


def check_session_args(model: Any, tokenizer: Any, compile: Any, backend: Any, recompile_limit: Any) -> None:
    if not all(hasattr(model, a) for a in ("generate", "parameters", "config")):
        raise InvalidArgument(
            f"model is a {type(model).__name__}, not a transformers model with generate().",
            fix="Pass the model from tl.load_model(...) (or AutoModelForCausalLM.from_pretrained(...)).",
        )
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise InvalidArgument(
            "The tokenizer has no pad token, so prompts cannot be padded to a bucket.",
            fix="Set one before creating the session: tokenizer.pad_token = tokenizer.eos_token.",
        )
    if not isinstance(compile, str) or compile not in COMPILE_PHASES:
        raise InvalidArgument(f"compile={compile!r} is not a mode.", fix=f"Use one of: {', '.join(COMPILE_PHASES)}.")
    if recompile_limit is not None:
        positive_int(recompile_limit, "recompile_limit", example=64)
    if backend is None or callable(backend):
        return
    import torch._dynamo

    known = set(torch._dynamo.list_backends(exclude_tags=())) | {"tpu"}
    if not isinstance(backend, str) or backend not in known:
        raise InvalidArgument(
            f"backend={backend!r} is not a torch.compile backend here.",
            fix="Use None (the device's default), or one of: aot_eager, eager, inductor (tpu on a TPU).",
        )


def token_ids(prompt: Any, vocab_size: int | None) -> list[int]:
    """A prompt given as token ids: a non-empty sequence of ints in [0, vocab_size)."""
    if prompt is None or isinstance(prompt, (bytes, dict)) or not isinstance(prompt, Sequence):
        raise InvalidArgument(
            f"A prompt must be text or a list of token ids, got {type(prompt).__name__}.",
            fix='Pass a str ("The French Bread Law states") or a list of ints.',
        )
    ids = list(prompt)
    if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise InvalidArgument("A prompt must be text or a list of token ids.", fix="Pass a str or a list of ints.")
    bad = [i for i in ids if i < 0 or (vocab_size is not None and i >= vocab_size)]
    if bad:
        raise InvalidArgument(
            f"Token ids {bad[:5]} are outside this model's vocabulary (0 to {vocab_size - 1 if vocab_size else '?'}).",
            cause="ids from another tokenizer, or negative padding values",
            fix="Encode the prompt with this model's tokenizer, or pass the text itself.",
        )
    return ids


def check_fits(model: Any, length: int, what: str, device: str) -> None:
    """Refuse a sequence ``length`` beyond the model's positions or this device's memory (estimated)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and length > limit:
        raise InvalidArgument(
            f"{what} needs {length} positions, beyond this model's max_position_embeddings={limit}.",
            cause="positions past the limit have no trained embedding (or rotary range): output degrades or fails",
            fix=f"Keep buckets, max_cache_len and prompt + max_new_tokens at or below {limit}.",
        )
    need = _bytes_needed(config, length, next(model.parameters()).element_size())
    have = _memory_bytes(device)
    if need and have and need > MEMORY_SHARE * have:
        raise InvalidArgument(
            f"{what} ({length} tokens) needs about {need / 2**30:.1f} GiB (static cache and attention scores), "
            f"more than this {device} has ({have / 2**30:.1f} GiB).",
            fix="Use smaller buckets, a smaller max_cache_len or fewer max_new_tokens.",
        )


def _bytes_needed(config: Any, length: int, itemsize: int) -> int:
    heads = getattr(config, "num_attention_heads", None) or 0
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or (getattr(config, "hidden_size", 0) // max(heads, 1))
    layers = getattr(config, "num_hidden_layers", None) or 0
    cache = 2 * layers * kv_heads * head_dim * length * itemsize  # keys and values, every layer
    scores = heads * length * length * itemsize  # one layer's prefill attention scores
    return cache + scores


def _memory_bytes(device: str) -> int | None:
    if device == "cuda":
        import torch

        return torch.cuda.mem_get_info()[1]
    if device == "tpu":
        from tpu_lab.host.chips import scan_tpu_chips

        hbm = scan_tpu_chips().hbm_gib_per_chip
        return hbm * 2**30 if hbm else None
    from tpu_lab.host.memory import memory_gib

    gib = memory_gib()
    return int(gib * 2**30) if gib else None
