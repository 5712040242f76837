"""The tiny-model cache's integrity: a build's marker records every file's digest, and an entry is
trusted only when it lies inside the cache and its files still match; staging folders of killed builds
are removed (a live build holds a lock on its own)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tpu_lab.errors import EnvironmentProblem

MARKER = "tpu_lab_tiny.json"


def _recorded(target: Path) -> dict | None:
    try:
        marker = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _matches(target: Path, spec: dict, root: Path | None = None) -> bool:
    """Whether ``target`` is a complete build of ``spec``. A marker alone is not trusted: an entry of the
    cache (``root``) must lie inside it, and every file must have the digest recorded at build time."""
    recorded = _recorded(target)
    if recorded is None or {k: v for k, v in recorded.items() if k != "files"} != spec:
        return False
    if root is not None and (target.is_symlink() or not target.resolve().is_relative_to(root.resolve())):
        raise EnvironmentProblem(
            f"The tiny-model cache entry {target} points outside the cache, to {target.resolve()}.",
            cause="a symlink put into the cache (by another user or a script); its weights are not the ones built here",
            fix=f"Delete {target} (it is rebuilt on the next call), and check who can write to {root}.",
        )
    if "files" not in recorded:
        return False  # built before markers recorded digests (see _is_legacy)
    files = recorded["files"]
    if not (isinstance(files, dict) and files and all(isinstance(v, str) for v in files.values())):
        raise EnvironmentProblem(
            f"The marker of the tiny model at {target} records no file digests (files={files!r:.60}).",
            cause="the marker was edited or written by something other than tpu_lab: the weights cannot be checked",
            fix=f"Delete {target}; it is rebuilt on the next call.",
        )
    if _digests(target) != files:
        raise EnvironmentProblem(
            f"The files of the tiny model at {target} do not match what was recorded when it was built.",
            cause="the folder was modified or replaced after the build (edited, partly copied, or tampered with)",
            fix=f"Delete {target}; it is rebuilt on the next call.",
        )
    return True


def _is_legacy(target: Path, spec: dict) -> bool:
    recorded = _recorded(target)
    return recorded == spec and target.is_dir() and not target.is_symlink()


def _digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file below ``folder`` (the marker excepted); a symlink is recorded as one."""
    import hashlib

    out = {}
    for file in sorted(folder.rglob("*")):
        name = file.relative_to(folder).as_posix()
        if file.is_symlink():
            out[name] = "symlink:" + os.readlink(file)
        elif file.is_file() and name != MARKER:
            out[name] = hashlib.sha256(file.read_bytes()).hexdigest()
    return out


def _lock(folder: Path) -> int:
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _remove_stale_staging(parent: Path, prefix: str, min_age: float = 60.0) -> None:
    """Remove staging folders of killed builds: older than ``min_age`` s (a folder is locked right after it
    is made) and not locked by a live builder."""
    import fcntl
    import time

    for folder in parent.glob(f"{prefix}*"):
        try:
            if not folder.name.startswith(".") or folder.is_symlink() or not folder.is_dir():
                continue
            if time.time() - folder.stat().st_mtime < min_age:
                continue
            fd = os.open(folder, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass  # a live build holds it
        finally:
            os.close(fd)
