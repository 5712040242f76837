"""How a GenerationSession hooks into a transformers model: the shape signature of each forward, masks
that are never dropped, and a private code object per session for Dynamo to compile."""

from __future__ import annotations

import itertools
from typing import Any

from tpu_lab.compile.generation.signature import ShapeSignature

_session_ids = itertools.count(1)


def signature_of(kwargs: dict[str, Any], phase: str | None) -> ShapeSignature:
    """The shape signature of one forward call's keyword arguments."""
    ids = kwargs.get("input_ids")
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    batch, length = (int(ids.shape[0]), int(ids.shape[1])) if ids is not None else (0, 0)
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    layers = getattr(cache, "layers", None)
    cache_len = getattr(layers[0], "max_cache_len", None) if layers else getattr(cache, "max_cache_len", None)
    mask = kwargs.get("attention_mask")
    has_mask = all(v is not None for v in mask.values()) if isinstance(mask, dict) else mask is not None
    return ShapeSignature(phase or ("prefill" if length > 1 else "decode"), batch, length, cache_len, has_mask)


def keep_attention_masks(model: Any) -> Any:
    """Make generate always pass a mask tensor, so a prompt that fills its bucket exactly (no padding)
    gets the same graph as a padded one instead of a second, mask-less graph. Returns the undo.

    transformers drops the prefill mask when nothing is padded (SDPA's is_causal is then enough). Only
    in that case the mask is rebuilt with ``allow_is_causal_skip=False``; every other call is untouched."""
    if getattr(type(model), "create_masks_for_generate", None) is not None or "create_masks_for_generate" in vars(
        model
    ):
        return lambda: None  # the model builds its own masks: leave it alone
    from transformers import masking_utils as mu

    rebuild = {"full_attention": mu.create_causal_mask, "sliding_attention": mu.create_sliding_window_causal_mask}

    def masks_never_dropped(
        config: Any, inputs_embeds: Any, attention_mask: Any, cache: Any, position_ids: Any = None, **kwargs: Any
    ) -> Any:
        masks = mu.create_masks_for_generate(config, inputs_embeds, attention_mask, cache, position_ids, **kwargs)
        if attention_mask is None or not isinstance(masks, dict) or all(v is not None for v in masks.values()):
            return masks
        text_config = config.get_text_config()
        return {
            kind: rebuild[kind](
                text_config, inputs_embeds, attention_mask, cache, position_ids, allow_is_causal_skip=False
            )
            if mask is None and kind in rebuild
            else mask
            for kind, mask in masks.items()
        }

    model.create_masks_for_generate = masks_never_dropped
    return lambda: vars(model).pop("create_masks_for_generate", None)


def private_copy(fn: Any) -> Any:
    # Dynamo caches graphs, and counts its recompile limit, per code object. A code object of our own
    # keeps each session's counts its own, even for two models of the same class.
    def forward(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    forward.__code__ = forward.__code__.replace(co_name=f"tpu_lab_forward_{next(_session_ids)}")
    return forward
