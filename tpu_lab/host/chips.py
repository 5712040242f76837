"""TPU chips on the PCI bus: which generation, how much HBM, which rank counts a host allows, and
whether this process already holds them.

The scan reads sysfs only, the way torch_tpu itself discovers chips (vendor 0x1ae0 with a VFIO group under
/dev/vfio), so it never initialises a device and works without torch_tpu installed. The roots are
parameters so tests and notebooks can point it at a fake tree (see ``tpu_lab.testing``).
``rank_count_problem`` is the one rule for how many processes a TPU host can run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tpu_lab._report import Finding
from tpu_lab.errors import InvalidArgument

GOOGLE_PCI_VENDOR = "0x1ae0"


@dataclass(frozen=True)
class TpuGeneration:
    """One TPU generation as torch_tpu knows it."""

    name: str
    """Marketing name, e.g. ``"TPU v6e"``."""
    pci_device_id: str
    """The PCI device id in ``/sys/bus/pci/devices/*/device``."""
    hbm_gib: int
    """HBM per chip in GiB."""
    rank_counts: tuple[int, ...]
    """Process (rank) counts per host that torch_tpu has a topology for."""


# From torch_tpu 0.2.0 (_internal/utils/hardware.py); other counts fail with
# "No TPU topology found for count: N".
GENERATIONS: dict[str, TpuGeneration] = {
    g.pci_device_id: g
    for g in (
        TpuGeneration("TPU v4", "0x005e", 32, (1, 2, 4, 8)),
        TpuGeneration("TPU v5p", "0x0062", 95, (1, 2, 4, 8)),
        TpuGeneration("TPU v5e", "0x0063", 16, (1, 4, 8)),
        TpuGeneration("TPU v6e", "0x006f", 32, (1, 4, 8)),
        TpuGeneration("TPU v7", "0x0076", 192, (2, 4, 8)),
    )
}


def generation_by_name(name: str) -> TpuGeneration:
    """Look up a generation by a name such as ``"v6e"`` or ``"TPU v6e"``."""
    wanted = name.lower().removeprefix("tpu").strip()
    for gen in GENERATIONS.values():
        if gen.name.lower().removeprefix("tpu").strip() == wanted:
            return gen
    known = ", ".join(g.name.split()[-1] for g in GENERATIONS.values())
    raise InvalidArgument(f"Unknown TPU generation {name!r}.", fix=f"Use one of: {known}.")


@dataclass(frozen=True)
class TpuChips:
    """TPU chips this host exposes to processes."""

    count: int
    """Chips with a VFIO group, i.e. usable by torch_tpu (0 on a machine without a TPU)."""
    generation: str | None
    """Generation name of the first chip (``"TPU v6e"``), ``"TPU"`` if unknown, None without chips."""
    hbm_gib_per_chip: int | None
    """HBM per chip in GiB, None when unknown."""
    rank_counts: tuple[int, ...]
    """Ranks per host torch_tpu can launch on this generation; empty without chips."""
    pci_addresses: tuple[str, ...]
    """PCI addresses of the usable chips."""
    without_vfio: int = 0
    """Google PCI devices seen without a VFIO group (not usable: driver or container problem)."""


def _read(path: Path) -> str:
    with open(path, "rb") as f:  # sysfs files are tiny ASCII: skip text-mode decoding machinery
        return f.read().decode("ascii", "replace").strip().lower()


def scan_tpu_chips(sysfs_root: str | os.PathLike = "/sys", dev_root: str | os.PathLike = "/dev") -> TpuChips:
    """Scan ``<sysfs_root>/bus/pci/devices`` for TPU chips; never touches a device."""
    devices = Path(sysfs_root) / "bus" / "pci" / "devices"
    usable: list[tuple[str, str]] = []
    without_vfio = 0
    try:
        entries = sorted(devices.iterdir())
    except OSError:
        entries = []
    for dev in entries:
        try:
            if _read(dev / "vendor") != GOOGLE_PCI_VENDOR:
                continue
            device_id = _read(dev / "device")
        except OSError:
            continue
        try:
            group = os.readlink(dev / "iommu_group")
            (Path(dev_root) / "vfio" / Path(group).name).stat()
        except OSError:
            without_vfio += 1
            continue
        usable.append((dev.name, device_id))
    if not usable:
        return TpuChips(0, None, None, (), (), without_vfio)
    gen = GENERATIONS.get(usable[0][1])
    return TpuChips(
        count=len(usable),
        generation=gen.name if gen else "TPU",
        hbm_gib_per_chip=gen.hbm_gib if gen else None,
        rank_counts=tuple(n for n in gen.rank_counts if n <= len(usable)) if gen else (),
        pci_addresses=tuple(addr for addr, _ in usable),
        without_vfio=without_vfio,
    )


def rank_count_problem(nproc: int, chips: TpuChips) -> Finding | None:
    """Why a TPU host with ``chips`` cannot run ``nproc`` processes (one per chip), or None when it can.
    A host without chips runs any count on CPU."""
    if not chips.count:
        return None
    fits = [n for n in chips.rank_counts if n <= chips.count]  # a count this host's chips can run
    allowed = ", ".join(map(str, fits[:-1])) + (" or " if len(fits) > 1 else "") + str(fits[-1]) if fits else "none"
    if nproc > chips.count:
        return Finding(
            "more-ranks-than-chips",
            "error",
            f"{nproc} processes need {nproc} TPU chips (one process per chip) but this host has {chips.count}.",
            f"Use {allowed} processes on this host, or a larger host / several hosts.",
        )
    if nproc not in chips.rank_counts:
        return Finding(
            "rank-count-not-allowed",
            "error",
            f"torch_tpu has no {chips.generation} topology for {nproc} processes per host "
            f'("No TPU topology found for count: {nproc}").',
            f"Use {allowed} processes per host.",
        )
    return None


def holds_tpu() -> bool | None:
    """Whether this process already claimed the TPU; None when torch_tpu is not loaded here (then it
    cannot hold it). Never initialises a device."""
    if "torch_tpu" not in sys.modules:
        return None
    try:
        import torch

        return bool(torch.tpu.is_initialized())  # type: ignore[attr-defined]  # registered by torch_tpu
    except Exception:  # an unexpected torch_tpu build: say "unknown" rather than fail
        return None
