"""Compile counting: one interface, two sources, and pure attribution of compiles to input shapes.

Sources (each takes a ``snapshot()`` and turns two snapshots into ``CompileEvent``s):

* ``DynamoSource``: graphs Dynamo compiled (CPU, CUDA, and torch.compile on TPU), from
  ``torch._dynamo.utils.get_compilation_metrics()``: the guard that failed, compile seconds, and whether
  the recompile limit was hit (the call then runs uncompiled, with only a log line).
* ``TpuCacheSource``: executables torch_tpu compiled (every new op/shape in eager mode, every graph under
  torch.compile), from its compile-cache counters, which never reset, so they are diffed.

``explain()`` turns a guard failure into a sentence; ``compile_table()`` groups calls by shape.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol


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

    @property
    def explanation(self) -> str:
        return explain(self.reason, limit_hit=self.limit_hit)


class CompileSource(Protocol):
    name: str

    def snapshot(self) -> Any: ...

    def events_between(self, before: Any, after: Any) -> list[CompileEvent]: ...


class DynamoSource:
    """Dynamo's compilation records (one per compiled or refused frame)."""

    name = "dynamo"

    def __init__(self, metrics: Callable[[], Sequence[Any]] | None = None) -> None:
        if metrics is None:
            from torch._dynamo.utils import get_compilation_metrics

            metrics = get_compilation_metrics
        self._metrics = metrics

    def snapshot(self) -> Sequence[Any]:
        return self._metrics()  # already a fresh list: no second copy on the hot path

    def events_between(self, before: Sequence[Any], after: Sequence[Any]) -> list[CompileEvent]:
        if len(after) == len(before) and (not after or after[-1] is before[-1]):
            return []  # the common case, a warm call: nothing new
        return [_dynamo_event(m) for m in new_items(before, after)]


def new_items(before: Sequence[Any], after: Sequence[Any]) -> list[Any]:
    """Items appended since ``before``; Dynamo keeps a bounded deque, so match by identity, not length."""
    if not before:
        return list(after)
    last = before[-1]
    for i in range(len(after) - 1, -1, -1):
        if after[i] is last:
            return list(after[i + 1 :])
    return list(after)  # the old records were pushed out: everything is new


def _dynamo_event(m: Any) -> CompileEvent:
    fail = getattr(m, "fail_reason", None) or ""
    return CompileEvent(
        source="dynamo",
        reason=getattr(m, "recompile_reason", None),
        seconds=float(getattr(m, "entire_frame_compile_time_s", None) or 0.0),
        limit_hit="recompile limit" in fail.lower() or "cache_size_limit" in fail,
    )


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


# Guard failures, in Dynamo's words, and what they mean for generate().
_SIZE = re.compile(r"tensor '(?P<name>.+?)' size mismatch at index (?P<i>\d+)\. expected (?P<a>\d+), actual (?P<b>\d+)")


def explain(reason: str | None, *, limit_hit: bool = False) -> str:
    """One sentence for a recompile reason (Dynamo's guard text or a source's own words)."""
    if limit_hit:
        return (
            "recompile limit reached: Dynamo gave up on this function, so this and later new shapes run "
            "UNCOMPILED (only a log line says so). Bound the shapes with buckets."
        )
    if not reason:
        return "first compile"
    m = _SIZE.search(reason)
    if m:
        name, i, a, b = m["name"], m["i"], m["a"], m["b"]
        if "input_ids" in name and i == "1":
            return f"input length changed {a} -> {b}: a new prompt length (or prefill <-> decode)"
        if ("cache" in name or "keys" in name or "values" in name) and i == "2":
            return (
                f"static cache length changed {a} -> {b}: the cache grows to fit each prompt; "
                "fix max_cache_len so every call shares one size"
            )
        if "attention_mask" in name:
            return f"attention mask length changed {a} -> {b}"
        return f"{name} dimension {i} changed {a} -> {b}"
    if "NoneType" in reason and "mask" in reason:
        return (
            "attention mask is None instead of a tensor: the prompt filled its bucket exactly, no padding, "
            "so transformers dropped the mask (a second graph for the same shape)"
        )
    return reason.strip().splitlines()[0]


class ShapeSignature(NamedTuple):
    """What a compiled forward specialises on (with ``dynamic=False``, each new one is a new graph).

    ``phase``: "prefill" (the prompt) or "decode" (one token at a time); ``length``: tokens in this
    forward (the padded prompt for prefill, 1 for decode); ``cache``: static cache length (None without
    one); ``mask``: whether an attention-mask tensor was passed (None is a different graph). A NamedTuple,
    not a dataclass: one is built and hashed for every forward, on the hot path.
    """

    phase: str
    batch: int
    length: int
    cache: int | None
    mask: bool

    def __str__(self) -> str:
        cache = f" cache={self.cache}" if self.cache is not None else ""
        return f"{self.phase} {self.batch}x{self.length}{cache}" + ("" if self.mask else " no-mask")


def explain_new_shape(sig: ShapeSignature, compiled: Sequence[ShapeSignature]) -> str | None:
    """Why ``sig`` needed a compile, from the signatures compiled before it. None when it can't tell
    (then Dynamo's own guard text is the explanation)."""
    if sig in compiled:
        return None  # compiled before: something else changed (dtype, a reset, another guard)
    same = [c for c in compiled if c.phase == sig.phase]
    if not same:
        return f"first {sig.phase} compile" + (": one graph serves every decode step" if sig.phase == "decode" else "")
    if any((c.length, c.cache, c.batch) == (sig.length, sig.cache, sig.batch) and c.mask != sig.mask for c in same):
        return (
            "attention mask is None instead of a tensor: the prompt filled its bucket exactly, so transformers "
            "dropped the mask, and that is a second graph for the same shape"
        )
    if sig.phase == "prefill" and all(c.length != sig.length for c in same):
        seen = ", ".join(str(n) for n in sorted({c.length for c in same})) or "none"
        return f"new prompt length {sig.length} (compiled so far: {seen}); buckets bound these"
    same_shape = [c for c in same if (c.length, c.batch) == (sig.length, sig.batch)]
    if sig.cache is not None and same_shape and all(c.cache != sig.cache for c in same_shape):
        return (
            f"static cache length changed to {sig.cache} (was {same_shape[-1].cache}): the cache is sized "
            "per prompt and only grows; a fixed max_cache_len gives every call one size"
        )
    if sig.batch not in {c.batch for c in same}:
        return f"new batch size {sig.batch}"
    return None


class ForwardCall(NamedTuple):
    """One model forward the session ran: its ``signature``, wall ``seconds`` (compiles included), the
    compile ``events`` it caused, and whether it ran ``compiled`` (False after the recompile limit).
    A NamedTuple for the same hot-path reason as ShapeSignature."""

    signature: ShapeSignature
    seconds: float
    events: tuple[CompileEvent, ...] = ()
    compiled: bool = True


@dataclass(frozen=True)
class ShapeRow:
    """Per input-shape signature: how often it ran, how often it compiled, and what that cost."""

    signature: ShapeSignature
    calls: int
    """Forward calls with this signature."""
    compiles: int
    """Compilations attributed to it."""
    compile_seconds: float
    first_call_seconds: float
    """The first call, usually the one that compiled."""
    last_call_seconds: float
    """The latest call: with no compile, what a cached call costs."""
    reason: str
    """Why it last compiled, in words ("" when it never did)."""
    guard: str
    """Dynamo's own text for the guard that failed, when there is one."""
    uncompiled_calls: int = 0
    """Calls that ran uncompiled because the recompile limit was hit."""


class ShapeTally:
    """Folds forward calls into per-shape rows one call at a time, in O(1) each, keeping no call
    history (a notebook session can run for days). Pure: no clock, no torch."""

    def __init__(self) -> None:
        self._rows: dict[ShapeSignature, list[Any]] = {}
        self.compiled: list[ShapeSignature] = []
        """Signatures that compiled, in the order they first did."""

    def add(self, call: ForwardCall) -> str:
        """Count ``call``; return why it compiled, in words ("" when it didn't)."""
        reason = ""
        if call.events:
            event = call.events[-1]
            ours = None if event.limit_hit else explain_new_shape(call.signature, self.compiled)
            reason = ours or event.explanation
        row = self._rows.get(call.signature)
        if row is None:
            # calls, compiles, compile s, first s, last s, reason, guard, uncompiled
            row = self._rows[call.signature] = [0, 0, 0.0, call.seconds, 0.0, "", "", 0]
        compiles = [e for e in call.events if not e.limit_hit]
        row[0] += 1
        row[1] += len(compiles)
        row[2] += sum(e.seconds for e in compiles)
        row[4] = call.seconds
        row[7] += not call.compiled
        if call.events:
            row[5], row[6] = reason, call.events[-1].reason or ""
        if compiles and call.signature not in self.compiled:
            self.compiled.append(call.signature)
        return reason

    def rows(self) -> list[ShapeRow]:
        """One row per signature, in first-seen order."""
        return [ShapeRow(sig, *row) for sig, row in self._rows.items()]


def explain_calls(calls: Iterable[ForwardCall]) -> list[str]:
    """Why each call compiled, in words ("" for calls that didn't), judged from the signatures compiled
    before it, falling back to Dynamo's guard text."""
    tally = ShapeTally()
    return [tally.add(call) for call in calls]


def compile_table(calls: Iterable[ForwardCall]) -> list[ShapeRow]:
    """Group forward calls by signature, in first-seen order, with why each last compiled."""
    tally = ShapeTally()
    for call in calls:
        tally.add(call)
    return tally.rows()
