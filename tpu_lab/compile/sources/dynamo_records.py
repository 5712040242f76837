"""What one of Dynamo's compilation records says about its compile (``torch._dynamo.utils.CompilationMetrics``,
read by attribute, so a field another torch lacks reads as absent): how long it took, whether a cache served
it, whether it built a graph, failed, was refused at the recompile limit, or traced nothing."""

from __future__ import annotations

from typing import Any

from tpu_lab.compile.sources.dynamo_limit import LIMIT_ERROR

CACHE_HIT_FIELDS = (
    "inductor_fx_local_cache_hit_count",
    "inductor_fx_remote_cache_hit_count",
    "aotautograd_local_cache_hit_count",
)


def compile_seconds(record: Any) -> float:
    if seconds := getattr(record, "entire_frame_compile_time_s", None):
        return float(seconds)
    return float(getattr(record, "backward_cumulative_compile_time_us", 0) or 0) / 1e6


def empty_graph(record: Any) -> bool:  # no operation in it (a graph break before any work): all runs eagerly
    return getattr(record, "graph_op_count", None) == 0


def served_from_cache(record: Any) -> bool:  # inductor's or AOTAutograd's persistent cache served it
    return any(int(getattr(record, f, 0) or 0) for f in CACHE_HIT_FIELDS)


def is_limit_refusal(record: Any) -> bool:
    """A refusal at the recompile limit: the call ran uncompiled, or (``FailOnRecompileLimitHit``) raised."""
    reason = (getattr(record, "fail_reason", None) or "").lower()
    return "recompile limit" in reason or getattr(record, "fail_type", None) == LIMIT_ERROR


def is_failed(record: Any) -> bool:
    """A compile that produced no graph (an error, the limit, or a frame skipped for tracing no ops)."""
    return (
        bool(getattr(record, "fail_type", None)) and not getattr(record, "has_guarded_code", False)
    ) or traced_nothing(record)


def traced_nothing(record: Any) -> bool:
    """Dynamo found no tensor operation to trace and skipped the frame (``SkipFrame``: "No ops traced"): its
    record keeps guarded code (the skip is cached) but no graph was built, and the code runs eagerly from now on."""
    return (
        getattr(record, "has_guarded_code", False)
        and not getattr(record, "fail_type", None)
        and getattr(record, "graph_op_count", 0) is None
        and getattr(record, "is_forward", True) is not False
    )
