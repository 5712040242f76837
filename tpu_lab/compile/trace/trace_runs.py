"""Which files of a folder are TORCH_TRACE logs, and which logs belong to one run: every process writes its
own file, so a job of N ranks leaves N files, and a folder may hold several jobs (restarts, other days).
A run is the logs that started together with distinct ranks; a rank seen again starts the next run."""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterator
from pathlib import Path

from tpu_lab.compile.trace.trace_log import ProcessLog, read_process_log

_FIRST = re.compile(rb"^[VIWEDC]\d{4} \d\d:\d\d:\d\d(?:\.\d+)? +\d+ [^\]]*\] \{\"")
MAX_DEPTH = 4  # folders below the one named: a copy per host (host/rank files) is two deep
MAX_FILES = 10_000
SAME_RUN_S = 600.0
"""Logs of one run start within this of its first: ranks start together; a restart is a rank seen again."""


def is_trace_log(path: Path) -> bool:
    """Whether a file opens as a TORCH_TRACE log (its first line: a glog header and a JSON object)."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            return bool(_FIRST.match(f.readline(4096)))
    except (OSError, EOFError, gzip.BadGzipFile):
        return False


def candidates(root: Path) -> Iterator[Path]:
    """Every regular file under ``root`` (``root`` itself if it is one), sorted, symlinks not followed."""
    if root.is_file():
        yield root
        return
    found = 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if depth < MAX_DEPTH and not d.startswith("."))
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                found += 1
                if found > MAX_FILES:
                    return
                yield path


def read_logs(root: Path) -> tuple[list[ProcessLog], list[str], list[str]]:
    """(the logs under ``root``, the other files skipped, the logs that could not be read: path and why)."""
    logs, skipped, unreadable = [], [], []
    for path in candidates(root):
        if not is_trace_log(path):
            skipped.append(str(path))
            continue
        try:
            logs.append(read_process_log(path))
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            unreadable.append(f"{path}: {type(e).__name__}: {e}")
    return logs, skipped, unreadable


def group_runs(logs: list[ProcessLog]) -> list[list[ProcessLog]]:
    """Logs by run, in the order they started: a log joins the current run while its rank is new there and
    it started within ``SAME_RUN_S`` of the run's first log; a log with no rank is a run of its own process."""
    runs: list[list[ProcessLog]] = []
    for log in sorted(logs, key=lambda g: (g.day, g.first_at, g.rank or 0, g.path)):
        run = runs[-1] if runs else None
        joins = (
            run is not None
            and log.rank is not None
            and all(g.rank is not None and g.rank != log.rank for g in run)
            and log.day == run[0].day
            and abs(log.first_at - run[0].first_at) <= SAME_RUN_S
        )
        if joins and run is not None:
            run.append(log)
        else:
            runs.append([log])
    return runs
