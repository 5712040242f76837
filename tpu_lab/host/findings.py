"""The traps that apply to a probe's facts, as findings with their fixes. Pure: versions, chips, the
accelerator and the environment come in as values, so every finding can be triggered in tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpu_lab._report import Finding, most_severe_first
from tpu_lab.host.chips import TpuChips
from tpu_lab.host.versions import kernels_status, outside_range, required_range

# Used when the package that states the range is not installed (torch-tpu 0.2.0, transformers 5.24).
FALLBACK_TORCH_RANGE_FOR_TORCH_TPU = ">=2.11.0,<=2.15.0"
# Set by torch.tpu.distributed.set_tpu_launch_env(); in a kernel they pin one launch's ports for good.
LAUNCH_ENV = ("TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_TOPOLOGY", "TORCH_TPU_XPROF_SESSION_ID")


def diagnose(
    *,
    versions: Mapping[str, str | None],
    chips: TpuChips,
    accelerator: Any,
    holds_tpu: bool | None,
    device: str,
    environ: Mapping[str, str],
) -> tuple[Finding, ...]:
    """Every trap that applies to these facts, most severe first. Pure: no I/O beyond package metadata."""
    out: list[Finding] = []
    add = out.append
    torch_v, tpu_v = versions.get("torch"), versions.get("torch_tpu")

    if device != "cuda":
        why = (
            "accelerate asks each device for free memory and has no TPU branch, so it silently falls back "
            "to CPU even though chips are visible"
            if device == "tpu"
            else "this process has no accelerator; on a TPU VM it would also load on CPU, silently, because "
            "accelerate has no TPU branch"
        )
        add(
            Finding(
                "auto-device-map-cpu",
                "warning",
                f'device_map="auto" would load the model on CPU here: {why}.',
                (
                    'Pass an explicit device: device_map="tpu" (tpu_lab.load_model does this for you).'
                    if device == "tpu"
                    else f'Pass an explicit device: device_map="{device}" here, "tpu" on a TPU VM '
                    "(tpu_lab.load_model does this for you)."
                ),
            )
        )
    if chips.count and not tpu_v:
        add(
            Finding(
                "tpu-without-torch-tpu",
                "error",
                f"{chips.count} {chips.generation} chip(s) are visible but torch_tpu is not installed, "
                "so torch cannot use them and everything runs on CPU.",
                'pip install "tpu-lab[tpu]" (or pip install torch-tpu), then restart the kernel.',
            )
        )
    if chips.without_vfio and not chips.count:
        add(
            Finding(
                "tpu-without-vfio",
                "error",
                f"{chips.without_vfio} Google TPU PCI device(s) are present but none has a VFIO group under "
                "/dev/vfio, so torch_tpu cannot open them.",
                "On a container, pass the /dev/vfio devices through (e.g. --privileged or --device /dev/vfio); "
                "on a TPU VM, check that the vfio-pci driver is bound.",
            )
        )
    if tpu_v and not chips.count:
        add(
            Finding(
                "torch-tpu-without-chip",
                "info",
                "torch_tpu is installed but no TPU chip is visible: the 'tpu' device does not exist here, and "
                "`import torch` still autoloads torch_tpu (about +2.5 s and +400 MB per process).",
                "Use device 'cpu' here (the lessons still work); run on a TPU VM for the real thing. "
                "Set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to skip the autoload.",
            )
        )
    if torch_v and tpu_v:
        spec = required_range("torch-tpu", "torch") or FALLBACK_TORCH_RANGE_FOR_TORCH_TPU
        if outside_range(torch_v, spec):
            add(
                Finding(
                    "torch-outside-tpu-range",
                    "error",
                    f"torch {torch_v} is outside the range torch_tpu {tpu_v} supports ({spec}); "
                    "torch_tpu may fail to load or crash.",
                    f'pip install "torch{spec}"',
                )
            )
    kernels = kernels_status(versions)
    if kernels.transformers and kernels.mismatch:
        add(
            Finding(
                "kernels-version-mismatch",
                "warning",
                f"kernels {kernels.kernels} is outside the range transformers {kernels.transformers} requires "
                f"({kernels.required}): use_kernels=True will raise 'Kernels are not available'.",
                f'pip install "kernels{kernels.required}" if it exists, or a transformers release that accepts kernels '
                f'{kernels.kernels}; note `pip install "transformers[kernels]"` may silently downgrade transformers.',
            )
        )
    if accelerator is not None and accelerator.torch_cuda and not accelerator.cuda_devices and device != "tpu":
        add(
            Finding(
                "cuda-wheel-without-gpu",
                "info",
                f"torch is a CUDA {accelerator.torch_cuda} build but no GPU is visible: it works on CPU, "
                f"but torch.accelerator may still say {accelerator.type!r} and the install is several GB.",
                "Nothing to do for CPU lessons; for a smaller install use the CPU wheel "
                "(pip install torch --index-url https://download.pytorch.org/whl/cpu).",
            )
        )
    if holds_tpu:
        add(
            Finding(
                "kernel-holds-tpu",
                "warning",
                "This process already holds the TPU: tensor-parallel workers launched from here will fail "
                "with 'Device or resource busy'.",
                "Restart the kernel and launch before touching the TPU here (tpu_lab.launch runs workers in "
                "fresh processes).",
            )
        )
    stale = [k for k in LAUNCH_ENV if k in environ]
    if stale:
        add(
            Finding(
                "stale-launch-env",
                "warning",
                f"{', '.join(stale)} are set in this process: set_tpu_launch_env() ran here (or was inherited) "
                "and its ports and topology are reused by every later launch.",
                "Unset them (or restart the kernel); tpu_lab.launch computes a fresh launch environment in a "
                "child process each time.",
            )
        )
    out.extend(malformed_environment(environ))
    return most_severe_first(out)


def _int_list(value: str) -> bool:
    parts = value.split(",")
    return all(p.strip().isdigit() for p in parts)


def malformed_environment(environ: Mapping[str, str]) -> list[Finding]:
    """Findings for TPU-related variables whose values will be misread."""
    out = []
    autoload = environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    if autoload is not None and autoload not in ("0", "1"):
        out.append(
            Finding(
                "malformed-env",
                "error",
                f"TORCH_DEVICE_BACKEND_AUTOLOAD={autoload!r}: torch only autoloads backends when it is exactly "
                "'1', so this value silently turns torch_tpu's autoload off.",
                "Set TORCH_DEVICE_BACKEND_AUTOLOAD=1 (autoload torch_tpu) or 0 (skip it), or unset it.",
            )
        )
    port = environ.get("TORCH_TPU_INTERNAL_HANDSHAKE_PORT")
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        out.append(
            Finding(
                "malformed-env",
                "error",
                f"TORCH_TPU_INTERNAL_HANDSHAKE_PORT={port!r} is not a TCP port; torch_tpu workers will fail to start.",
                "Set TORCH_TPU_INTERNAL_HANDSHAKE_PORT to a free port between 1024 and 65535, or unset it.",
            )
        )
    for name in ("TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS"):
        value = environ.get(name)
        if value is not None and not _int_list(value):
            out.append(
                Finding(
                    "malformed-env",
                    "error",
                    f"{name}={value!r} is not a comma-separated list of integers; libtpu will reject it.",
                    f"Fix or unset {name} (e.g. {name}=0,1,2,3 or 2,2,1).",
                )
            )
    return out
