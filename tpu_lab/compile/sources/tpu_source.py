"""torch_tpu's compile counts (``TpuCacheSource``: every new op or shape in eager mode, every graph
under torch.compile, from its compile-cache counters, which never reset, so they are diffed), and the
event a source reports per compile. Dynamo's side is ``dynamo_source``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpu_lab.compile.causes.explain import explain


@dataclass(frozen=True)
class CompileEvent:
    """One compilation (or one refusal to compile) seen by a source."""

    source: str
    """``"dynamo"`` or ``"torch_tpu"``."""
    reason: str | None
    """The guard that failed (Dynamo's text), None for a first compile or when the source can't tell."""
    seconds: float
    """Compile time."""
    limit_hit: bool = False
    """Dynamo refused to compile: the recompile limit was reached and the call ran uncompiled."""
    cause: str | None = None
    """The cause in words when the watcher knew more than the guard text (the inputs that changed)."""
    cached: bool = False
    """Served from a persistent compile cache (inductor's FX graph cache, AOTAutograd's)."""

    @property
    def explanation(self) -> str:
        return self.cause or explain(self.reason, limit_hit=self.limit_hit)


@dataclass(frozen=True)
class TpuCacheStats:
    """The part of torch_tpu's compile-cache statistics we diff."""

    requests: int
    hits: int
    compilations: int
    compile_seconds: float


class TpuCacheSource:
    """torch_tpu's compile-cache counters (private API, the only per-process source); never reset."""

    name = "torch_tpu"

    def __init__(self, stats: Callable[[], Any] | None = None) -> None:
        if stats is None:
            import torch

            stats = torch.tpu._get_cache_stats  # type: ignore[attr-defined]  # registered by torch_tpu
        self._stats = stats

    def snapshot(self) -> TpuCacheStats:
        return read_tpu_stats(self._stats())

    def events_between(self, before: TpuCacheStats, after: TpuCacheStats) -> list[CompileEvent]:
        n = max(after.compilations - before.compilations, 0)
        if not n:
            return []
        seconds = max(after.compile_seconds - before.compile_seconds, 0.0) / n
        reason = "new op or input shape (compile-cache miss)"
        return [CompileEvent("torch_tpu", reason, seconds) for _ in range(n)]


def read_tpu_stats(raw: Any) -> TpuCacheStats:
    """Read torch_tpu's stats object (fields ``num_cache_reqs``, ``num_cache_hits``, ``num_compilations``,
    ``per_entry_stats[i].compilation_duration``); a dict with those keys works too (recorded snapshots)."""

    def get(obj: Any, key: str, default: Any = 0) -> Any:
        return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)

    seconds = 0.0
    for entry in get(raw, "per_entry_stats", []) or []:
        d = get(entry, "compilation_duration", 0.0)
        seconds += d.total_seconds() if hasattr(d, "total_seconds") else float(d)
    return TpuCacheStats(
        requests=int(get(raw, "num_cache_reqs")),
        hits=int(get(raw, "num_cache_hits")),
        compilations=int(get(raw, "num_compilations")),
        compile_seconds=seconds,
    )


def for_this_process() -> TpuCacheSource | None:
    """torch_tpu's counters, where this process holds a TPU (None elsewhere: nothing to read)."""
    import sys

    if "torch_tpu" not in sys.modules:
        return None
    from tpu_lab.host.chips import holds_tpu

    if not holds_tpu():  # counters exist only once this process uses the TPU
        return None
    return TpuCacheSource()
