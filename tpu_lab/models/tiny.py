"""Tiny, real checkpoints built offline: config + a locally trained tokenizer + weights trained for a few
seconds on the built-in corpus (``tiny_train``), so prompts continue in English; ``trained=False`` keeps
the deterministic random weights, for lessons that need shapes only.

CI, Binder and workshops without internet load them through the same ``from_pretrained`` code a hub
model goes through. Builds are cached by their arguments and written atomically: a checkpoint is built
in a temporary sibling folder and renamed into place only when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpu_lab._checks import boolean, mapping
from tpu_lab.errors import EnvironmentProblem, InvalidArgument, ModelBuildError
from tpu_lab.models.tiny_cache import MARKER, _digests, _is_legacy, _lock, _matches, _remove_stale_staging

CACHE_ENV = "TPU_LAB_CACHE"
# Bump when the recipe changes so old cached checkpoints are not reused.
RECIPE_VERSION = 2  # 2: weights trained briefly on the corpus; unprintable tokens suppressed
ARCHS = {"qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "llama": ("LlamaConfig", "LlamaForCausalLM")}
SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "head_dim": 16,
    "max_position_embeddings": 1024,
}
TOKENIZER_VOCAB = 1000
EOS, PAD = "<|endoftext|>", "<|pad|>"


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where tpu_lab caches tiny models: ``$TPU_LAB_CACHE`` or the user cache dir."""
    environ = os.environ if environ is None else mapping(environ, "environ", example='{"TPU_LAB_CACHE": "/tmp/c"}')
    value = environ.get(CACHE_ENV)
    if value is None:
        import platformdirs

        return Path(platformdirs.user_cache_dir("tpu_lab"))
    if not value.strip():
        raise EnvironmentProblem(
            f"{CACHE_ENV} is set but empty.",
            cause="an export with no value, e.g. `export TPU_LAB_CACHE=`",
            fix=f"Set {CACHE_ENV} to a writable directory, or unset it to use the user cache directory.",
        )
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise EnvironmentProblem(
            f"{CACHE_ENV}={value!r} points to a file, not a directory.",
            fix=f"Set {CACHE_ENV} to a directory (it is created if missing), or unset it.",
        )
    return path


def tiny_model(
    path: str | os.PathLike | None = None,
    *,
    arch: str = "qwen3",
    kv_heads: int | None = None,
    tie_embeddings: bool = False,
    trained: bool = True,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Build (or reuse) a tiny causal LM checkpoint and return its folder.

    ``arch``: "qwen3" or "llama". 64 hidden, 2 layers, 4 attention heads of 16; ``kv_heads`` (1, 2 or 4,
    default 4) sets the key/value heads, e.g. 2 to reproduce the KV-head sharding failure at tp_size=4.
    ``tie_embeddings`` ties the LM head to the input embeddings, like Qwen3-0.6B. ``trained`` (default)
    trains the weights for a few seconds on the built-in corpus so generated text is English; False keeps
    random weights (byte soup as text, same shapes and compile behaviour).
    Without ``path`` the checkpoint is cached under ``$TPU_LAB_CACHE`` (or the user cache dir).
    """
    spec = _validate(arch, kv_heads, tie_embeddings, trained)
    root: Path | None = None
    if path is None:
        root = cache_dir(environ) / "models"
        target = root / _cache_key(spec)
    elif isinstance(path, (str, os.PathLike)) and os.fspath(path):
        target = Path(path)
    else:
        raise InvalidArgument(
            f"path={path!r} is not a folder path.", fix="Pass a str or pathlib.Path, or None for the cache."
        )
    if _matches(target, spec, root):
        return target
    if root is not None and _is_legacy(target, spec):
        shutil.rmtree(target)  # built before the marker recorded file digests: rebuild rather than trust it
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidArgument(
            f"{target} already exists and is not a tiny model built with {spec}.",
            fix="Pass an empty or new folder, or delete this one.",
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(target.parent, "." if root is not None else f".{target.name}.")
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        building = _lock(staging)  # held until the build ends: a live build's folder is never "stale"
    except OSError as e:
        raise ModelBuildError(
            f"Cannot write a tiny model to {target}: {e.strerror or e}.",
            cause="the folder (or one above it) is read-only, is a file, or the disk is full",
            fix=f"Pass a writable path, or set {CACHE_ENV} to a writable directory.",
        ) from e
    from safetensors import SafetensorError  # how safetensors reports a failed write (a full disk)

    try:
        _build(staging, spec)
        (staging / MARKER).write_text(json.dumps({**spec, "files": _digests(staging)}, sort_keys=True))
        if target.exists():
            target.rmdir()  # empty (checked above); os.replace cannot replace a directory
        os.replace(staging, target)
    except (OSError, SafetensorError) as e:
        if not _matches(target, spec, root):  # else another process finished the same build first
            raise ModelBuildError(
                f"Writing the tiny model to {target} failed: {e}.",
                cause="the disk is full or the folder is not writable",
                fix=f"Free disk space or pass a writable path / set {CACHE_ENV}.",
            ) from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        os.close(building)
    return target


def _validate(arch: str, kv_heads: int | None, tie_embeddings: bool, trained: bool = True) -> dict:
    if not isinstance(arch, str) or arch not in ARCHS:
        raise InvalidArgument(f"Unknown arch {arch!r}.", fix=f"Use one of: {', '.join(sorted(ARCHS))}.")
    heads = SHAPE["num_attention_heads"]
    kv = heads if kv_heads is None else kv_heads
    if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or heads % kv:
        raise InvalidArgument(
            f"kv_heads={kv_heads!r} does not work with {heads} attention heads.",
            cause="grouped-query attention needs the attention heads to be a multiple of the KV heads",
            fix=f"Use one of: {', '.join(str(d) for d in range(1, heads + 1) if heads % d == 0)}.",
        )
    boolean(tie_embeddings, "tie_embeddings")
    boolean(trained, "trained")
    return {
        "arch": arch,
        "kv_heads": kv,
        "tie_embeddings": tie_embeddings,
        "trained": trained,
        "recipe": RECIPE_VERSION,
    }


def _cache_key(spec: dict) -> str:
    tied = "tied" if spec["tie_embeddings"] else "untied"
    random = "" if spec["trained"] else "-random"
    return f"{spec['arch']}-kv{spec['kv_heads']}-{tied}{random}-r{spec['recipe']}"


def _build(folder: Path, spec: dict) -> None:
    import torch
    import transformers

    from tpu_lab.models.tiny_train import train_briefly, unprintable_token_ids

    tokenizer = train_tokenizer()
    config = _config(spec, tokenizer)
    vocab = config.vocab_size
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    if spec["trained"]:
        train_briefly(model, tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    # Half a UTF-8 character decodes to U+FFFD, which reads like an encoding bug: never generate one.
    model.generation_config.suppress_tokens = unprintable_token_ids(tokenizer, vocab)
    bars = transformers.utils.logging
    was_enabled = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()  # a "Writing model shards" bar for a 200 KB file is noise
    try:
        model.save_pretrained(folder)
    finally:
        if was_enabled:
            bars.enable_progress_bar()
    tokenizer.save_pretrained(folder)


def _config(spec: dict, tokenizer: Any) -> Any:
    import transformers

    config_cls, _ = ARCHS[spec["arch"]]
    return getattr(transformers, config_cls)(
        **SHAPE,
        num_key_value_heads=spec["kv_heads"],
        vocab_size=-(-len(tokenizer) // 64) * 64,  # a multiple of 64 shards evenly at any tp_size up to 64
        tie_word_embeddings=spec["tie_embeddings"],
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def tiny_config_folder(
    *,
    arch: str = "qwen3",
    kv_heads: int | None = None,
    tie_embeddings: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """A folder whose config.json is the tiny model's, for checks that read only the config (the
    preflight): the built checkpoint when it is cached, else a config written in a fraction of a second
    (the tokenizer is trained for its size; no weights are made or trained)."""
    spec = _validate(arch, kv_heads, tie_embeddings)
    root = cache_dir(environ) / "models"
    built = root / _cache_key(spec)
    if _matches(built, spec, root):
        return built
    target = root / f"{_cache_key(spec)}-config-only"
    if (target / "config.json").is_file():  # the key names the recipe: a config written once stays right
        return target
    try:
        target.mkdir(parents=True, exist_ok=True)
        partial = target / f".config.json.{os.getpid()}"
        partial.write_text(_config(spec, train_tokenizer()).to_json_string())
        os.replace(partial, target / "config.json")  # never a half-written config.json
    except OSError as e:
        raise ModelBuildError(
            f"Cannot write a tiny model's config to {target}: {e.strerror or e}.",
            cause="the folder (or one above it) is read-only, is a file, or the disk is full",
            fix=f"Set {CACHE_ENV} to a writable directory.",
        ) from e
    return target


def train_tokenizer():
    """The byte-level BPE tokenizer every tiny checkpoint ships, trained offline on tpu_lab's own corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from tpu_lab.models.corpus import sentences

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sentences(), trainer=trainer)
    # Left padding: decoder-only generation pads on the left so the last position is the real token.
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, padding_side="left")
