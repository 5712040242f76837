"""What ``GenerationSession`` checks before anything compiles or generates: that the model is a
transformers model, the backend exists, the recompile limit is a count, prompts are valid token ids, and
every shape fits both the model's position limit and this device's memory (estimated up front, so a
bucket of a million tokens is refused in milliseconds instead of failing after minutes or swapping)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tpu_lab._checks import _short, boolean, number_in, positive_int
from tpu_lab.compile.buckets.buckets import validate_buckets
from tpu_lab.errors import InvalidArgument, TpuLabError

COMPILE_PHASES = {"all": ("prefill", "decode"), "decode": ("decode",), "none": ()}
# Refuse shapes whose estimated memory exceeds this share of the device's (or host's) memory.
MEMORY_SHARE = 0.9
# generate() options the session sets itself, and why passing them cannot work.
SESSION_OWNED = {
    "input_ids": "the session makes input_ids from the prompt (pass token ids as the prompt itself)",
    "inputs": "the session makes input_ids from the prompt (pass token ids as the prompt itself)",
    "attention_mask": "the session makes the mask when it pads prompts to a bucket",
    "past_key_values": "the session's static cache is made fresh for each call",
    "cache_implementation": "the session always uses a static cache: fixed shapes are what it is for",
    "max_cache_len": "the cache length is the session's (set when it is created, or by set_buckets)",
    "max_length": "it counts the prompt too, and the session's max_new_tokens overrides it",
    "num_return_sequences": "the session returns one record per prompt (rows past the batch would be lost)",
}
# name -> bounds for number_in (None allowed: transformers' "use the default")
SAMPLING: dict[str, dict[str, Any]] = {
    "temperature": {"above": 0, "example": "0.7"},
    "top_p": {"above": 0, "at_most": 1, "example": "0.9"},
    "min_p": {"at_least": 0, "at_most": 1, "example": "0.05"},
    "typical_p": {"above": 0, "at_most": 1, "example": "0.95"},
}


def check_session_args(model: Any, tokenizer: Any, compile: Any, backend: Any, recompile_limit: Any) -> None:
    if not all(hasattr(model, a) for a in ("generate", "parameters", "config")):
        raise InvalidArgument(
            f"model is a {type(model).__name__}, not a transformers model with generate().",
            fix="Pass the model from tl.load_model(...) (or AutoModelForCausalLM.from_pretrained(...)).",
        )
    if not callable(tokenizer) or not hasattr(tokenizer, "encode"):
        raise InvalidArgument(
            f"tokenizer={_short(tokenizer)} ({type(tokenizer).__name__}) is not a tokenizer.",
            fix="Pass the tokenizer from tl.load_model(...) (or AutoTokenizer.from_pretrained(...)).",
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


def check_open(model: Any, session: Any, name: str = "The session") -> None:
    """Refuse a closed session: its model no longer runs through it, so nothing would be counted."""
    owner = getattr(model.forward, "__self__", None)
    if owner is session:
        return
    state = (
        "was replaced: another GenerationSession took over its model"
        if isinstance(owner, type(session))  # another session of the same class
        else "is closed"
    )
    raise InvalidArgument(
        f"{name} {state}, so it no longer sees the model's forward passes and cannot count compiles.",
        cause="a with block that ended, a close() call, or a newer session on the same model",
        fix="Create a new session: tl.GenerationSession(model, tokenizer, ...).",
    )


def bucket_list(value: Any, name: str) -> tuple[int, ...] | None:
    """None, or a list of sizes as strictly increasing ints (one number or a str is not a list)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgument(
            f"{name}={_short(value)} is not a list of sizes.", fix=f"Pass e.g. {name}=[16, 32, 64], or None for none."
        )
    return validate_buckets(value, name)


def check_generate_options(kwargs: dict[str, Any], max_new_tokens: int) -> None:
    """The generate() options the session can pass on: none it sets itself, sampling values that can
    work (finite, in range), and sampling options only together with do_sample=True."""
    for key, why in SESSION_OWNED.items():
        if key in kwargs and not (key == "num_return_sequences" and kwargs[key] in (None, 1)):
            more = "; for several samples, call generate once per sample" if key == "num_return_sequences" else ""
            raise InvalidArgument(
                f"{key}={_short(kwargs[key])} cannot be passed to session.generate(): {why}.",
                fix=f"Leave {key} out{more}.",
            )
    max_new = positive_int(kwargs.get("max_new_tokens", max_new_tokens), "max_new_tokens")
    if "do_sample" in kwargs:
        boolean(kwargs["do_sample"], "do_sample")
    for key, bounds in SAMPLING.items():
        if kwargs.get(key) is not None:
            number_in(kwargs[key], key, **bounds)
    for key, minimum, example in (("top_k", 0, 50), ("num_beams", 1, 4), ("min_new_tokens", 0, 4)):
        if kwargs.get(key) is not None:
            positive_int(kwargs[key], key, example=example, minimum=minimum)
    if (kwargs.get("min_new_tokens") or 0) > max_new:
        raise InvalidArgument(
            f"min_new_tokens={kwargs['min_new_tokens']} is more than max_new_tokens={max_new}.",
            fix=f"Use min_new_tokens <= {max_new}, or raise max_new_tokens.",
        )
    if kwargs.get("repetition_penalty") is not None:
        number_in(kwargs["repetition_penalty"], "repetition_penalty", above=0, example="1.1")
    sampling = [k for k in (*SAMPLING, "top_k") if kwargs.get(k) is not None]
    if sampling and kwargs.get("do_sample") is not True:
        name = sampling[0]
        raise InvalidArgument(
            f"{name}={_short(kwargs[name])} has no effect: the session decodes greedily unless do_sample=True.",
            fix=f"Pass do_sample=True with it to sample, or leave {name} out for greedy decoding.",
        )


@contextmanager
def options_refused(kwargs: dict[str, Any]) -> Iterator[None]:
    """A ValueError or TypeError from model.generate that names an option you passed becomes an
    InvalidArgument naming it (a misspelt option, a value or combination transformers refuses)."""
    try:
        yield
    except TpuLabError:
        raise
    except (ValueError, TypeError) as e:
        named = [k for k in kwargs if k in str(e)]
        if not named:
            raise
        passed = ", ".join(f"{k}={_short(kwargs[k])}" for k in named)
        raise InvalidArgument(
            f"model.generate refused {passed}: {e}",
            cause="a misspelt option, or a value or combination of options transformers cannot use",
            fix="Check the option against transformers' GenerationConfig documentation, or leave it out.",
        ) from e
