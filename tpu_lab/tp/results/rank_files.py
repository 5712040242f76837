"""What each rank hands back through its run folder, as files: its value (``tl.report(value)``:
``rank{R}.value.json``), its status (exit code, traceback: ``rank{R}.status.json``, written by
``tp.launch.rank_worker``) and its compiles (``rank{R}.compiles.json``, written by the rank's watcher,
``tpu_lab.compile.watching.rank_watch``). Every file is written to a temporary name and renamed
(``write_atomic``), so a reader never sees half a file; ``CompileFiles`` reads the compile files while
the ranks run (one stat per rank per poll) and puts each rank's live compiles into the ``RunState``.

Ranks import this module (``tl.report``, the status file): it stays light (no torch, nothing of the
kernel's side).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tpu_lab.errors import InvalidArgument, TpuLabWarning
from tpu_lab.tp.results.checked_files import MAX_REPORT_BYTES, checked_compile_file, read_checked
from tpu_lab.tp.results.live_compiles import RankCompiles

# Duplicated from tp.launch.torchrun_command on purpose: ranks import this module, and it must stay this light.
RESULT_DIR_ENV = "TPU_LAB_RESULT_DIR"
LAUNCHED_RANK = os.environ.get("RANK", "0")
"""This rank's number as the launcher gave it, read when the rank starts: files are named by it, not by
an environment variable the rank's own code could change."""


def report(value: Any) -> None:
    """Hand ``value`` (anything JSON can encode) back to ``tl.launch`` from this rank; the last call wins."""
    folder = os.environ.get(RESULT_DIR_ENV)
    if not folder:
        warnings.warn(
            "tpu_lab: tl.report() was called outside a tl.launch worker, so the value goes nowhere. "
            "Run this code with tl.launch(...) or %%tp_run.",
            TpuLabWarning,
            stacklevel=2,
        )
        return
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(
            f"tl.report() got a value JSON cannot encode: {e}.",
            cause="tensors, arrays and custom objects are not JSON",
            fix="Report plain data: e.g. tensor.tolist(), float(x), str(obj).",
        ) from e
    if len(text) > MAX_REPORT_BYTES:
        raise InvalidArgument(
            f"tl.report() got a value of {len(text) / 2**20:.1f} MiB as JSON, above the "
            f"{MAX_REPORT_BYTES // 2**20} MiB a launch hands back to the notebook.",
            cause="the value travels through the run folder into the kernel's memory",
            fix="Write the data to a file (np.save, torch.save, a .jsonl) and report its path.",
        )
    write_atomic(Path(folder) / f"rank{LAUNCHED_RANK}.value.json", text)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """A file a rank wrote, or None when absent; one too large or too deep to trust is None too, said once."""
    value, problem = read_checked(path)
    if problem:
        warnings.warn(f"tpu_lab: {problem} ({path.parent}): it is left out.", TpuLabWarning, stacklevel=2)
    return value


RANK_FILE = "rank{rank}.compiles.json"


def read_rank_file(run_dir: Path, rank: int) -> dict[str, Any] | None:
    """A rank's watcher file (None: it never imported Dynamo, or it was not watched)."""
    return checked_compile_file(read_json(run_dir / RANK_FILE.format(rank=rank)))


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
