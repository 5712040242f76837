"""How much memory this process may use: the host's RAM, capped by a container's cgroup limit (Binder)."""

from __future__ import annotations

import os
from pathlib import Path


def memory_gib(
    proc_root: str | os.PathLike = "/proc", cgroup_root: str | os.PathLike = "/sys/fs/cgroup"
) -> float | None:
    """RAM this process may use, in GiB: MemTotal, capped by a cgroup v2/v1 memory limit."""
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
