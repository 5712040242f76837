"""Before any weights load: where a model name points (a folder, a hub id, ``tiny:<arch>``), whether the
hub is reachable (bounded in time), and whether a checkpoint folder is complete (config, tokenizer,
untruncated safetensors, remote code trusted).
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import threading
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

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
        return str(tiny_preset(name, config_only=config_only)), "tiny", True
    path = Path(name).expanduser()
    if path.exists():
        if config_only:
            check_config(path, trust_remote_code=trust_remote_code)
        else:
            check_checkpoint(path, trust_remote_code=trust_remote_code)
        return str(path), "local", True
    if looks_like_folder(name):
        raise ModelLoadError(
            f"No checkpoint folder at {name!r} (looked in {Path.cwd()}).",
            cause="a typo in the path, or the folder was never written; a hub id has the form owner/name",
            fix="Check the path, or build an offline model with tl.tiny_model() (or pass 'tiny:qwen3'); for a hub "
            "model give its full id, e.g. 'Qwen/Qwen3-0.6B'.",
        )
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "")
    problem = "HF_HUB_OFFLINE is set" if offline else hub_problem()
    if problem:
        if _in_hub_cache(name, revision):
            return name, "hub cache", True
        raise HubUnreachable(
            f"There is no folder {name!r} here ({Path.cwd()}), and as a hub id it cannot be downloaded: the Hugging "
            f"Face Hub is not reachable from here ({problem}) and the model is not in the local hub cache.",
            cause="no network (an offline machine, a firewall, a workshop without internet), a proxy that does "
            "not answer, or HF_HUB_OFFLINE=1",
            fix="Use a local checkpoint folder, or tl.tiny_model() / 'tiny:qwen3' for an offline model; or "
            "download it where there is a network (hf download NAME) and copy the cache here.",
        )
    return name, "hub", False


def looks_like_folder(name: str) -> bool:
    """A name that can only be a folder (a path, or one word: hub ids are ``owner/name``). A one-word name
    found in the local hub cache (a legacy id such as ``gpt2``) is not one."""
    if not HUB_ID.match(name) or name.startswith((".", "~")):
        return True
    return "/" not in name and not _in_hub_cache(name, None)


def needs_network(name: str) -> bool:
    """Would loading ``name`` download from the hub? True for a hub id that is neither a local folder nor
    in the local hub cache (no network call: a local look-up only)."""
    name = name.strip()
    if not name or name.startswith("tiny:") or Path(name).expanduser().exists() or not HUB_ID.match(name):
        return False
    return not _in_hub_cache(name, None)


def hub_reachable(timeout: float = HUB_CHECK_SECONDS) -> bool:
    """Can the hub be reached within ``timeout`` seconds (through the proxy, when one is set)?"""
    return hub_problem(timeout) is None


def hub_problem(timeout: float = HUB_CHECK_SECONDS) -> str | None:
    """None when a connection to the hub opens within ``timeout`` seconds, else what went wrong. With a
    proxy in the environment the proxy must answer too (an HTTP CONNECT, or a SOCKS5 greeting): a proxy
    that accepts and never answers would otherwise hang every download for many minutes."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    proxies = urllib.request.getproxies_environment()
    bypass = urllib.request.proxy_bypass_environment(host)  # type: ignore[attr-defined]  # NO_PROXY
    proxy = None if bypass else proxies.get(endpoint.scheme or "https") or proxies.get("all")
    result: list[str | None] = []

    def check() -> None:
        try:
            if proxy:
                result.append(_proxy_problem(proxy, host, port, timeout))
            else:
                socket.create_connection((host, port), timeout=timeout).close()
                result.append(None)
        except OSError as e:
            where = f"the proxy {proxy}" if proxy else f"{host}:{port}"
            result.append(f"no connection to {where}: {e.strerror or e}")

    # DNS look-ups ignore socket timeouts; a daemon thread bounds the whole check.
    worker = threading.Thread(target=check, daemon=True)
    worker.start()
    worker.join(timeout)
    if not result:
        return (
            f"the proxy {proxy} did not answer within {timeout:g} s"
            if proxy
            else f"no answer from {host}:{port} within {timeout:g} s"
        )
    return result[0]


def _proxy_problem(proxy: str, host: str, port: int, timeout: float) -> str | None:
    url = urlparse(proxy if "://" in proxy else f"http://{proxy}")
    default = {"https": 443, "socks5": 1080, "socks5h": 1080}.get(url.scheme, 8080)
    with socket.create_connection((url.hostname or "", url.port or default), timeout=timeout) as conn:
        conn.settimeout(timeout)
        if url.scheme.startswith("socks"):
            conn.sendall(b"\x05\x01\x00")  # SOCKS5: one method, no authentication
            answer = conn.recv(2)
            return None if answer[:1] == b"\x05" else f"the proxy {proxy} did not answer as a SOCKS5 proxy"
        if url.scheme == "https":
            import ssl

            conn = ssl.create_default_context().wrap_socket(conn, server_hostname=url.hostname)
        auth = ""
        if url.username:
            token = base64.b64encode(f"{unquote(url.username)}:{unquote(url.password or '')}".encode()).decode()
            auth = f"Proxy-Authorization: Basic {token}\r\n"
        conn.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}\r\n".encode())
        status = conn.recv(256).split(b"\r\n", 1)[0].decode("latin-1")
    parts = status.split()
    if len(parts) >= 2 and parts[1] == "200":
        return None
    return (
        f"the proxy {proxy} answered {status!r} to a CONNECT to {host}:{port}"
        if status
        else f"the proxy {proxy} closed the connection"
    )


def _in_hub_cache(repo_id: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)


def tiny_preset(name: str, *, config_only: bool = False) -> Path:
    """``tiny:<arch>[-kv<N>][-tied]`` -> a tiny checkpoint folder (built offline if needed); with
    ``config_only`` a folder with its config.json alone (no weights built or trained: a config check
    must not wait for them)."""
    from tpu_lab.models.tiny import tiny_config_folder, tiny_model

    match = re.fullmatch(r"tiny:(\w+?)(?:-kv(\d+))?(-tied)?", name)
    if not match:
        raise InvalidArgument(
            f"Cannot read the tiny model name {name!r}.", fix="Use tiny:<arch>[-kv<N>][-tied], e.g. tiny:qwen3-kv2."
        )
    arch, kv, tied = match.groups()
    build = tiny_config_folder if config_only else tiny_model
    return build(arch=arch, kv_heads=int(kv) if kv else None, tie_embeddings=bool(tied))


def check_config(path: Path, *, trust_remote_code: bool = False) -> dict:
    """config.json exists, is a JSON object, and defines no model code unless it is trusted."""
    config_file = path / "config.json"
    if not path.is_dir() or not config_file.is_file():
        where = "is a file, not a checkpoint folder" if not path.is_dir() else "has no config.json"
        raise ModelLoadError(
            f"{path} {where}.",
            fix="Pass the folder written by save_pretrained (it holds config.json and the weights).",
        )
    try:
        config = json.loads(config_file.read_bytes())
    except (ValueError, OSError) as e:
        raise ModelLoadError(
            f"{config_file} is not valid JSON: {e}.",
            cause="an interrupted download or copy, or a file edited by hand",
            fix="Re-save or re-download the checkpoint.",
        ) from e
    if not isinstance(config, dict):
        raise ModelLoadError(
            f"{config_file} holds a JSON {type(config).__name__}, not the object a config is.",
            fix="Re-save the checkpoint with model.save_pretrained() or config.save_pretrained().",
        )
    if "auto_map" in config and not trust_remote_code:
        raise ModelLoadError(
            f"{path} defines its own model code (auto_map in config.json), which transformers only runs "
            "with trust_remote_code=True (and would otherwise ask on stdin, which a notebook kernel lacks).",
            fix="Read the model's Python files, then pass trust_remote_code=True if you trust them.",
        )
    return config


def check_checkpoint(path: Path, *, trust_remote_code: bool = False) -> None:
    """Catch what would fail after loading started: no config, no tokenizer, remote code, truncated weights."""
    check_config(path, trust_remote_code=trust_remote_code)
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
    """Raise ModelLoadError when a safetensors file's header is malformed or the file is shorter than it says."""
    size = file.stat().st_size
    with open(file, "rb") as fh:
        head = fh.read(8)
        header_len = int.from_bytes(head, "little") if len(head) == 8 else -1
        try:
            header = json.loads(fh.read(header_len)) if 0 <= header_len <= size - 8 else None
        except ValueError:
            header = None
    ends = _tensor_ends(header)
    expected = None if ends is None else 8 + header_len + max(ends, default=0)
    if header is not None and ends is None:
        raise ModelLoadError(
            f"{file} has a malformed header: it is JSON, but not a map of tensor name -> dtype, shape and "
            "data_offsets.",
            cause="a file that is not a safetensors checkpoint, or one written by a broken tool",
            fix="Delete the file and download or save the checkpoint again.",
        )
    if expected is None or size < expected:
        have = f"{size:,} bytes" + (f" of the {expected:,} its header promises" if expected else "")
        raise ModelLoadError(
            f"{file} is truncated or corrupt: {have}.",
            cause="an interrupted download or copy, or a full disk while saving",
            fix="Delete the file and download or save the checkpoint again.",
        )


def _tensor_ends(header: object) -> list[int] | None:
    """Where each tensor's data ends, or None when the header does not have safetensors' shape."""
    if not isinstance(header, dict):
        return None
    ends = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict):
                return None
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("dtype"), str)
            and isinstance(shape, list)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
            and isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            return None
        ends.append(offsets[1])
    return ends
