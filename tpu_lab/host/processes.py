"""The process table (Linux ``/proc``): which live processes carry a marker in their environment, and
which descend from a given process.

tl.launch marks every process of a run with ``TPU_LAB_RUN_ID=<id>``; this finds them again, however
they detached (own sessions, re-parented to init). A descendant that cleared its environment is still
found through its parent links while the run's torchrun (a child subreaper) is alive.
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


def env_values(name: str, proc_root: str | os.PathLike = "/proc") -> set[str]:
    """The values of environment variable ``name`` across live processes (e.g. the ids of runs in progress)."""
    prefix, values = name.encode() + b"=", set()
    for entry in Path(proc_root).glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError):
            for item in (entry / "environ").read_bytes().split(b"\0"):
                if item.startswith(prefix):
                    values.add(item[len(prefix) :].decode(errors="replace"))
    return values


def descendants(root: int, proc_root: str | os.PathLike = "/proc") -> list[int]:
    """Live (non-zombie) processes below ``root`` in the parent tree, found from ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for entry in Path(proc_root).glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def alive(pid: int, proc_root: str | os.PathLike = "/proc") -> bool:
    """Whether ``pid`` is a live (non-zombie) process here."""
    entry = Path(proc_root) / str(pid)
    try:
        return not _is_zombie(entry)
    except (OSError, ValueError, IndexError):
        return False


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
