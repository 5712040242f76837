"""The process table: which live processes carry a marker in their environment (Linux ``/proc``).

tl.launch marks every process of a run with ``TPU_LAB_RUN_ID=<id>``; this finds them again, however
they detached (own sessions, re-parented to init), so a stop can reach every one.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def pids_with_env(marker: bytes, proc_root: str | os.PathLike = "/proc") -> list[int]:
    """Live (non-zombie) processes other than this one whose environment contains ``marker``
    (e.g. ``b"TPU_LAB_RUN_ID=abc"``)."""
    me, pids = os.getpid(), []
    for entry in Path(proc_root).glob("[0-9]*"):
        try:
            if int(entry.name) != me and marker in (entry / "environ").read_bytes() and not _is_zombie(entry):
                pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


def kill_all(pids: list[int]) -> int:
    """SIGKILL each pid that still exists; returns how many were signalled."""
    killed = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def _is_zombie(entry: Path) -> bool:
    stat = (entry / "stat").read_text()
    return stat[stat.rindex(")") + 2] == "Z"
