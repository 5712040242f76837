"""The compile watcher inside one launched rank: a ``Watch`` over the rank's code, its table written to
the run folder (``rank{R}.compiles.json``, beside ``tl.report``'s values) at every compile start and end,
with the live marker (compiling now: which function, since when; compiles so far; what it did last).

Cheap by construction: ``arm`` only puts an import hook on ``torch._dynamo``; a rank that never imports
it (no torch.compile) never starts a watch. Every write goes to a temporary name and is renamed, so a
rank killed mid-compile leaves its table up to that compile and the marker saying what it was compiling.
The table of a compile lands a moment after it ends (Dynamo files its record after the end callback),
so a small writer thread folds it in then.

This module knows nothing about launches: ``tp.launch.rank_worker`` arms it (when the launch sets
``tp.launch.rank_worker.WATCH_ENV``) with the run folder and the rank.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

LIMIT_TRIGGER = "recompile_limit"  # dynamo_source.LIMIT_TRIGGER (not imported: this module loads before torch)
FILE = "rank{rank}.compiles.json"
SETTLE_S = 0.2  # after a compile ends, the wait for Dynamo's record before the table is written


def arm(folder: str, rank: int) -> Callable[[], None]:
    """Watch this rank's compiles from the moment ``torch._dynamo`` is imported; returns ``finish``,
    which writes the final table (call it when the rank's code ends, however it ends)."""
    rank_watch = RankWatch(Path(folder) / FILE.format(rank=rank), rank)
    if "torch._dynamo" in sys.modules:
        rank_watch.start()
    else:
        sys.meta_path.insert(0, _AfterImport("torch._dynamo", rank_watch.start))
    return rank_watch.finish


class _AfterImport:
    """Runs ``then`` once module ``name`` has been imported (Python has no post-import hook). A finder and
    loader by their methods alone: subclassing importlib.abc's would import importlib.resources (~4 ms)."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        real, then = spec.loader, self.then

        class Loader:
            def create_module(self, spec: Any) -> Any:
                return real.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                real.exec_module(module)
                then()

            def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...: the real loader's
                return getattr(real, name)

        spec.loader = Loader()  # type: ignore[assignment]  # a loader by its methods
        return spec


class RankWatch:
    """One rank's watch and the file it keeps current."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path, self.rank = path, rank
        self.watch: Any = None
        self.count = 0
        self.compiling: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.table: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._finished = False

    def start(self) -> None:
        """Open the watch in this thread (the one that imported Dynamo: the rank's main thread, as a rule)."""
        try:
            from torch._dynamo.callback import callback_handler

            from tpu_lab.compile.sources import dynamo_source
            from tpu_lab.compile.watching.watch import Watch

            self.watch = Watch().__enter__()
            dynamo_source.add_listener(self._on_start)
            self._handler = callback_handler
            callback_handler.register_end_callback(self._on_end)
        except Exception as e:  # a torch without these hooks: the rank runs unwatched, and says so
            self.watch = None
            self._write({"error": f"the compile watcher could not start: {type(e).__name__}: {e}"})
            return
        threading.Thread(target=self._writer, name="tpu_lab-rank-watch", daemon=True).start()
        self._write_table()

    def _on_start(self, capture: Any) -> None:
        if capture.trigger == LIMIT_TRIGGER:  # a refusal: nothing compiles, the call runs uncompiled
            self._ended.set()
            return
        if self._on_end not in self._handler.end_callbacks:  # torch._dynamo.reset() clears callbacks
            self._handler.register_end_callback(self._on_end)
        from tpu_lab.compile.sources.frames import renamed  # loaded with Dynamo's source, by the first compile

        inputs = ", ".join(f"{renamed(n, capture.names)}: {d}" for n, d in capture.signature)  # the user's names
        what = {"function": str(capture.function), "inputs": inputs}
        with self._lock:
            self.compiling = {**what, "since": time.time()}
        self._write_table()  # the previous compile's record has landed by now

    def _on_end(self, args: Any) -> None:
        with self._lock:
            if self.compiling is None:
                return
            self.count += 1
            self.last = {**self.compiling, "ended": time.time()}
            self.compiling = None
        self._write(None)  # the marker at once; the table when Dynamo's record is in
        self._ended.set()

    def _writer(self) -> None:
        while self._ended.wait():
            self._ended.clear()
            time.sleep(SETTLE_S)
            if self._finished:
                return
            self._write_table()

    def _write_table(self) -> None:
        try:
            table = self.watch.to_dict()
        except Exception as e:  # never let the watcher break the rank's code
            table = {"error": f"{type(e).__name__}: {e}"}
        with self._lock:
            self.table = table
        self._write(None)

    def finish(self) -> None:
        """The final table (and whether Dynamo was switched off), written once."""
        if self._finished or self.watch is None:
            return
        self._finished = True
        self._ended.set()
        self._write_table()
        self._write({"done": True, "dynamo_disabled": _dynamo_disabled()})

    def _write(self, extra: dict[str, Any] | None) -> None:
        with self._lock:
            data: dict[str, Any] = {
                "rank": self.rank,
                "pid": os.getpid(),
                "updated": time.time(),
                "compiles": self.count,
                "compiling": self.compiling,
                "last": self.last,
                "tpu": _tpu_counters() if self.watch is not None and self.watch.on_tpu else None,
                "table": self.table,
                **(extra or {}),
            }
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                tmp.write_text(json.dumps(data))
                os.replace(tmp, self.path)
            except OSError:
                pass  # the run folder is gone (the launch ended): nothing to tell


def _dynamo_disabled() -> bool:
    config = getattr(sys.modules.get("torch._dynamo"), "config", None)
    return bool(getattr(config, "disable", False))


def _tpu_counters() -> dict[str, Any] | None:
    """torch_tpu's compile-cache counters of this rank (they never reset: the launch's own diff is per rank)."""
    try:
        import dataclasses

        from tpu_lab.compile.sources.tpu_source import TpuCacheSource

        return dataclasses.asdict(TpuCacheSource().snapshot())
    except Exception:
        return None
