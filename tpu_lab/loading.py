"""``load_model()``: load on an explicit device, check the checkpoint first, prove the placement after.

On a TPU, ``device_map="auto"`` silently loads on CPU (accelerate has no TPU branch), so this loader
never passes "auto": it resolves the device itself (``tl.probe()`` when none is given), checks what can
be checked before minutes of loading (folder, tokenizer, truncated safetensors, remote code, hub
reachable, kernels versions), loads with ``device_map=<device>``, and then reports where every tensor
ended up and whether tied weights are still one tensor.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tpu_lab import _render
from tpu_lab._versions import installed_versions, outside_range, required_range
from tpu_lab.device import Finding
from tpu_lab.errors import (
    DeviceUnavailable,
    HubUnreachable,
    InvalidArgument,
    KernelsUnavailable,
    ModelLoadError,
    TpuLabError,
    TpuLabWarning,
)
from tpu_lab.hardware import scan_tpu_chips

DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}
# bfloat16 is the TPU's native type; float32 keeps CPU lessons exact.
DEFAULT_DTYPE = {"tpu": "bfloat16", "cuda": "bfloat16", "cpu": "float32"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")
HUB_CHECK_SECONDS = 5.0
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
GENERATE_KWARGS = {"tpu": {"cache_implementation": "static"}, "cuda": {"cache_implementation": "static"}, "cpu": {}}
GENERATION_ADVICE = {
    "tpu": "Keep generate() inputs on CPU (no .to(model.device)) and use a static cache: generate moves only "
    "what forward consumes and auto-compiles decode steps with the tpu backend. SDPA is the default.",
    "cuda": "A static cache lets generate() auto-compile the decode steps.",
    "cpu": "Nothing is compiled by default on CPU; tl.GenerationSession compiles to show the TPU's behaviour.",
}
ProgressCallback = Callable[[str, int, "int | None"], None]
# What the ModelLoader offers: the seed's models and the offline tiny ones.
MODEL_PRESETS = (
    "tiny:qwen3",
    "tiny:llama",
    "tiny:qwen3-kv2",
    "tiny:qwen3-tied",
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-8B",
    "zai-org/GLM-4-9B-0414",
)


@dataclass(frozen=True)
class DeviceChoice:
    """A device the loader can offer, and why not when it can't."""

    name: str
    """"tpu", "cuda" or "cpu"."""
    available: bool
    """Whether loading there can work in this process."""
    reason: str
    """Why it is unavailable (empty when available)."""


def device_choices(report: Any) -> list[DeviceChoice]:
    """The devices a DeviceReport allows, in preference order, with the reason for each one that it doesn't."""
    tpu_reason = ""
    if not report.tpu.count:
        tpu_reason = "no TPU chip visible"
    elif not report.versions.get("torch_tpu"):
        tpu_reason = "torch_tpu not installed"
    gpus = report.accelerator.cuda_devices if report.accelerator else 0
    return [
        DeviceChoice("tpu", not tpu_reason, tpu_reason),
        DeviceChoice("cuda", gpus > 0, "" if gpus else "no CUDA GPU visible"),
        DeviceChoice("cpu", True, ""),
    ]


@dataclass(frozen=True)
class LoadReport:
    """Where a loaded model ended up, proven by looking at every tensor."""

    name_or_path: str
    """What was asked for (a folder, a hub id, or ``tiny:<arch>``)."""
    source: str
    """``"local"``, ``"tiny"``, ``"hub"`` or ``"hub cache"`` (offline, loaded from the local hub cache)."""
    resolved_path: str
    """The folder or hub id actually passed to ``from_pretrained``."""
    device: str
    """The device everything should be on (``"tpu"``, ``"cuda:0"``, ``"cpu"``)."""
    device_map: str
    """The ``device_map`` passed to ``from_pretrained`` (never ``"auto"``)."""
    dtype: str
    """The dtype asked for."""
    placement: dict[str, int]
    """Parameters and buffers per device, e.g. ``{"tpu:0": 25}``."""
    dtypes: dict[str, int]
    """Parameters and buffers per dtype."""
    parameters: int
    """Number of parameter elements (tied weights counted once)."""
    bytes: int
    """Bytes held by parameters and buffers."""
    tied_embeddings: bool
    """Whether the config ties the LM head to the input embeddings."""
    tied_shared: bool | None
    """Whether they are still one tensor after loading (None when not tied)."""
    misplaced: tuple[str, ...]
    """Tensors not on ``device`` (including meta tensors that were never loaded)."""
    attn_implementation: str | None
    """The attention implementation the model uses."""
    load_seconds: float
    """Wall time of the tokenizer and weight loading."""
    generate_kwargs: dict[str, str]
    """Keyword arguments generate() wants on this device (a static cache on TPU)."""
    generation_advice: str
    """How to call generate() on this device."""
    findings: tuple[Finding, ...] = field(default=())
    """Problems found after loading (misplaced or meta weights, split tied weights, an "auto" request)."""

    @property
    def ok(self) -> bool:
        """True when no finding is an error."""
        return not any(f.severity == "error" for f in self.findings)

    def _rows(self) -> list[tuple[str, str]]:
        placement = ", ".join(f"{d}: {n}" for d, n in self.placement.items())
        tied = "no" if not self.tied_embeddings else ("yes, one tensor" if self.tied_shared else "SPLIT")
        return [
            ("model", f"{self.name_or_path} ({self.source})"),
            ("device", f"{self.device} (device_map={self.device_map!r})"),
            ("placement", placement + ("" if not self.misplaced else f"  <- {len(self.misplaced)} MISPLACED")),
            ("dtypes", ", ".join(f"{d}: {n}" for d, n in self.dtypes.items())),
            ("parameters", f"{self.parameters:,} ({self.bytes / 2**20:.1f} MiB with buffers)"),
            ("tied embeddings", tied),
            ("attention", str(self.attn_implementation)),
            ("load time", f"{self.load_seconds:.2f} s"),
            ("generate with", f"{self.generate_kwargs or '{}'}: {self.generation_advice}"),
        ]

    def __str__(self) -> str:
        lines = ["tpu_lab load report"] + [f"  {k:<16} {v}" for k, v in self._rows()]
        for f in self.findings:
            lines += [f"  [{f.severity}] {f.code}: {f.message}", f"      fix: {f.fix}"]
        return "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": str(self), "text/html": _render.report_html("Model loaded", self._rows(), self.findings)}


@dataclass(frozen=True)
class LoadedModel:
    """The result of ``load_model``: ``.model``, ``.tokenizer`` and ``.report``."""

    model: Any
    """The ``PreTrainedModel``, in eval mode, on ``report.device``."""
    tokenizer: Any
    """The tokenizer saved with the checkpoint."""
    report: LoadReport
    """Where everything ended up."""

    def __iter__(self):
        return iter((self.model, self.tokenizer))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return self.report._repr_mimebundle_()


def load_model(
    name_or_path: str | os.PathLike,
    *,
    device: str | None = None,
    dtype: Any = None,
    attn_implementation: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    use_kernels: bool = False,
    progress: ProgressCallback | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer on an explicit device, then prove the placement.

    ``device``: "tpu", "cuda", "cuda:N", "cpu", or None for the probe's recommendation. "auto" is
    accepted but replaced by the explicit device with a warning: on a TPU it would load on CPU.
    ``dtype``: "bfloat16", "float16", "float32" (or a torch.dtype); None picks bfloat16 on TPU/GPU and
    float32 on CPU. ``name_or_path``: a checkpoint folder, a hub id, or ``tiny:<arch>[-kvN][-tied]``
    for an offline tiny model. ``progress(desc, n, total)`` is called as weights load (a tqdm bar is
    shown when it is None).
    """
    name = os.fspath(name_or_path)
    findings: list[Finding] = []
    device, device_map = resolve_device(device, findings)
    dtype_name = resolve_dtype(dtype, device)
    if use_kernels:
        check_kernels(device)
    path, source, local_only = resolve_source(name, revision=revision, trust_remote_code=trust_remote_code)

    import torch
    import transformers

    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    if local_only:
        kwargs["local_files_only"] = True
    model_kwargs = {**kwargs, "dtype": getattr(torch, dtype_name), "device_map": device_map}
    if attn_implementation:
        model_kwargs["attn_implementation"] = attn_implementation
    if use_kernels:
        model_kwargs["use_kernels"] = True
    start = time.perf_counter()
    previous_hook = None
    if progress is not None:
        previous_hook = transformers.utils.logging.set_tqdm_hook(
            lambda factory, args, kw: _ProgressRelay(progress, *args, **kw)
        )
    try:
        # The tokenizer first: it is cheap and fails fast, before minutes of weights.
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, **kwargs)
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **model_kwargs)
    except TpuLabError:
        raise
    except Exception as e:
        raise explain_load_failure(e, name, trusted=trust_remote_code) from e
    finally:
        if progress is not None:
            transformers.utils.logging.set_tqdm_hook(previous_hook)
    seconds = time.perf_counter() - start
    model.eval()
    report = inspect_placement(
        model,
        name=name,
        source=source,
        path=path,
        device=device,
        device_map=device_map,
        dtype=dtype_name,
        seconds=seconds,
        findings=findings,
    )
    for f in report.findings:
        if f.severity == "error":
            warnings.warn(f"tpu_lab: {f.message} Fix: {f.fix}", TpuLabWarning, stacklevel=2)
    return LoadedModel(model, tokenizer, report)


def resolve_device(requested: str | None, findings: list[Finding] | None = None) -> tuple[str, str]:
    """``(device, device_map)`` for a request; raises DeviceUnavailable when it does not exist here."""
    findings = [] if findings is None else findings
    if requested is None or requested == "auto":
        # The probe's choice without the probe's findings, which load_model doesn't need.
        import torch

        from tpu_lab.device import recommended_device

        has_tpu = importlib.util.find_spec("torch_tpu") is not None  # metadata look-ups cost ms each
        device = recommended_device(scan_tpu_chips(), has_tpu, torch.cuda.device_count())
        if requested == "auto":
            finding = Finding(
                "auto-replaced",
                "warning",
                f'device="auto" was replaced by {device!r}: with device_map="auto" accelerate loads on CPU '
                "on a TPU host (it has no TPU branch), silently.",
                f'Pass device="{device}" (or leave device=None) to get this without the warning.',
            )
            findings.append(finding)
            warnings.warn(f"tpu_lab: {finding.message} {finding.fix}", TpuLabWarning, stacklevel=3)
        requested = device
    if not isinstance(requested, str):
        requested = str(requested)  # a torch.device
    kind, _, index = requested.partition(":")
    if kind not in ("tpu", "cuda", "cpu") or (index and not index.isdigit()):
        raise InvalidArgument(
            f"Unknown device {requested!r}.", fix='Use "tpu", "cuda", "cuda:N", "cpu", or None for the probe\'s pick.'
        )
    if kind == "tpu":
        chips = scan_tpu_chips()
        if not chips.count:
            raise DeviceUnavailable(
                "device 'tpu' was requested but no TPU chip is visible on this machine.",
                cause="this is not a TPU VM (or the chips are not passed into this container)",
                fix="Use device='cpu' (or None) here; run on a TPU VM for the TPU.",
            )
        if not installed_versions()["torch_tpu"]:
            raise DeviceUnavailable(
                f"device 'tpu' was requested and {chips.count} chip(s) are visible, but torch_tpu is not installed.",
                fix='pip install "tpu-lab[tpu]", then restart the kernel.',
            )
        if index not in ("", "0"):
            raise InvalidArgument(
                f"device {requested!r}: each process sees exactly one chip, as tpu:0.",
                fix="Use device='tpu'; to use several chips, run tensor parallel with one process per chip.",
            )
        return "tpu", "tpu"
    if kind == "cuda":
        import torch

        count = torch.cuda.device_count()
        if count <= int(index or 0):
            raise DeviceUnavailable(
                f"device {requested!r} was requested but this process sees {count} CUDA GPU(s).",
                cause="no GPU on this machine, a CPU-only torch, or CUDA_VISIBLE_DEVICES hides it",
                fix="Use device='cpu' (or None for the probe's pick).",
            )
        device = f"cuda:{index or 0}"
        return device, device
    return "cpu", "cpu"


def resolve_dtype(dtype: Any, device: str) -> str:
    """A dtype name torch knows; None picks the device's default."""
    if dtype is None or dtype == "auto":
        return DEFAULT_DTYPE[device.partition(":")[0]]
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise InvalidArgument(
            f"Unknown dtype {dtype!r}.", fix="Use 'bfloat16', 'float16' or 'float32' (or None for the device default)."
        )
    return DTYPES[name]


def check_kernels(device: str, versions: Mapping[str, str | None] | None = None) -> None:
    """Fail early, with the install command, when use_kernels=True cannot work with what is installed."""
    v = {**installed_versions(), **(versions or {})}
    spec = required_range("transformers", "kernels", extra="kernels") or ""
    needed = ["kernels"] + (["jax"] if device == "tpu" else [])  # TPU kernels are Pallas/JAX code
    missing = [p for p in needed if not v[p]]
    if missing:
        raise KernelsUnavailable(
            f"use_kernels=True needs {' and '.join(missing)}, which is not installed.",
            fix=f'pip install "kernels{spec}"' + (" jax" if device == "tpu" else "") + ", then restart the kernel.",
        )
    if spec and outside_range(v["kernels"] or "", spec):
        raise KernelsUnavailable(
            f"kernels {v['kernels']} is installed but transformers {v['transformers']} requires kernels{spec}.",
            cause='`pip install "transformers[kernels]"` can resolve to an older transformers or an older kernels',
            fix=f'pip install "kernels{spec}"; if no such release exists yet, install a transformers release '
            f"that accepts kernels {v['kernels']}, or load with use_kernels=False.",
        )


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
    from tpu_lab.models import tiny_model

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


def explain_load_failure(e: Exception, name: str, *, trusted: bool = False) -> ModelLoadError:
    """Turn what from_pretrained raised into an error that says the likely cause and the fix."""
    text = f"{type(e).__name__}: {e}"
    if "trust_remote_code" in text and not trusted:
        return ModelLoadError(
            f"{name} needs its own model code: {e}",
            fix="Read the model's code on its hub page, then pass trust_remote_code=True if you trust it.",
        )
    if "SafetensorError" in text or "incomplete metadata" in text.lower():
        return ModelLoadError(
            f"The weights of {name} could not be read: {e}",
            cause="a truncated or corrupt safetensors file",
            fix="Delete the checkpoint and download or save it again.",
        )
    return ModelLoadError(f"Loading {name} failed: {text}", fix="See the chained error above for the details.")


def inspect_placement(
    model: Any,
    *,
    name: str,
    source: str,
    path: str,
    device: str,
    device_map: str,
    dtype: str,
    seconds: float,
    findings: list[Finding] | None = None,
) -> LoadReport:
    """Look at every parameter and buffer: where it is, its dtype, and whether tied weights are shared."""
    findings = list(findings or [])
    target = device.partition(":")[0]
    placement: Counter[str] = Counter()
    dtypes: Counter[str] = Counter()
    misplaced, on_meta = [], []
    numel = nbytes = 0
    params = list(model.named_parameters())  # tied weights once (named_parameters de-duplicates)
    for i, (tname, t) in enumerate([*params, *model.named_buffers()]):
        device_ = t.device
        placement[str(device_)] += 1
        dtypes[str(t.dtype).removeprefix("torch.")] += 1
        n = t.numel()
        nbytes += n * t.element_size()
        numel += n if i < len(params) else 0
        if device_.type == "meta":
            on_meta.append(tname)
        elif device_.type != target:
            misplaced.append(tname)
    text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    tied = bool(getattr(text_config, "tie_word_embeddings", False))
    shared = None
    if tied:
        out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
        shared = out_emb is not None and out_emb.weight.data_ptr() == in_emb.weight.data_ptr()
    if misplaced:
        findings.append(
            Finding(
                "weights-misplaced",
                "error",
                f"{len(misplaced)} tensor(s) are not on {device}: {', '.join(misplaced[:4])}"
                + (" ..." if len(misplaced) > 4 else "")
                + ". Every step would copy them across devices.",
                f"Load with an explicit device (device='{device}'), never device_map='auto'; check for CPU offload.",
            )
        )
    if on_meta:
        findings.append(
            Finding(
                "weights-on-meta",
                "error",
                f"{len(on_meta)} tensor(s) were never loaded (still on meta): {', '.join(on_meta[:4])}.",
                "The checkpoint lacks these weights: check it matches the model class and was saved completely.",
            )
        )
    if tied and not shared:
        findings.append(
            Finding(
                "tied-weights-split",
                "error",
                "The config ties lm_head to the input embeddings, but after loading they are two tensors: "
                "memory doubles and updates to one no longer reach the other.",
                "Call model.tie_weights(), or load without sharding the embeddings.",
            )
        )
    return LoadReport(
        name_or_path=name,
        source=source,
        resolved_path=path,
        device=device,
        device_map=device_map,
        dtype=dtype,
        placement=dict(placement),
        dtypes=dict(dtypes),
        parameters=numel,
        bytes=nbytes,
        tied_embeddings=tied,
        tied_shared=shared,
        misplaced=tuple(misplaced + on_meta),
        attn_implementation=getattr(model.config, "_attn_implementation", None),
        load_seconds=seconds,
        generate_kwargs=dict(GENERATE_KWARGS[target]),
        generation_advice=GENERATION_ADVICE[target],
        findings=tuple(findings),
    )


class _ProgressRelay:
    """Stands in for the tqdm bars transformers opens, and reports each step to a callback."""

    def __init__(self, callback: ProgressCallback, iterable=None, desc: str | None = None, total=None, **_: Any):
        self.iterable, self.callback, self.desc, self.n = iterable, callback, desc or "", 0
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        callback(self.desc, 0, self.total)

    def __iter__(self):
        for item in self.iterable or ():
            yield item
            self.update(1)

    def update(self, n: int = 1) -> None:
        self.n += n
        self.callback(self.desc, self.n, self.total)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None  # set_postfix, set_description, refresh, ...
