"""Run directories: one per launch under the temp directory (the worker script, each rank's value, status
and log), the last ``KEEP_RUNS`` kept for debugging and older ones removed when a new run starts.

A directory whose run still has a live process (another kernel's launch) is never removed, nor one owned
by another user.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tpu_lab.errors import EnvironmentProblem
from tpu_lab.host.processes import alive, env_values
from tpu_lab.tp.launch.torchrun_command import RUN_ID_ENV

PREFIX = "tpu_lab_run_"
HOST_PREFIX = "tpu_lab_host_"
"""A host runner's folders (one per host of a multi-host launch): ``tpu_lab_host_<host marker>.XXXX``."""
KEEP_RUNS = 5
"""How many finished run directories are kept (newest first); docs/api.md documents it."""


def new_run_dir(run_id: str, root: str | os.PathLike | None = None) -> Path:
    """A fresh, private (0700) directory for run ``run_id``; older runs beyond KEEP_RUNS are removed first."""
    root = Path(root or tempfile.gettempdir())
    try:
        prune_run_dirs(root, keep=KEEP_RUNS - 1)
        return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{run_id}.", dir=root))
    except OSError as e:
        raise EnvironmentProblem(
            f"Cannot create the launch's run folder under {root}: {e.strerror or e}.",
            cause="the temporary folder is missing, read-only, full, or not yours",
            fix="Point TMPDIR at a writable folder with free space (e.g. TMPDIR=$HOME/tmp) and restart the kernel.",
        ) from e


def prune_run_dirs(root: str | os.PathLike, *, keep: int = KEEP_RUNS, prefix: str = PREFIX) -> list[Path]:
    """Remove all but the ``keep`` newest run directories of this user under ``root`` whose run has no
    live process; returns the removed. ``prefix=HOST_PREFIX``: a host runner's folders (keep=0 there:
    the runner removes its own, so any left were left by a runner that was killed)."""
    mine = []
    for path in Path(root).glob(f"{prefix}*"):
        try:
            st = path.lstat()
        except OSError:
            continue
        if path.is_dir() and not path.is_symlink() and st.st_uid == os.getuid():
            mine.append((st.st_mtime, path))
    mine.sort(reverse=True)
    old = [path for _, path in mine[keep:]]
    if not old:
        return []
    live = env_values(RUN_ID_ENV)  # runs in progress, from any kernel
    removed = []
    for path in old:
        if run_id_of(path, prefix) in live:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


OWNER_FILE = "owner.pid"
"""In a folder whose owner is a long-lived process without the run's marker (a Ray actor): its pid."""


def claim_dir(path: Path) -> None:
    """Mark ``path`` as this process's, so a later ``prune_orphan_dirs`` leaves it while this lives."""
    (path / OWNER_FILE).write_text(str(os.getpid()))


def prune_orphan_dirs(root: str | os.PathLike, prefix: str) -> list[Path]:
    """Remove this user's ``prefix`` folders under ``root`` whose owner process is gone (killed before it
    could clean up); a folder without an owner file, or whose owner lives, stays."""
    removed = []
    for path in Path(root).glob(f"{prefix}*"):
        try:
            mine = path.is_dir() and not path.is_symlink() and path.lstat().st_uid == os.getuid()
            pid = int((path / OWNER_FILE).read_text()) if mine else 0
        except (OSError, ValueError):
            continue
        if pid > 0 and not alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def remove_run_dir(path: Path) -> None:
    """A start that failed leaves nothing behind."""
    shutil.rmtree(path, ignore_errors=True)


def run_id_of(path: Path, prefix: str = PREFIX) -> str:
    return path.name[len(prefix) :].partition(".")[0]
