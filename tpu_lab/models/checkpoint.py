"""Before any weights load: where a model name points (a folder, a hub id, ``tiny:<arch>``), whether the
hub is reachable (bounded in time), and whether a checkpoint folder is complete (config, tokenizer,
untruncated safetensors, remote code trusted).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from tpu_lab.errors import HubUnreachable, InvalidArgument, ModelLoadError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")
HUB_CHECK_SECONDS = 5.0
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def resolve_source(
    name: str, *, revision: str | None = None, trust_remote_code: bool = False, config_only: bool = False
) -> tuple[str, str, bool]:
    """``(path_or_id, source, local_files_only)``; checks local folders (only config.json with
    ``config_only``) and hub reachability first."""
    if name.startswith("tiny:"):
        return str(tiny_preset(name)), "tiny", True
    path = Path(name).expanduser()
    if path.exists():
        if config_only and not (path / "config.json").is_file():
            raise ModelLoadError(f"{path} has no config.json.", fix="Pass the folder written by save_pretrained.")
        if not config_only:
            check_checkpoint(path, trust_remote_code=trust_remote_code)
        return str(path), "local", True
    if not HUB_ID.match(name) or name.startswith((".", "~")):
        raise ModelLoadError(
            f"No checkpoint folder at {name!r}.",
            cause="a typo in the path, or the folder was never written",
            fix="Check the path, or build an offline model with tl.tiny_model() (or pass 'tiny:qwen3').",
        )
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "") or not hub_reachable():
        if _in_hub_cache(name, revision):
            return name, "hub cache", True
        raise HubUnreachable(
            f"Cannot download {name!r}: the Hugging Face Hub is not reachable from here and the model is "
            "not in the local hub cache.",
            cause="no network (an offline machine, a firewall, a workshop without internet) or HF_HUB_OFFLINE=1",
            fix="Use a local checkpoint folder, or tl.tiny_model() / 'tiny:qwen3' for an offline model; or "
            "download it where there is a network (hf download NAME) and copy the cache here.",
        )
    return name, "hub", False


def needs_network(name: str) -> bool:
    """Would loading ``name`` download from the hub? True for a hub id that is neither a local folder nor
    in the local hub cache (no network call: a local look-up only)."""
    name = name.strip()
    if not name or name.startswith("tiny:") or Path(name).expanduser().exists() or not HUB_ID.match(name):
        return False
    return not _in_hub_cache(name, None)


def hub_reachable(timeout: float = HUB_CHECK_SECONDS) -> bool:
    """Can a TCP connection to the hub be opened within ``timeout`` seconds? (True behind a proxy.)"""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # the proxy decides; let huggingface_hub try
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or 443
    result: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    # DNS look-ups ignore socket timeouts; a daemon thread bounds the whole check.
    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(result and result[0])


def _in_hub_cache(repo_id: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)


def tiny_preset(name: str) -> Path:
    """``tiny:<arch>[-kv<N>][-tied]`` -> a tiny checkpoint folder (built offline if needed)."""
    from tpu_lab.models.tiny import tiny_model

    match = re.fullmatch(r"tiny:(\w+?)(?:-kv(\d+))?(-tied)?", name)
    if not match:
        raise InvalidArgument(
            f"Cannot read the tiny model name {name!r}.", fix="Use tiny:<arch>[-kv<N>][-tied], e.g. tiny:qwen3-kv2."
        )
    arch, kv, tied = match.groups()
    return tiny_model(arch=arch, kv_heads=int(kv) if kv else None, tie_embeddings=bool(tied))


def check_checkpoint(path: Path, *, trust_remote_code: bool = False) -> None:
    """Catch what would fail after loading started: no config, no tokenizer, remote code, truncated weights."""
    if not path.is_dir():
        raise ModelLoadError(
            f"{path} is a file, not a checkpoint folder.", fix="Pass the folder that holds config.json."
        )
    config_file = path / "config.json"
    if not config_file.exists():
        raise ModelLoadError(
            f"{path} is not a checkpoint: it has no config.json.",
            fix="Pass the folder written by save_pretrained (it holds config.json and the weights).",
        )
    try:
        config = json.loads(config_file.read_text())
    except ValueError as e:
        raise ModelLoadError(
            f"{config_file} is not valid JSON: {e}.", fix="Re-save or re-download the checkpoint."
        ) from e
    if "auto_map" in config and not trust_remote_code:
        raise ModelLoadError(
            f"{path} defines its own model code (auto_map in config.json), which transformers only runs "
            "with trust_remote_code=True.",
            fix="Read the model's Python files, then pass trust_remote_code=True if you trust them.",
        )
    if not any((path / f).exists() for f in TOKENIZER_FILES):
        raise ModelLoadError(
            f"{path} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}).",
            cause="the model was saved without tokenizer.save_pretrained(...)",
            fix=f"Save the tokenizer into the folder: tokenizer.save_pretrained({str(path)!r}).",
        )
    weights = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin"))
    if not weights:
        raise ModelLoadError(
            f"{path} has no weights (*.safetensors or *.bin).", fix="Re-save the model with model.save_pretrained()."
        )
    for file in weights:
        if file.suffix == ".safetensors":
            check_safetensors(file)


def check_safetensors(file: Path) -> None:
    """Raise ModelLoadError when a safetensors file is shorter than its own header says."""
    size = file.stat().st_size
    with open(file, "rb") as fh:
        head = fh.read(8)
        header_len = int.from_bytes(head, "little") if len(head) == 8 else -1
        try:
            header = json.loads(fh.read(header_len)) if 0 <= header_len <= size - 8 else None
        except ValueError:
            header = None
    expected = None
    if header is not None:
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
        expected = 8 + header_len + max(ends, default=0)
    if header is None or expected is None or size < expected:
        have = f"{size:,} bytes" + (f" of the {expected:,} its header promises" if expected else "")
        raise ModelLoadError(
            f"{file} is truncated or corrupt: {have}.",
            cause="an interrupted download or copy, or a full disk while saving",
            fix="Delete the file and download or save the checkpoint again.",
        )
