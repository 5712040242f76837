"""The ranks' compile-watcher files: how a launch arms the watcher in every rank (``watch_env``: a flag
in the ranks' environment, so every runner arms it by passing ``job.env`` on), where each rank writes
(``rank{R}.compiles.json`` in its run folder, beside ``tl.report``'s values) and how a runner reads them
while the ranks run (``CompileFiles``: one stat per rank per poll, the live state into ``RunState``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tpu_lab.tp.job import Job
from tpu_lab.tp.rank_live import RankCompiles
from tpu_lab.tp.results import read_json

RANK_FILE = "rank{rank}.compiles.json"


def watch_env(job: Job, watch: bool) -> Job:
    """``job`` with the compile watcher switched on in its ranks' environment when ``watch`` (every runner
    passes ``job.env`` to every rank, so this one place arms all of them)."""
    from tpu_lab.tp._worker import WATCH_ENV

    env = {k: v for k, v in job.env.items() if k != WATCH_ENV}
    if watch:
        env[WATCH_ENV] = "1"
    return dataclasses.replace(job, env=env)


def read_rank_file(run_dir: Path, rank: int) -> dict[str, Any] | None:
    """A rank's watcher file (None: it never imported Dynamo, or it was not watched)."""
    data = read_json(run_dir / RANK_FILE.format(rank=rank))
    return data if isinstance(data, dict) else None


def watched(env: Mapping[str, str]) -> bool:
    """Whether the ranks' environment arms the compile watcher."""
    from tpu_lab.tp._worker import WATCH_ENV

    return env.get(WATCH_ENV) == "1"


class CompileFiles:
    """The watcher files of one node's ranks, read as they change (one stat per rank per poll), for the
    runner that polls that node: it puts each rank's live compiles in the run state."""

    def __init__(self, run_dir: Path, ranks: Iterable[int]) -> None:
        self.run_dir = run_dir
        self._stamp: dict[int, tuple[int, int]] = {r: (0, 0) for r in ranks}
        self.files: dict[int, dict[str, Any] | None] = {r: None for r in self._stamp}

    def update(self, state: Any) -> list[int]:
        """Read the files that changed into ``state`` (a RunState); returns the ranks whose compiles changed."""
        changed = []
        for rank, before in self._stamp.items():
            try:
                st = (self.run_dir / RANK_FILE.format(rank=rank)).stat()
            except OSError:
                continue
            if (st.st_mtime_ns, st.st_size) == before:
                continue
            data = read_rank_file(self.run_dir, rank)
            if data is None:
                continue  # gone between the stat and the read: the next poll sees it
            self._stamp[rank] = (st.st_mtime_ns, st.st_size)
            self.files[rank] = data
            state.set_compiles(rank, RankCompiles.from_marker(data))
            changed.append(rank)
        return changed
