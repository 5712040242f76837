"""A model's config and its skeleton on the meta device (no weights, no memory), for the preflight: from a
transformers config, a checkpoint folder, a hub id or ``tiny:<arch>``, with custom code refused unless
trusted and every failure a tpu_lab error."""

from __future__ import annotations

import copy
import os
from typing import Any

from tpu_lab._checks import name_or_path
from tpu_lab.errors import InvalidArgument


def load_config(name_or_config: Any, trust_remote_code: bool) -> Any:
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(name_or_config, PretrainedConfig):
        return name_or_config
    if not isinstance(name_or_config, (str, os.PathLike)):
        raise InvalidArgument(
            f"Cannot read a model config from {type(name_or_config).__name__}.",
            fix="Pass a transformers config, a checkpoint folder, a hub id or 'tiny:qwen3'.",
        )
    from tpu_lab.models.checkpoint import resolve_source
    from tpu_lab.models.loading import explain_load_failure

    name = name_or_path(name_or_config, "name_or_config")
    path, _, local_only = resolve_source(name, trust_remote_code=trust_remote_code, config_only=True)
    try:
        return AutoConfig.from_pretrained(path, local_files_only=local_only, trust_remote_code=trust_remote_code)
    except Exception as e:  # an unknown model_type, custom code on the hub, a download that failed
        raise explain_load_failure(e, name, trusted=trust_remote_code) from e


def meta_model(config: Any, trust_remote_code: bool = False) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    small = copy.deepcopy(config)  # one layer is enough: plan keys use * for the layer number
    text = small.get_text_config() if hasattr(small, "get_text_config") else small
    if getattr(text, "num_hidden_layers", 1) > 1:
        text.num_hidden_layers = 1
        if isinstance(getattr(text, "layer_types", None), list):
            text.layer_types = text.layer_types[:1]
    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(small, trust_remote_code=trust_remote_code)
    except (ValueError, KeyError) as e:
        raise InvalidArgument(
            f"{type(config).__name__} does not describe a causal LM transformers can build: {e}",
            fix="Pass the config of a decoder-only language model (e.g. Qwen3, Llama, GLM-4).",
        ) from e
