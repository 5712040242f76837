"""Helpers for tests, benchmarks and teaching notebooks (not part of a launch): fake TPU hosts built from
plain files (here), and a simulated multi-host slice on loopback (``tpu_lab.testing.loopback``).

``write_fake_tpu_host`` lays out the sysfs and /dev entries torch_tpu reads to find chips, so the real
detection code in ``tpu_lab.host.chips`` can run on "a v6e host with 4 chips" anywhere.

May import: every layer (it sits beside the package root, above widgets); nothing in the package
imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

from tpu_lab.host.chips import generation_by_name


def write_fake_tpu_host(
    root: str | os.PathLike, generation: str = "v6e", chips: int = 4, *, vfio: bool = True
) -> tuple[Path, Path]:
    """Write a fake PCI tree with ``chips`` TPU chips of ``generation`` under ``root``.

    Returns ``(sysfs_root, dev_root)`` to pass to ``tpu_lab.probe``. A non-Google device is always
    added so detection has something to skip; ``vfio=False`` leaves the chips without a VFIO group
    (what a container without ``/dev/vfio`` looks like).
    """
    gen = generation_by_name(generation)
    sysfs, dev = Path(root) / "sys", Path(root) / "dev"
    devices = sysfs / "bus" / "pci" / "devices"
    groups = sysfs / "kernel" / "iommu_groups"
    devices.mkdir(parents=True, exist_ok=True)
    (dev / "vfio").mkdir(parents=True, exist_ok=True)
    entries = [("0x8086", "0x1237")] + [("0x1ae0", gen.pci_device_id)] * chips
    for slot, (vendor, device_id) in enumerate(entries):
        d = devices / f"0000:00:{slot + 4:02x}.0"
        d.mkdir(exist_ok=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device_id + "\n")
        group = groups / str(slot)
        group.mkdir(parents=True, exist_ok=True)
        if not (d / "iommu_group").is_symlink():
            (d / "iommu_group").symlink_to(group)
        if vfio and vendor == "0x1ae0":
            (dev / "vfio" / str(slot)).touch()
    return sysfs, dev
