"""``probe()``: what this kernel sees, and which TPU traps apply here.

An uncached snapshot. It never initialises a device and never calls the ``torch.tpu`` functions that
raise from user code: chips come from sysfs (``tpu_lab.host.chips``), the accelerator from
``torch.accelerator`` (which, for an uninitialised TPU, also only scans PCI), and "does this process
hold the TPU" from ``torch.tpu.is_initialized()``, asked only when torch_tpu is already loaded.

Facts are gathered here; ``diagnose()`` turns them into findings as pure code, so every finding can
be triggered in tests through injected versions, environment and sysfs trees. The device choice
(``recommended_device``, ``pick_device``, ``device_choices``) lives here too: the loader asks the probe.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from tpu_lab._checks import boolean, folder_path, mapping, of_type
from tpu_lab._report import Finding, Report, report_html, report_text
from tpu_lab.errors import InvalidArgument
from tpu_lab.host.chips import TpuChips, scan_tpu_chips
from tpu_lab.host.chips import holds_tpu as _holds_tpu
from tpu_lab.host.findings import diagnose
from tpu_lab.host.memory import memory_gib
from tpu_lab.host.versions import installed_versions

ENV_PREFIXES = ("TORCH_TPU_", "TPU_")
ENV_NAMES = ("PJRT_DEVICE", "XLA_FLAGS", "LIBTPU_INIT_ARGS", "TORCH_DEVICE_BACKEND_AUTOLOAD")
ACCELERATOR_FIX = (
    'Pass e.g. accelerator=AcceleratorInfo("tpu", True, 8) from tpu_lab.host.probe, or None for what torch reports.'
)


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
class DeviceReport(Report):
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
            ("device to use", f'{self.device} (load with device_map="{self.device_map}")'),
            ("TPU chips", chip_line),
            (
                "torch.accelerator",
                "torch not installed"
                if acc is None
                else (
                    f"{acc.type}, {'available' if acc.available else 'not available'}, {acc.count} device(s)"
                    if acc.type
                    else "no accelerator (CPU only)"
                ),
            ),
            ("holds the TPU", {True: "yes", False: "no", None: "n/a (torch_tpu not loaded)"}[self.holds_tpu]),
            ("memory", f"{self.memory_gib:.1f} GiB" if self.memory_gib else "unknown"),
            ("python", self.python),
        ]
        rows += [(name, v or "not installed") for name, v in self.versions.items()]
        rows += [(k, v) for k, v in self.environment.items()]
        return rows

    def to_text(self) -> str:
        head = f"findings ({len(self.findings)}):" if self.findings else "findings: none"
        return report_text("tpu_lab probe", [*self._summary_rows(), (head, "")], self.findings)

    def to_html(self) -> str:
        return report_html("Device probe", self._summary_rows(), self.findings)


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
    sysfs_root = folder_path(sysfs_root, "sysfs_root", default="/sys")
    dev_root = folder_path(dev_root, "dev_root", default="/dev")
    environ = os.environ if environ is None else mapping(environ, "environ", example='{"TPU_NAME": "v6e-8"}')
    versions = mapping(versions, "versions", values=(str, type(None)), example='{"torch_tpu": "0.2.0"}')
    if accelerator is not None:
        of_type(accelerator, "accelerator", AcceleratorInfo, "an AcceleratorInfo", ACCELERATOR_FIX)
    if holds_tpu is not None:
        boolean(holds_tpu, "holds_tpu")
    real = installed_versions()
    unknown = sorted(set(versions) - set(real))
    if unknown:
        raise InvalidArgument(
            f"versions names a package the probe does not read: {unknown[0]!r}.",
            cause="a typo (e.g. a hyphen for an underscore): the entry would be shown, and nothing simulated",
            fix=f"Use the names {', '.join(real)} (None meaning not installed).",
        )
    found = {**real, **versions}
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


def recommended_device(chips: TpuChips, torch_tpu_installed: bool, cuda_devices: int) -> str:
    """'tpu' where chips are visible and torch_tpu is installed, else 'cuda' with a GPU, else 'cpu'."""
    if chips.count and torch_tpu_installed:
        return "tpu"
    return "cuda" if cuda_devices else "cpu"


def pick_device() -> str:
    """The probe's device choice without its findings (what ``load_model(device=None)`` uses): cheap."""
    import torch

    has_tpu = importlib.util.find_spec("torch_tpu") is not None  # metadata look-ups cost ms each
    return recommended_device(scan_tpu_chips(), has_tpu, torch.cuda.device_count())


@dataclass(frozen=True)
class DeviceChoice:
    """A device the loader can offer, and why not when it can't."""

    name: str
    """"tpu", "cuda" or "cpu"."""
    available: bool
    """Whether loading there can work in this process."""
    reason: str
    """Why it is unavailable (empty when available)."""


def device_choices(report: DeviceReport) -> list[DeviceChoice]:
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
