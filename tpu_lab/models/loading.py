"""``load_model()``: load on an explicit device, check the checkpoint first, prove the placement after.

On a TPU, ``device_map="auto"`` silently loads on CPU (accelerate has no TPU branch), so this loader
never passes "auto": it resolves the device itself (the probe's choice when none is given), checks
what can be checked before minutes of loading (``checkpoint``), loads with ``device_map=<device>``,
and then reports where every tensor ended up (``placement``).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_lab._checks import boolean
from tpu_lab._checks import name_or_path as check_name
from tpu_lab._report import Finding, Report
from tpu_lab.errors import (
    DeviceUnavailable,
    InvalidArgument,
    KernelsUnavailable,
    TpuLabError,
    TpuLabWarning,
)
from tpu_lab.host.chips import scan_tpu_chips
from tpu_lab.host.probe import pick_device
from tpu_lab.host.versions import installed_versions, kernels_status
from tpu_lab.models import load_checks
from tpu_lab.models.checkpoint import resolve_source
from tpu_lab.models.load_checks import explain_load_failure
from tpu_lab.models.placement import LoadReport, inspect_placement

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
class LoadedModel(Report):
    """The result of ``load_model``: ``.model``, ``.tokenizer`` and ``.report``."""

    model: Any
    """The ``PreTrainedModel``, in eval mode, on ``report.device``."""
    tokenizer: Any
    """The tokenizer saved with the checkpoint."""
    report: LoadReport
    """Where everything ended up."""

    def __iter__(self):
        return iter((self.model, self.tokenizer))

    def to_text(self) -> str:
        return self.report.to_text()

    def to_html(self) -> str:
        return self.report.to_html()


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
    device_map: Any = None,
    check_finite: bool = True,
) -> LoadedModel:
    """Load a causal LM and its tokenizer on an explicit device, then prove the placement.

    ``device``: "tpu", "cuda", "cuda:N", "cpu", or None for the probe's recommendation. "auto" is
    accepted but replaced by the explicit device with a warning: on a TPU it would load on CPU.
    ``dtype``: "bfloat16", "float16", "float32" (or a torch.dtype); None picks bfloat16 on TPU/GPU and
    float32 on CPU. ``name_or_path``: a checkpoint folder, a hub id, or ``tiny:<arch>[-kvN][-tied]``
    for an offline tiny model. ``progress(desc, n, total)`` is called as weights load (a tqdm bar is
    shown when it is None). ``device_map``: transformers' spelling, understood for one device
    ("tpu", "cuda", "cpu"; "auto" as ``device="auto"``): tpu_lab loads the whole model on one device.
    ``trust_remote_code`` and ``use_kernels`` must be real booleans (a string such as "no" is refused,
    never taken for its truthiness). ``revision`` applies to a hub id only. A checkpoint folder whose
    weights exceed the device's memory is refused before loading; ``check_finite`` (default) refuses a
    model whose weights hold NaN or infinity (False loads it anyway, to inspect it).
    """
    name = check_name(name_or_path)
    boolean(trust_remote_code, "trust_remote_code")
    boolean(use_kernels, "use_kernels")
    boolean(check_finite, "check_finite")
    load_checks.check_options(name, revision, attn_implementation, progress)
    device = device_from_map(device_map, device)
    findings: list[Finding] = []
    device, device_map = resolve_device(device, findings)
    dtype_name = resolve_dtype(dtype, device)
    if use_kernels:
        check_kernels(device)
    path, source, local_only = resolve_source(name, revision=revision, trust_remote_code=trust_remote_code)
    if source == "local":
        load_checks.check_memory(Path(path), dtype_name, device)

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
    if check_finite:
        load_checks.check_finite(model, name)
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


def device_from_map(device_map: Any, device: Any) -> Any:
    """transformers' ``device_map=`` as tpu_lab's ``device=``: one device by name, or refused with the fix."""
    if device_map is None:
        return device
    if isinstance(device_map, str) and device_map.partition(":")[0] in ("tpu", "cuda", "cpu", "auto"):
        if device is not None and str(device) != device_map:
            raise InvalidArgument(
                f"device={device!r} and device_map={device_map!r} name two different devices.",
                fix="Pass one of them: device= is tpu_lab's name for it.",
            )
        return device_map
    raise InvalidArgument(
        f"device_map={device_map!r} is not one device: tpu_lab loads the whole model on one device and "
        "then checks that every weight is there.",
        cause="a per-module map (or a strategy such as 'balanced') splits the model across devices, and on a "
        "TPU accelerate puts such a split on CPU silently",
        fix='Pass device="tpu" (or "cuda", "cpu"); to split a model across chips use tensor parallelism '
        "(tl.tp_preflight, then tl.launch).",
    )


def resolve_device(requested: str | None, findings: list[Finding] | None = None) -> tuple[str, str]:
    """``(device, device_map)`` for a request; raises DeviceUnavailable when it does not exist here."""
    findings = [] if findings is None else findings
    if requested is None or requested == "auto":
        device = pick_device()
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
            f"Unknown device {requested!r}.",
            fix='Use "tpu", "cuda", "cuda:N" or "cpu", or leave device out for the probe\'s pick.',
        )
    if kind == "tpu":
        chips = scan_tpu_chips()
        if not chips.count:
            raise DeviceUnavailable(
                "device 'tpu' was requested but no TPU chip is visible on this machine.",
                cause="this is not a TPU VM (or the chips are not passed into this container)",
                fix="Use device='cpu' here (or leave device out for the probe's pick); run on a TPU VM for the TPU.",
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
                fix="Use device='cpu', or leave device out for the probe's pick.",
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
            f"Unknown dtype {dtype!r}.",
            fix="Use 'bfloat16', 'float16' or 'float32', or leave dtype out for the device's default.",
        )
    return DTYPES[name]


def check_kernels(device: str, versions: dict[str, str | None] | None = None) -> None:
    """Fail early, with the install command, when use_kernels=True cannot work with what is installed."""
    status = kernels_status(versions, need_jax=device == "tpu")  # TPU kernels are Pallas/JAX code
    if status.missing:
        raise KernelsUnavailable(
            f"use_kernels=True needs {' and '.join(status.missing)}, which is not installed.",
            fix=f"{status.install_command}, then restart the kernel.",
        )
    if status.mismatch:
        raise KernelsUnavailable(
            f"kernels {status.kernels} is installed but transformers {status.transformers} requires "
            f"kernels{status.required}.",
            cause='`pip install "transformers[kernels]"` can resolve to an older transformers or an older kernels',
            fix=f"{status.install_command}; if no such release exists yet, install a transformers release "
            f"that accepts kernels {status.kernels}, or load with use_kernels=False.",
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
