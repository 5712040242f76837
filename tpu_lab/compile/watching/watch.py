"""``tl.watch()``: every compilation inside a block of code, per function and input signature, each
with its cause from the guards Dynamo checked and failed, in words, and the fix; and
``tl.no_recompiles()``, which refuses them. The one compile-counting seam: the generation session
counts through a Watch too.

How: ``dynamo_source`` hears each compile start in this thread (function, inputs, Dynamo's recompile
reasons) and reads Dynamo's records (time, cache hits, dynamic dims, graph breaks, the recompile
limit); on a TPU ``tpu_source`` adds torch_tpu's eager-mode compiles. This module only folds them.
Warm calls inside a watch run untouched: nothing is read until a compile happens or the watch is polled.
"""

from __future__ import annotations

import dataclasses
import linecache
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from tpu_lab.compile.causes.break_words import graph_break_words
from tpu_lab.compile.causes.cause import readable_guard
from tpu_lab.compile.causes.explain import LIMIT_TEXT, capture_causes, first_compile_words
from tpu_lab.compile.sources import dynamo_breaks, frames, listening, tpu_source
from tpu_lab.compile.sources import dynamo_source as dynamo
from tpu_lab.compile.sources.dynamo_dynamic import dynamic_inputs, dynamic_scalars, graph_guards
from tpu_lab.compile.sources.dynamo_source import LIMIT_TRIGGER
from tpu_lab.compile.sources.frames import Capture, FunctionKey, renamed
from tpu_lab.compile.sources.tpu_source import CompileEvent
from tpu_lab.compile.watching import calls, what_next
from tpu_lab.compile.watching.failed import failed_compile
from tpu_lab.compile.watching.leftover import leftover_records
from tpu_lab.compile.watching.watch_table import BreakRow, Point, RowCause, WatchRow, WatchTable
from tpu_lab.compile.watching.what_next import dynamic_note, growing, told_dynamic, unpinned, with_flags

TPU_ROW = FunctionKey("eager ops (torch_tpu)", "", 0)
PENDING_SECONDS = 600.0  # a compile whose record never came (evicted from Dynamo's bounded deque) counts anyway


class Watch:
    """Use as ``with tl.watch() as w:`` or ``@tl.watch()``; ``w.table`` (also ``w`` itself) renders the result.

    Calls are counted for functions the watch wraps and for the session's forwards; compiles for any code.
    Nested watches each see what runs inside them; a watch sees only compiles in the threads it is open in
    (opened in a generator or coroutine: only while that runs; see ``sources/listening``).
    """

    def __init__(self, *, tpu: bool | None = None) -> None:
        self._lock = threading.RLock()
        self._scopes: list[listening.Scope] = []  # one per entry, in the code that entered it
        self._pending: list[Capture] = []
        self._rows: dict[tuple[FunctionKey, tuple], WatchRow] = {}
        self._dynamic: dict[FunctionKey, str] = {}
        self._limited: set[FunctionKey] = set()
        self._lengths: dict[FunctionKey, dict[str, list[int]]] = {}
        self._flags: dict[FunctionKey, dict[str, str]] = {}
        """Per function, the flags a compile's cause showed changing, with their values since (``use_cache``)."""
        self._elsewhere = 0  # graphs compiled meanwhile where this watch was not listening
        self._handled: set[str] = set()  # compile ids folded from a capture (their records are not counted twice)
        self._forward_of: dict[str, Capture] = {}  # compile id -> its forward, until its backward compiles
        self._calls: Counter[FunctionKey] = Counter()
        self._breaks: dict[tuple[str, str], list[Any]] = {}
        self.timeline: list[Point] = []
        """One point per compile, for the chart."""
        self.refusals = 0
        """Compiles Dynamo refused at the recompile limit, so far."""
        self.version = 0
        """Bumped whenever the table changes (a live view redraws then)."""
        self._started = time.perf_counter()
        self._last_record = dynamo.newest_record()
        self._break_marker = dynamo_breaks.graph_break_marker()
        self._resets_before = dynamo.resets
        self._tpu = tpu_source.for_this_process() if tpu is None or tpu else None
        self._tpu_before = self._tpu.snapshot() if self._tpu else None
        self.on_tpu = bool(tpu) or self._tpu is not None
        """Advice is for torch_tpu's backend (pad to buckets) rather than CPU/CUDA remedies."""

    # ---- opening and closing ----------------------------------------------------------------------

    def __enter__(self) -> Watch:
        with self._lock:
            self._scopes.append(dynamo.add_listener(self._on_compile))
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            usage = "Use `with tl.watch() as w:` (or @tl.watch()), which enters and exits it once each."
            scope = listening.innermost_here(self._scopes, "This watch", usage)
        if self._pending or self._tpu is not None or dynamo.newest_record() is not self._last_record:
            self.poll()  # else nothing compiled since the last poll: keep a warm exit cheap
        with self._lock:
            self._scopes.remove(scope)
            dynamo.remove_listener(scope)

    def __call__(self, fn: Callable) -> Callable:
        """Decorate ``fn``: every call runs inside this watch and is counted per input signature."""
        return calls.watched(self, fn)

    # ---- what happens inside ----------------------------------------------------------------------

    def _on_compile(self, capture: Capture) -> None:
        with self._lock:
            self._pending.append(capture)
            self._poll_breaks()  # per compile: a reset() empties Dynamo's list of breaks

    def count_call(self, key: FunctionKey, signature: tuple, flags: tuple = (), *, refused: bool = False) -> None:
        """One call of ``key`` with these inputs, after it ran (``flags``: its boolean arguments; ``refused``:
        Dynamo refused to compile it, which that refusal's row counts already)."""
        with self._lock:
            self._calls[key] += 1
            row = self._row(key, with_flags(signature, self._flags.get(key, {}), [], flags))
            row.calls = (row.calls or 0) + 1
            if key in self._limited and not row.compiles and not self._dynamic.get(key) and not refused:
                row.uncompiled += 1  # past the limit, a call needing a new graph runs uncompiled
                if not row.causes:
                    row.add(RowCause("ran uncompiled: Dynamo's recompile limit was hit before", kind="limit", count=0))

    def begin_call(self) -> tuple[Any, int]:
        """A marker before one call (the session's forward): cheap, no copy of anything."""
        return dynamo.newest_record(), len(self._pending)

    def end_call(self, marker: tuple[Any, int]) -> list[CompileEvent]:
        """The compiles (and recompile-limit refusals) since ``marker``, folded into the table too."""
        if dynamo.newest_record() is marker[0] and len(self._pending) == marker[1] and self._tpu is None:
            return []  # the warm path: nothing compiled
        return self.poll()

    def poll(self) -> list[CompileEvent]:
        """Fold what happened since the last poll into the table; returns the new compile events."""
        with self._lock:
            dynamo.ensure_installed()
            records = dynamo.records_since(self._last_record)
            if records:
                self._last_record = records[-1]
            by_id: dict[str, list[Any]] = {}
            for r in records:
                by_id.setdefault(str(r.compile_id), []).append(r)
            events, waiting = [], []
            now = time.perf_counter()
            for cap in self._pending:
                if cap.trigger == LIMIT_TRIGGER:
                    events.append(self._fold_limit(cap))
                    continue
                record = dynamo.take_record(by_id.get(cap.compile_id, []), backward="BACKWARD" in cap.trigger.upper())
                if record is None and now - cap.at < PENDING_SECONDS:
                    waiting.append(cap)
                elif record is not None and dynamo.is_failed(record) and not dynamo.is_limit_refusal(record):
                    events.append(self._fold_failed(cap, record))
                else:
                    events.append(self._fold(cap, record))
            self._pending = waiting
            refusals, elsewhere = leftover_records((r for rs in by_id.values() for r in rs), self._handled, now)
            events += [self._fold_limit(cap) for cap in refusals]
            self._elsewhere += elsewhere
            self._poll_breaks()
            events += self._poll_tpu()
            if events:
                self.version += 1
            return events

    def _fold(self, cap: Capture, record: Any) -> CompileEvent:
        if "BACKWARD" in cap.trigger.upper():
            return self._fold_backward(cap, record)
        self._forward_of[cap.compile_id] = cap
        guards = graph_guards(cap.code, cap.compile_id) if record is not None else None  # the new graph's own
        scalars = dynamic_scalars(record, guards) if cap.reasons else frozenset()
        said = capture_causes(cap, tpu=self.on_tpu, dynamic=scalars, limit=cap.limit_value)
        causes = [
            RowCause(c.words, c.guard, c.fix, c.kind, shown_guard=readable_guard(c.guard, cap.names)) for c in said
        ]
        causes = growing(causes, self._lengths.setdefault(cap.function, {}), cap.limit_value)
        if not causes:
            again = any(k == cap.function and r.compiles for (k, _), r in self._rows.items())
            after_reset = again and cap.resets > self._resets_before
            words = first_compile_words(cap.function, dynamo.defined_before(cap.function), after_reset=after_reset)
            causes = [RowCause(words, kind="first")]
        shapes = unpinned(tried := renamed(dynamic_inputs(record, cap.signature), cap.names), guards, cap.names)
        seen, first, told = self._dynamic.get(cap.function, ""), causes[0].kind == "first", told_dynamic(scalars, said)
        dynamic, note, self._dynamic[cap.function] = dynamic_note(shapes, told, seen, first=first, tpu=self.on_tpu)
        causes = what_next.settled(causes, shapes, self.on_tpu, tried) + ([note] if note else [])
        seconds = dynamo.compile_seconds(record) if record is not None else 0.0
        self._rows = what_next.flags_before(self._rows, cap.function, said)
        row = self._row(cap.function, with_flags(cap.shown, self._flags.setdefault(cap.function, {}), said, cap.flags))
        row.compiles += 1
        row.compile_seconds += seconds
        for i, c in enumerate(causes):  # a kind counts once per compile (two submodules swapped: one compile)
            row.add(c if all(c.kind != d.kind for d in causes[:i]) else dataclasses.replace(c, count=0))
        row.dynamic = dynamic or row.dynamic
        cached = record is not None and dynamo.served_from_cache(record)
        row.cached += cached
        self._handled.add(cap.compile_id)
        self.timeline.append(Point(cap.at - self._started, str(cap.function), self._calls[cap.function]))
        return CompileEvent("dynamo", cap.reason, seconds, cause=causes[0].words, cached=cached)

    def _fold_failed(self, cap: Capture, record: Any) -> CompileEvent:
        """A compile that produced no graph (``failed_compile``), on its row and, where Dynamo logs it as a
        graph break too, among the breaks."""
        self._handled.add(cap.compile_id)
        failed = failed_compile(cap, record, capture_causes(cap, tpu=self.on_tpu))
        row = self._row(cap.function, cap.shown)
        row.failed += 1
        row.add(RowCause(failed.words, failed.guard, failed.fix, "failed"))
        if failed.break_at:
            self._add_break(failed.cause, failed.break_at)
        return CompileEvent("dynamo", cap.reason, 0.0, cause=failed.words)

    def _fold_backward(self, cap: Capture, record: Any) -> CompileEvent:
        # AOTAutograd compiles the backward graph lazily, at the first backward pass through a new forward
        forward = self._forward_of.pop(cap.compile_id, None)
        key = FunctionKey(f"{forward.function.name} (backward)", *forward.function[1:]) if forward else cap.function
        seconds = dynamo.compile_seconds(record) if record is not None else 0.0
        row = self._row(key, forward.shown if forward else ())
        row.compiles += 1
        row.compile_seconds += seconds
        row.add(
            RowCause("backward graph, compiled at the first backward pass through this forward graph", kind="backward")
        )
        self.timeline.append(Point(cap.at - self._started, str(key), self._calls[key]))
        return CompileEvent("dynamo", None, seconds, cause=row.causes[-1].words)

    def _fold_limit(self, cap: Capture) -> CompileEvent:
        self._handled.add(cap.compile_id)
        self._limited.add(cap.function)
        row = self._row(cap.function, cap.shown)
        row.limit_hit = True
        row.refused += 1
        self.refusals += 1
        row.uncompiled += 1
        last = capture_causes(cap, tpu=self.on_tpu)
        words = f"{'; '.join(c.words for c in last)} (refused: recompile limit)" if last else LIMIT_TEXT
        if cap.limit:
            words = f"{words}; {cap.limit}"
        guard = "\n".join(c.guard for c in last if c.guard)
        row.add(RowCause(words, guard, "; ".join(dict.fromkeys(c.fix for c in last if c.fix)), "limit", 0))
        return CompileEvent("dynamo", cap.reason, 0.0, limit_hit=True, cause=words)

    def _poll_breaks(self) -> None:
        found, self._break_marker = dynamo_breaks.graph_breaks_since(self._break_marker)
        for b in found:
            where = frames.where_label(b.filename, b.line) if b.filename else "?"
            code = linecache.getline(b.filename, b.line).strip() if b.filename else ""
            self._add_break(graph_break_words(b.reason, b.library, code), where)

    def _add_break(self, cause: Any, where: str) -> None:
        entry = self._breaks.setdefault((cause.words, where), [cause, 0])
        entry[1] += 1

    def _poll_tpu(self) -> list[CompileEvent]:
        if self._tpu is None or self._tpu_before is None:
            return []
        now = self._tpu.snapshot()
        events = self._tpu.events_between(self._tpu_before, now)
        self._tpu_before = now
        if events:
            row = self._row(TPU_ROW, ())
            row.compiles += len(events)
            row.compile_seconds += sum(e.seconds for e in events)
            row.add(RowCause(events[-1].reason or "", kind="tpu", count=len(events)))
        return events

    def _row(self, key: FunctionKey, signature: tuple) -> WatchRow:
        row = self._rows.get((key, signature))
        if row is None:
            row = self._rows[(key, signature)] = WatchRow(str(key), ", ".join(f"{n}: {d}" for n, d in signature))
        return row

    # ---- results ----------------------------------------------------------------------------------

    @property
    def limit_hit(self) -> bool:
        return bool(self._limited)

    @property
    def graph_breaks(self) -> dict[str, int]:
        """Graph breaks since the watch began: ``"reason in words (file:line)"`` -> count."""
        return self.table.graph_breaks

    @property
    def table(self) -> WatchTable:
        self.poll()
        with self._lock:
            rows = tuple(r.frozen() for r in self._rows.values())
            breaks = tuple(BreakRow(c.words, w, n, c.fix, c.guard) for (_, w), (c, n) in self._breaks.items())
        return WatchTable(rows, breaks, dynamo.resets - self._resets_before, tuple(self.timeline), self._elsewhere)

    @property
    def total_compiles(self) -> int:
        return self.table.total_compiles

    def to_dict(self) -> dict[str, Any]:
        """The table as plain data (rows with every cause, guard and fix; graph breaks; limit; resets)."""
        return self.table.to_dict()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return self.table._repr_mimebundle_(include, exclude)

    def __str__(self) -> str:
        return self.table.to_text()


def watch() -> Watch:
    """Watch every compilation inside a block (``with tl.watch() as w:``) or a function (``@tl.watch()``)."""
    return Watch()
