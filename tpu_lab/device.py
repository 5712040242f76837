"""``probe()``: what this kernel sees, and which TPU traps apply here.

An uncached snapshot. It never initialises a device and never calls the ``torch.tpu`` functions that
raise from user code: chips come from sysfs (``tpu_lab.hardware``), the accelerator from
``torch.accelerator`` (which, for an uninitialised TPU, also only scans PCI), and "does this process
hold the TPU" from ``torch.tpu.is_initialized()``, asked only when torch_tpu is already loaded.

Facts are gathered here; ``diagnose()`` turns them into findings as pure code, so every finding can
be triggered in tests through injected versions, environment and sysfs trees.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from tpu_lab import _render
from tpu_lab._versions import installed_versions, outside_range, required_range
from tpu_lab.hardware import TpuChips, scan_tpu_chips

# Used when the package that states the range is not installed (torch-tpu 0.2.0, transformers 5.24).
FALLBACK_TORCH_RANGE_FOR_TORCH_TPU = ">=2.11.0,<=2.15.0"
ENV_PREFIXES = ("TORCH_TPU_", "TPU_")
ENV_NAMES = ("PJRT_DEVICE", "XLA_FLAGS", "LIBTPU_INIT_ARGS", "TORCH_DEVICE_BACKEND_AUTOLOAD")
# Set by torch.tpu.distributed.set_tpu_launch_env(); in a kernel they pin one launch's ports for good.
LAUNCH_ENV = ("TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_TOPOLOGY", "TORCH_TPU_XPROF_SESSION_ID")


@dataclass(frozen=True)
class Finding:
    """A trap that applies on this machine, with its fix."""

    code: str
    """Stable identifier, e.g. ``"auto-device-map-cpu"`` (README's troubleshooting uses it)."""
    severity: str
    """``"error"`` (this will fail), ``"warning"`` (this will surprise you) or ``"info"``."""
    message: str
    """What applies here and why it matters."""
    fix: str
    """What to do about it."""


@dataclass(frozen=True)
class AcceleratorInfo:
    """What torch reports about accelerators (None fields when torch is not installed)."""

    type: str | None
    """``torch.accelerator.current_accelerator().type`` (may say ``cuda`` on a CUDA wheel without GPU)."""
    available: bool
    """``torch.accelerator.is_available()``."""
    count: int
    """``torch.accelerator.device_count()``."""
    torch_cuda: str | None = None
    """CUDA version the torch wheel was built for (``torch.version.cuda``), None for CPU builds."""
    cuda_devices: int = 0
    """``torch.cuda.device_count()``: GPUs this process can use."""


@dataclass(frozen=True)
class DeviceReport:
    """A snapshot of what this kernel sees. Renders as text and HTML; ``to_dict()`` for JSON."""

    python: str
    """Python version."""
    versions: dict[str, str | None]
    """Installed versions of torch, torch_tpu, libtpu, transformers, accelerate, kernels, jax."""
    accelerator: AcceleratorInfo | None
    """What torch.accelerator reports; None when torch is not installed."""
    tpu: TpuChips
    """TPU chips on the PCI bus, their generation, HBM and allowed ranks per host."""
    holds_tpu: bool | None
    """Whether this process already claimed the TPU; None when torch_tpu is not loaded here."""
    device: str
    """Device string to use here: ``"tpu"``, ``"cuda"`` or ``"cpu"``."""
    device_map: str
    """The ``device_map`` to pass to ``from_pretrained`` (never ``"auto"`` on a TPU host)."""
    environment: dict[str, str]
    """TPU-related environment variables that are set."""
    memory_gib: float | None
    """Memory this process may use, in GiB: the host's RAM or, in a container (Binder), its cgroup limit."""
    findings: tuple[Finding, ...] = field(default=())
    """Every trap that applies here, most severe first."""

    def to_dict(self) -> dict:
        """A JSON-ready dict (the schema of ``tpu-lab probe --json``)."""
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def _summary_rows(self) -> list[tuple[str, str]]:
        acc = self.accelerator
        chips = self.tpu
        chip_line = (
            f"{chips.count} x {chips.generation}"
            + (f", {chips.hbm_gib_per_chip} GiB HBM each" if chips.hbm_gib_per_chip else "")
            + (f", ranks per host: {', '.join(map(str, chips.rank_counts))}" if chips.rank_counts else "")
            if chips.count
            else "none visible"
        )
        rows = [
            ("device to use", f"{self.device!r}  (device_map={self.device_map!r})"),
            ("TPU chips", chip_line),
            (
                "torch.accelerator",
                "torch not installed"
                if acc is None
                else f"type={acc.type}, available={acc.available}, count={acc.count}",
            ),
            ("holds the TPU", {True: "yes", False: "no", None: "n/a (torch_tpu not loaded)"}[self.holds_tpu]),
            ("memory", f"{self.memory_gib:.1f} GiB" if self.memory_gib else "unknown"),
            ("python", self.python),
        ]
        rows += [(name, v or "not installed") for name, v in self.versions.items()]
        rows += [(k, v) for k, v in self.environment.items()]
        return rows

    def __str__(self) -> str:
        lines = ["tpu_lab probe"]
        lines += [f"  {k:<18} {v}" for k, v in self._summary_rows()]
        lines.append(f"findings ({len(self.findings)}):" if self.findings else "findings: none")
        for f in self.findings:
            lines.append(f"  [{f.severity}] {f.code}: {f.message}")
            lines.append(f"      fix: {f.fix}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return _render.report_html("Device probe", self._summary_rows(), self.findings)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": str(self), "text/html": self._repr_html_()}


def probe(
    *,
    sysfs_root: str | os.PathLike = "/sys",
    dev_root: str | os.PathLike = "/dev",
    environ: Mapping[str, str] | None = None,
    versions: Mapping[str, str | None] | None = None,
    accelerator: AcceleratorInfo | None = None,
    holds_tpu: bool | None = None,
) -> DeviceReport:
    """Take a snapshot of what this process sees. Never initialises a device.

    Every argument has the real default; pass values to see what the probe says elsewhere
    (``versions`` entries override the installed ones, None meaning "not installed";
    ``accelerator``/``holds_tpu`` replace what torch reports).
    """
    environ = os.environ if environ is None else environ
    real = installed_versions()
    found = {**real, **(versions or {})}
    chips = scan_tpu_chips(sysfs_root, dev_root)
    if accelerator is None and found["torch"] and real["torch"]:
        accelerator = _ask_torch()
    if holds_tpu is None:
        holds_tpu = _holds_tpu()
    device = recommended_device(chips, bool(found["torch_tpu"]), accelerator.cuda_devices if accelerator else 0)
    env = {k: environ[k] for k in sorted(environ) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}
    findings = diagnose(
        versions=found, chips=chips, accelerator=accelerator, holds_tpu=holds_tpu, device=device, environ=env
    )
    return DeviceReport(
        python=platform.python_version(),
        versions=found,
        accelerator=accelerator,
        tpu=chips,
        holds_tpu=holds_tpu,
        device=device,
        device_map=device,
        environment=env,
        memory_gib=memory_gib(),
        findings=findings,
    )


def memory_gib(
    proc_root: str | os.PathLike = "/proc", cgroup_root: str | os.PathLike = "/sys/fs/cgroup"
) -> float | None:
    """RAM this process may use: MemTotal, capped by a cgroup v2/v1 memory limit (containers, Binder)."""
    from pathlib import Path

    limits = []
    try:
        for line in (Path(proc_root) / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for name in ("memory.max", "memory/memory.limit_in_bytes"):
        try:
            value = (Path(cgroup_root) / name).read_text().strip()
        except OSError:
            continue
        if value.isdigit():
            limits.append(int(value))
    return round(min(limits) / 2**30, 2) if limits else None


def recommended_device(chips: TpuChips, torch_tpu_installed: bool, cuda_devices: int) -> str:
    """'tpu' where chips are visible and torch_tpu is installed, else 'cuda' with a GPU, else 'cpu'."""
    if chips.count and torch_tpu_installed:
        return "tpu"
    return "cuda" if cuda_devices else "cpu"


def _ask_torch() -> AcceleratorInfo:
    # Imported here: `import tpu_lab` must stay cheap. With torch_tpu installed this autoloads it, and
    # for an uninitialised TPU torch.accelerator.device_count() only scans PCI (torch_tpu 0.2.0).
    import torch

    acc = torch.accelerator.current_accelerator()
    return AcceleratorInfo(
        type=acc.type if acc is not None else None,
        available=bool(torch.accelerator.is_available()),
        count=int(torch.accelerator.device_count()),
        torch_cuda=torch.version.cuda,
        cuda_devices=torch.cuda.device_count(),
    )


def _holds_tpu() -> bool | None:
    if "torch_tpu" not in sys.modules:
        return None
    try:
        import torch

        return bool(torch.tpu.is_initialized())  # type: ignore[attr-defined]  # registered by torch_tpu
    except Exception:  # an unexpected torch_tpu build: say "unknown" rather than fail the probe
        return None


def diagnose(
    *,
    versions: Mapping[str, str | None],
    chips: TpuChips,
    accelerator: AcceleratorInfo | None,
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
                f'Pass an explicit device: device_map="{device}" here, "tpu" on a TPU VM '
                "(tpu_lab.load_model does this for you).",
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
    kernels_v, tf_v = versions.get("kernels"), versions.get("transformers")
    if kernels_v and tf_v:
        kernels_spec = required_range("transformers", "kernels", extra="kernels")
        if kernels_spec and outside_range(kernels_v, kernels_spec):
            add(
                Finding(
                    "kernels-version-mismatch",
                    "warning",
                    f"kernels {kernels_v} is outside the range transformers {tf_v} requires ({kernels_spec}): "
                    "use_kernels=True will raise 'Kernels are not available'.",
                    f'pip install "kernels{kernels_spec}" if it exists, or a transformers release that accepts kernels '
                    f'{kernels_v}; note `pip install "transformers[kernels]"` may silently downgrade transformers.',
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
    order = {"error": 0, "warning": 1, "info": 2}
    return tuple(sorted(out, key=lambda f: order[f.severity]))


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
