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

import linecache
import threading
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from tpu_lab.compile.causes.backend_failures import backend_told
from tpu_lab.compile.causes.break_words import graph_break_words
from tpu_lab.compile.causes.cause import as_logged
from tpu_lab.compile.causes.first_compile import EAGER_BACKWARD
from tpu_lab.compile.causes.stances import stance_words
from tpu_lab.compile.sources import dynamo_breaks, dynamo_stance, frames, guarded, listening, tpu_source
from tpu_lab.compile.sources import dynamo_source as dynamo
from tpu_lab.compile.sources.dynamo_dynamic import (
    baked_scalars,
    dynamic_scalars,
    graph_guards,
    guard_parts,
    guard_places,
)
from tpu_lab.compile.sources.dynamo_pins import pins_of
from tpu_lab.compile.sources.dynamo_records import is_failed, is_limit_refusal
from tpu_lab.compile.sources.dynamo_source import LIMIT_TRIGGER
from tpu_lab.compile.sources.dynamo_stance import StanceSet
from tpu_lab.compile.sources.dynamo_unconverted import TRIGGER as UNCONVERTED
from tpu_lab.compile.sources.dynamo_unconverted import record_of
from tpu_lab.compile.sources.eager_backward import compiled_with_forward
from tpu_lab.compile.sources.frames import Capture, FunctionKey
from tpu_lab.compile.sources.tpu_source import CompileEvent
from tpu_lab.compile.watching import calls
from tpu_lab.compile.watching.fold import Fold
from tpu_lab.compile.watching.hooks_changed import seen_now
from tpu_lab.compile.watching.leftover import leftover_records
from tpu_lab.compile.watching.numpy_settings import with_numpy_setting
from tpu_lab.compile.watching.watch_table import INTERNAL, Point, RowCause, WatchTable
from tpu_lab.compile.watching.what_next import with_flags

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
        # by id of a pending capture: its graph's guards, read early (None: none could be read then)
        self._guards_read: dict[int, list[str] | None] = {}
        self._with_backward: dict[int, bool] = {}  # a graph whose backward AOTAutograd compiled with it
        self._elsewhere = 0  # graphs compiled meanwhile where this watch was not listening
        self._handled: set[str] = set()  # compile ids folded from a capture (their records are not counted twice)
        self.refusals = 0  # compiles Dynamo refused at the recompile limit, so far
        self.version = 0  # bumped whenever the table changes (a live view redraws then)
        self._started = time.perf_counter()
        self._last_record = dynamo.newest_record()
        self._records: list[Any] = []  # taken at each compile: Dynamo keeps only its newest 64 records
        self._break_marker = dynamo_breaks.graph_break_marker()
        self._resets_before = dynamo.resets
        self._stances: list[StanceSet] = []  # the unusual compiler stances in force while the watch was open
        self._stance_mark: int | None = None  # where the stances set since the outermost entry start
        self._thread = threading.get_ident()  # the thread that entered it, where set_stance is heard
        self._tpu = tpu_source.for_this_process() if tpu is None or tpu else None
        self._tpu_before = self._tpu.snapshot() if self._tpu else None
        self.on_tpu = bool(tpu) or self._tpu is not None
        """Advice is for torch_tpu's backend (pad to buckets) rather than CPU/CUDA remedies."""
        self._fold = Fold(tpu=self.on_tpu, started=self._started, resets_before=self._resets_before)

    # ---- opening and closing ----------------------------------------------------------------------

    def __enter__(self) -> Watch:
        with self._lock:
            if self._stance_mark is None:
                self._stance_mark, self._thread = dynamo_stance.mark(), threading.get_ident()
                self._stances += filter(None, [dynamo_stance.current()])
            self._scopes.append(dynamo.add_listener(self._on_compile))
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            usage = "Use `with tl.watch() as w:` (or @tl.watch()), which enters and exits it once each."
            scope = listening.innermost_here(self._scopes, "This watch", usage)
        if self._pending or self._records or self._tpu is not None or dynamo.newest_record() is not self._last_record:
            self.poll()  # else nothing compiled since the last poll: keep a warm exit cheap
        with self._lock:
            self._scopes.remove(scope)
            dynamo.remove_listener(scope)
            if not self._scopes and self._stance_mark is not None:
                self._stances = self._stances_now()
                self._stance_mark = None

    def __call__(self, fn: Callable) -> Callable:
        """Decorate ``fn``: every call runs inside this watch and is counted per input signature."""
        return calls.watched(self, fn)

    # ---- what happens inside ----------------------------------------------------------------------

    def _on_compile(self, capture: Capture) -> None:
        with self._lock:
            self._take_records()
            self._read_guards()
            self._fold.hooks_seen.update(seen_now(self._fold.hooks, self._pending))  # before they change back
            self._pending.append(capture)
            self._poll_breaks()  # per compile: a reset() empties Dynamo's list of breaks

    def _take_records(self) -> None:
        """Dynamo's records since the last taken, kept until the next poll: its list holds only the newest 64,
        so a loop that compiles more before the table is read would lose the oldest. Per compile."""
        if records := dynamo.records_since(self._last_record):
            self._records += records
            self._last_record = records[-1]

    def _read_guards(self) -> None:
        """Read the guards of the graphs compiled so far, installed by now: Dynamo deletes a graph's guards
        once an object they hold is freed (a training loop's model, local to a function that returned), which
        can happen before the fold. Per compile, never per call."""
        for cap in self._pending:  # tried once each (a failed compile has none); the fold tries again if None
            if cap.code is not None and id(cap) not in self._guards_read:
                self._guards_read[id(cap)] = guard_parts(cap.code, cap.compile_id)
                if "BACKWARD" not in cap.trigger.upper():  # read before a lazy backward's compile sets it too
                    self._with_backward[id(cap)] = compiled_with_forward(cap.code, cap.compile_id, cap.scope)

    def count_call(
        self, key: FunctionKey, signature: tuple, flags: tuple = (), *, refused: bool = False, values: Any = None
    ) -> None:
        """One call of ``key`` with these inputs, after it ran (``flags``: its boolean arguments; ``refused``:
        Dynamo refused to compile it, which that refusal's row counts already; ``values``: its arguments, to
        show the inputs None now that the function's rows show as None)."""
        with self._lock:
            fold = self._fold
            if values is not None and fold.nones.get(key):
                signature = frames.with_nones(signature, (n for n in fold.nones[key] if guarded.none_at(n, values)))
            fold.calls[key] += 1
            row = fold.row(key, with_flags(signature, fold.flags.get(key, {}), [], flags))
            row.calls = (row.calls or 0) + 1
            if key in fold.limited - fold.raising and not row.compiles and not fold.dynamic.get(key) and not refused:
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
            self._take_records()
            records, self._records = self._records, []
            by_id: dict[str, list[Any]] = {}
            for r in records:
                by_id.setdefault(str(r.compile_id), []).append(r)
            self._poll_breaks()  # first: a failed compile may be told by the break it could not resume after
            events, waiting = [], []
            now = time.perf_counter()
            for cap in self._pending:
                if cap.trigger == LIMIT_TRIGGER:
                    events.append(self._safely(cap, "refused", partial(self._fold_limit, cap)))
                    continue
                record = dynamo.take_record(by_id.get(cap.compile_id, []), backward="BACKWARD" in cap.trigger.upper())
                record = record_of(cap.compile_id) if cap.trigger == UNCONVERTED else record  # Dynamo made none
                if record is None and now - cap.at < PENDING_SECONDS:
                    waiting.append(cap)
                elif record is not None and is_failed(record) and not is_limit_refusal(record):
                    events.append(self._safely(cap, "failed", partial(self._fold_failed, cap, record)))
                else:
                    events.append(self._safely(cap, "compiles", partial(self._fold_compiled, cap, record)))
            self._pending = waiting
            kept = {id(c) for c in waiting}
            self._guards_read = {i: p for i, p in self._guards_read.items() if i in kept}
            self._with_backward = {i: b for i, b in self._with_backward.items() if i in kept}
            refusals, elsewhere = leftover_records((r for rs in by_id.values() for r in rs), self._handled, now)
            events += [self._safely(cap, "refused", partial(self._fold_limit, cap)) for cap in refusals]
            self._elsewhere += elsewhere
            events += self._poll_tpu()
            if events:
                self.version += 1
            return events

    def _safely(self, cap: Capture, which: str, fold: Callable[[], CompileEvent]) -> CompileEvent:
        """``fold`` of one compile, counted on its row as ``which`` (compiles, failed, refused); one that raises
        (a bug in tpu_lab) must not end the user's run: the compile is counted on its row all the same, with
        the error said there (a test or corpus run fails on it)."""
        before = sum(r.compiles + r.failed + r.refused for r in self._fold.rows.values())
        try:
            return fold()
        except Exception as e:
            self._handled.add(cap.compile_id)
            row = self._fold.row(cap.function, cap.signature)
            if sum(r.compiles + r.failed + r.refused for r in self._fold.rows.values()) == before:
                setattr(row, which, getattr(row, which) + 1)
            place = traceback.extract_tb(e.__traceback__)[-1]
            words = (
                f"tpu_lab could not explain this compile ({type(e).__name__}: {e}, at "
                f"{frames.where_label(place.filename, place.lineno or 0)}): it is counted; please report it"
            )
            row.add(RowCause(words, kind=INTERNAL, count=0))
            return CompileEvent("dynamo", cap.reason, 0.0, cause=words)

    def _fold_compiled(self, cap: Capture, record: Any) -> CompileEvent:
        self._handled.add(cap.compile_id)
        if "BACKWARD" in cap.trigger.upper():
            return self._fold.backward(cap, record)
        parts = self._guards_read.pop(id(cap), None) or guard_parts(cap.code, cap.compile_id)
        with_backward = self._with_backward.pop(id(cap), None)
        if with_backward is None:  # no compile since: no lazy backward either, so what is set now came with it
            with_backward = compiled_with_forward(cap.code, cap.compile_id, cap.scope)
        cap = cap._replace(pins=pins_of(cap.compile_id))
        guards = graph_guards(parts) if record is not None else None  # the new graph's own
        scalars = dynamic_scalars(record, guards, cap.reasons) if cap.reasons else frozenset()
        places = guard_places(parts) if guards else {}
        pins = baked_scalars(record, guards) if cap.reasons else {}
        baked = {source: (g, places.get(g, "")) for source, g in pins.items()}
        event = self._fold.compiled(cap, record, guards, scalars, cap.earlier, baked, places)
        if with_backward:  # its own row, as a lazy backward's, though Dynamo keeps no record of it
            self._fold.backward(cap._replace(trigger=EAGER_BACKWARD), None)
        return event

    def _fold_failed(self, cap: Capture, record: Any) -> CompileEvent:
        self._handled.add(cap.compile_id)
        return self._fold.failed(cap, record)

    def _fold_limit(self, cap: Capture) -> CompileEvent:
        self._handled.add(cap.compile_id)
        self.refusals += 1
        return self._fold.refused(cap)

    def _poll_breaks(self) -> None:
        found, self._break_marker = dynamo_breaks.graph_breaks_since(self._break_marker)
        for b in found:
            where = frames.where_label(b.filename, b.line) if b.filename else "?"
            code = linecache.getline(b.filename, b.line).strip() if b.filename else ""
            cause = graph_break_words(b.reason, b.library, code, (b.filename, b.line), b.stopped_at)
            cause = as_logged(backend_told(cause, b.reason, b.value_sized, "the compiled function")[0])
            said = with_numpy_setting(cause, b.library, self._fold.hooks, self._pending, (b.filename, code))
            self._fold.add_break(said, where)

    def _poll_tpu(self) -> list[CompileEvent]:
        if self._tpu is None or self._tpu_before is None:
            return []
        now = self._tpu.snapshot()
        events = self._tpu.events_between(self._tpu_before, now)
        self._tpu_before = now
        if events:
            row = self._fold.row(TPU_ROW, ())
            row.compiles += len(events)
            row.compile_seconds += sum(e.seconds for e in events)
            row.add(RowCause(events[-1].reason or "", kind="tpu", count=len(events)))
        return events

    # ---- results ----------------------------------------------------------------------------------

    @property
    def timeline(self) -> list[Point]:
        """One point per compile, for the chart."""
        return self._fold.timeline

    @property
    def limit_hit(self) -> bool:
        return bool(self._fold.limited)

    @property
    def graph_breaks(self) -> dict[str, int]:
        """Graph breaks since the watch began: ``"reason in words (file:line)"`` -> count."""
        return self.table.graph_breaks

    @property
    def table(self) -> WatchTable:
        self.poll()
        with self._lock:
            rows, breaks = self._fold.frozen()
            stances = tuple(stance_words(s) for s in self._stances_now())
        return WatchTable(
            rows, breaks, dynamo.resets - self._resets_before, tuple(self._fold.timeline), self._elsewhere, stances
        )

    def _stances_now(self) -> list[StanceSet]:
        """The unusual stances in force so far, each once (a decorated function sets its stance per call)."""
        if not self._stances and self._stance_mark in (None, dynamo_stance.mark()):
            return []  # the usual case, per entry of a decorated function: no stance set
        heard = dynamo_stance.heard_since(self._stance_mark, self._thread) if self._stance_mark is not None else []
        unusual = [s for s in [*self._stances, *heard] if s.stance != dynamo_stance.DEFAULT or s.backend]
        return list(dict.fromkeys(s._replace(thread=0) for s in unusual))

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
