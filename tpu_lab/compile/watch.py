"""``tl.watch()``: every compilation inside a block of code, per function and input signature, with the
cause in words; and ``tl.no_recompiles()``, which refuses them. The one compile-counting seam: the
generation session counts through a Watch too.

How: ``frames`` hears each compile start in this thread (function, inputs, Dynamo's reason); Dynamo's
compilation records (``sources``) add the time, the persistent-cache hits, the dimensions that became
dynamic and the recompile-limit refusals; on a TPU torch_tpu's cache counters add eager-mode compiles.
Warm calls inside a watch run untouched: nothing is read until a compile happens or the watch is polled.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from tpu_lab.compile import frames
from tpu_lab.compile.explain import TPU_DYNAMIC, explain, signature_changes
from tpu_lab.compile.frames import Capture, FunctionKey
from tpu_lab.compile.records import dynamic_inputs, is_limit_refusal, served_from_cache, take_record
from tpu_lab.compile.sources import CompileEvent, new_items
from tpu_lab.compile.watch_table import WatchRow, WatchTable

TPU_ROW = FunctionKey("eager ops (torch_tpu)", "", 0)
PENDING_SECONDS = 600.0  # a compile whose record never came (evicted from Dynamo's bounded deque) counts anyway


class Watch:
    """Use as ``with tl.watch() as w:`` or ``@tl.watch()``; ``w.table`` (also ``w`` itself) renders the result.

    Calls are counted for functions the watch wraps and for the session's forwards; compiles for any code.
    Nested watches each see what runs inside them; a watch sees only compiles in the threads it is open in.
    """

    def __init__(self, *, tpu: bool | None = None) -> None:
        import torch._dynamo.utils as dynamo_utils

        self._dynamo = dynamo_utils
        self._lock = threading.RLock()
        self._open: Counter[int] = Counter()  # thread id -> depth
        self._pending: list[Capture] = []
        self._rows: dict[tuple[FunctionKey, tuple], WatchRow] = {}
        self._last_signature: dict[FunctionKey, tuple] = {}
        self._dynamic: dict[FunctionKey, str] = {}
        self._forward_of: dict[str, Capture] = {}  # compile id -> its forward, until its backward compiles
        self._calls: Counter[FunctionKey] = Counter()
        self.timeline: list[tuple[float, str, int]] = []
        """(seconds since the watch began, function, its calls so far) per compile, for the chart."""
        self.limit_hit = False
        self.version = 0
        """Bumped whenever the table changes (a live view redraws then)."""
        self._started = time.perf_counter()
        self._last_record = self._newest_record()
        self._breaks_before = Counter(dynamo_utils.counters["graph_break"])
        self._tpu = _tpu_source() if tpu is None or tpu else None
        self._tpu_before = self._tpu.snapshot() if self._tpu else None

    # ---- opening and closing ----------------------------------------------------------------------

    def __enter__(self) -> Watch:
        with self._lock:
            me = threading.get_ident()
            if not self._open[me]:
                frames.add_listener(self._on_compile)
            self._open[me] += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pending or self._tpu is not None or self._newest_record() is not self._last_record:
            self.poll()  # else nothing happened since the last poll: keep a warm exit cheap
        with self._lock:
            me = threading.get_ident()
            self._open[me] -= 1
            if not self._open[me]:
                del self._open[me]
                frames.remove_listener(self._on_compile)

    def __call__(self, fn: Callable) -> Callable:
        """Decorate ``fn``: every call runs inside this watch and is counted per input signature."""
        if not callable(fn):
            from tpu_lab.errors import InvalidArgument

            raise InvalidArgument(
                f"tl.watch() decorates a function, got {type(fn).__name__}.", fix="Use @tl.watch() on a def."
            )
        inner = inspect.unwrap(getattr(fn, "_torchdynamo_orig_callable", fn))
        code = getattr(inner, "__code__", None) or getattr(getattr(inner, "forward", None), "__code__", None)
        key = FunctionKey(code.co_name, code.co_filename, code.co_firstlineno) if code else None
        try:
            bind = inspect.signature(inner).bind
        except (TypeError, ValueError):
            bind = None

        @functools.wraps(fn)
        def watched(*args: Any, **kwargs: Any) -> Any:
            with self:
                if key is not None and code is not None and bind is not None:
                    try:
                        values = bind(*args, **kwargs).arguments
                    except TypeError:
                        values = {}
                    self.count_call(key, frames.describe_inputs(code, values))
                return fn(*args, **kwargs)

        return watched

    # ---- what happens inside ----------------------------------------------------------------------

    def _on_compile(self, capture: Capture) -> None:
        with self._lock:
            self._pending.append(capture)

    def count_call(self, key: FunctionKey, signature: tuple) -> None:
        with self._lock:
            self._calls[key] += 1
            row = self._row(key, signature)
            row.calls = (row.calls or 0) + 1

    def begin_call(self) -> tuple[Any, int]:
        """A marker before one call (the session's forward): cheap, no copy of anything."""
        return self._newest_record(), len(self._pending)

    def end_call(self, marker: tuple[Any, int]) -> list[CompileEvent]:
        """The compiles (and recompile-limit refusals) since ``marker``, folded into the table too."""
        if self._newest_record() is marker[0] and len(self._pending) == marker[1] and self._tpu is None:
            return []  # the warm path: nothing compiled
        return self.poll()

    def poll(self) -> list[CompileEvent]:
        """Fold what happened since the last poll into the table; returns the new compile events."""
        with self._lock:
            records = new_items(
                [self._last_record] if self._last_record is not None else [], self._dynamo.get_compilation_metrics()
            )
            if records:
                self._last_record = records[-1]
            by_id: dict[str, list[Any]] = {}
            for r in records:
                by_id.setdefault(str(r.compile_id), []).append(r)
            events, waiting = [], []
            now = time.perf_counter()
            for cap in self._pending:
                record = take_record(by_id.get(cap.compile_id, []), backward="BACKWARD" in cap.trigger.upper())
                if record is None and now - cap.at < PENDING_SECONDS:
                    waiting.append(cap)
                elif (
                    record is None
                    or not getattr(record, "fail_type", None)
                    or getattr(record, "has_guarded_code", False)
                ):
                    events.append(self._fold(cap, record))
            self._pending = waiting
            for left in by_id.values():
                for record in left:
                    if is_limit_refusal(record):
                        events.append(self._fold_limit(record))
            events += self._poll_tpu()
            if events:
                self.version += 1
            return events

    def _fold(self, cap: Capture, record: Any) -> CompileEvent:
        if "BACKWARD" in cap.trigger.upper():
            return self._fold_backward(cap, record)
        self._forward_of[cap.compile_id] = cap
        previous = cap.previous if cap.previous is not None else self._last_signature.get(cap.function)
        changes = signature_changes(previous, cap.signature) if previous is not None else []
        cause = "; ".join(changes) if changes else explain(cap.reason)
        if cause == "first compile" and previous is not None:
            cause = "compiled again for the same inputs (a guard on something else failed)"
        dynamic = dynamic_inputs(record, cap.signature)
        if dynamic and dynamic != self._dynamic.get(cap.function):
            cause += f"; automatic dynamic shapes made {dynamic} dynamic ({TPU_DYNAMIC})"
            self._dynamic[cap.function] = dynamic
        seconds = float(getattr(record, "entire_frame_compile_time_s", None) or 0.0)
        cached = served_from_cache(record)
        row = self._row(cap.function, cap.signature)
        row.compiles += 1
        row.compile_seconds += seconds
        row.cause, row.guard, row.dynamic = cause, (cap.reason or "").strip(), dynamic or row.dynamic
        row.cached += bool(cached)
        self._last_signature[cap.function] = cap.signature
        self.timeline.append((cap.at - self._started, str(cap.function), self._calls[cap.function]))
        return CompileEvent("dynamo", cap.reason, seconds, cause=cause)

    def _fold_backward(self, cap: Capture, record: Any) -> CompileEvent:
        # AOTAutograd compiles the backward graph lazily, at the first backward pass through a new forward
        forward = self._forward_of.pop(cap.compile_id, None)
        key = (
            FunctionKey(f"{forward.function.name} (backward)", forward.function.filename, forward.function.line)
            if forward
            else cap.function
        )
        seconds = float(
            getattr(record, "entire_frame_compile_time_s", None)
            or getattr(record, "backward_cumulative_compile_time_us", 0)
            or 0.0
        )
        if getattr(record, "backward_cumulative_compile_time_us", None) and not getattr(
            record, "entire_frame_compile_time_s", None
        ):
            seconds = record.backward_cumulative_compile_time_us / 1e6
        row = self._row(key, forward.signature if forward else ())
        row.compiles += 1
        row.compile_seconds += seconds
        row.cause = "backward graph, compiled at the first backward pass through this forward graph"
        self.timeline.append((cap.at - self._started, str(key), self._calls[key]))
        return CompileEvent("dynamo", None, seconds, cause=row.cause)

    def _fold_limit(self, record: Any) -> CompileEvent:
        key = FunctionKey(str(record.co_name), str(record.co_filename or ""), int(record.co_firstlineno or 0))
        row = self._row(key, self._last_signature.get(key, ()))
        row.uncompiled += 1
        row.cause = explain(None, limit_hit=True)
        self.limit_hit = True
        return CompileEvent("dynamo", getattr(record, "recompile_reason", None), 0.0, limit_hit=True)

    def _poll_tpu(self) -> list[CompileEvent]:
        if self._tpu is None:
            return []
        now = self._tpu.snapshot()
        events = self._tpu.events_between(self._tpu_before, now)
        self._tpu_before = now
        if events:
            row = self._row(TPU_ROW, ())
            row.compiles += len(events)
            row.compile_seconds += sum(e.seconds for e in events)
            row.cause = events[-1].reason or ""
        return events

    def _row(self, key: FunctionKey, signature: tuple) -> WatchRow:
        row = self._rows.get((key, signature))
        if row is None:
            row = self._rows[(key, signature)] = WatchRow(str(key), ", ".join(f"{n}: {d}" for n, d in signature))
        return row

    def _newest_record(self) -> Any:
        deque = getattr(self._dynamo, "_compilation_metrics", None)
        return deque[-1] if deque else None

    # ---- results ----------------------------------------------------------------------------------

    @property
    def graph_breaks(self) -> dict[str, int]:
        """Graph breaks since the watch began: Dynamo's reason (first line) -> count."""
        now = self._dynamo.counters["graph_break"]
        out: Counter[str] = Counter()
        for reason, n in now.items():
            if n > self._breaks_before.get(reason, 0):
                out[reason.strip().splitlines()[0]] += n - self._breaks_before.get(reason, 0)
        return dict(out)

    @property
    def table(self) -> WatchTable:
        self.poll()
        with self._lock:
            rows = tuple(r.frozen() for r in self._rows.values())
        return WatchTable(rows, self.graph_breaks, self.limit_hit, tuple(self.timeline))

    @property
    def total_compiles(self) -> int:
        return self.table.total_compiles

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return self.table._repr_mimebundle_(include, exclude)

    def __str__(self) -> str:
        return self.table.to_text()


def watch() -> Watch:
    """Watch every compilation inside a block (``with tl.watch() as w:``) or a function (``@tl.watch()``)."""
    return Watch()


def _tpu_source() -> Any:
    import sys

    if "torch_tpu" not in sys.modules:
        return None
    from tpu_lab.host.chips import holds_tpu

    if not holds_tpu():  # counters exist only once this process uses the TPU
        return None
    from tpu_lab.compile.sources import TpuCacheSource

    return TpuCacheSource()
