"""Which files of a folder are TORCH_TRACE logs, and which logs belong to one run: every process writes its
own file, so a job of N ranks leaves N files, and a folder may hold several jobs (restarts, other days).
A run is the logs that started together with distinct ranks; a rank seen again starts the next run."""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterator
from pathlib import Path

from tpu_lab.compile.trace.trace_fold import fold_log
from tpu_lab.compile.trace.trace_log import ProcessLog, read_process_log
from tpu_lab.compile.watching.watch_table import WatchTable

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


def read_logs(root: Path) -> tuple[list[tuple[ProcessLog, WatchTable]], list[str], list[str]]:
    """(each log under ``root`` with its table, the other files skipped, the logs that could not be read:
    path and why)."""
    logs: list[Path] = []
    skipped: list[Path] = []
    for path in candidates(root):
        (logs if is_trace_log(path) else skipped).append(path)
    done = [read_and_fold(p) for p in logs]  # one process: a pool would re-run a user's unguarded script
    return (
        [d for d in done if not isinstance(d, str)],
        [str(p) for p in skipped],
        [d for d in done if isinstance(d, str)],
    )


def read_and_fold(path: Path) -> tuple[ProcessLog, WatchTable] | str:
    """One log read and folded into its table (the log slimmed: its compiles' details are in the table),
    or why it could not be read."""
    try:
        log = read_process_log(path)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        return f"{path}: {type(e).__name__}: {e}"
    return log.slim(), fold_log(log)


def group_runs(logs: list[tuple[ProcessLog, WatchTable]]) -> list[list[tuple[ProcessLog, WatchTable]]]:
    """Logs by run, in the order they started: a log joins the current run while its rank is new there and
    it started within ``SAME_RUN_S`` of the run's first log; a log with no rank is a run of its own process."""
    runs: list[list[tuple[ProcessLog, WatchTable]]] = []
    for pair in sorted(logs, key=lambda p: (p[0].day, p[0].first_at, p[0].rank or 0, p[0].path)):
        log, run = pair[0], runs[-1] if runs else None
        joins = (
            run is not None
            and log.rank is not None
            and all(g.rank is not None and g.rank != log.rank for g, _ in run)
            and log.day == run[0][0].day
            and abs(log.first_at - run[0][0].first_at) <= SAME_RUN_S
        )
        if joins and run is not None:
            run.append(pair)
        else:
            runs.append([pair])
    return runs
