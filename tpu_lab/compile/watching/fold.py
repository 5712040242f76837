"""The one fold from compile events to a table's rows: a compiled graph, a compile Dynamo gave up on, a
lazy backward, a refusal at the recompile limit, a graph break. Each event comes in with what its source
could read (Dynamo's record, the new graph's guards, the numbers made dynamic), so the live watch
(``watch``) and a TORCH_TRACE log read later (``compile.trace``) give the same rows in the same words."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from tpu_lab.compile.causes.branch_origin import by_vmap, calls_vmap
from tpu_lab.compile.causes.break_words import TRAINING_STEP_FIX
from tpu_lab.compile.causes.cause import CARRIED, Cause, readable_guard
from tpu_lab.compile.causes.explain import (
    LIMIT_RAISED_TEXT,
    LIMIT_TEXT,
    capture_causes,
    limit_raised,
)
from tpu_lab.compile.causes.first_compile import (
    CA_BACKWARD_FIX,
    backward_words,
    first_compile_words,
    is_compiled_autograd,
)
from tpu_lab.compile.causes.instances import marked_each_call_for_cases, shared_limit
from tpu_lab.compile.causes.joined import maybe_marked
from tpu_lab.compile.causes.own_graph import INSTANCES_SHARE, own_graph_first
from tpu_lab.compile.causes.resumed import carried_named, inside_names, named_inputs, slots_named
from tpu_lab.compile.causes.rnn_breaks import packed_rnn
from tpu_lab.compile.sources.dynamo_breaks import broke_in, retried
from tpu_lab.compile.sources.dynamo_dynamic import dynamic_inputs, guarded_dynamic, tensor_sources
from tpu_lab.compile.sources.dynamo_records import compile_seconds, empty_graph, served_from_cache
from tpu_lab.compile.sources.frames import RESUME, Capture, FunctionKey, renamed, shows, signature_text, with_nones
from tpu_lab.compile.sources.tpu_source import CompileEvent
from tpu_lab.compile.watching import empty_graphs, nested_library, pinned_sizes, reuse_bounds, what_next
from tpu_lab.compile.watching.empty_graphs import empty_note
from tpu_lab.compile.watching.failed import failed_compile
from tpu_lab.compile.watching.hooks_changed import as_seen, hooks_cause
from tpu_lab.compile.watching.sequence_state import reset_between_sequences
from tpu_lab.compile.watching.watch_table import BreakRow, Point, RowCause, WatchRow
from tpu_lab.compile.watching.what_next import dynamic_note, growing, marks_of, told_dynamic, unpinned, with_flags

_FLAG = re.compile(r"(.+?) == (True|False)")  # a graph's guard on a flag's value, in the user's words


class Fold:
    """Rows per function x inputs, graph breaks per place, and a timeline, from one event at a time."""

    def __init__(self, *, tpu: bool = False, started: float = 0.0, resets_before: int = 0) -> None:
        self.tpu, self.started, self.resets_before = tpu, started, resets_before
        self.rows: dict[tuple[FunctionKey, tuple], WatchRow] = {}
        self.dynamic: dict[FunctionKey, str] = {}
        self.limited: set[FunctionKey] = set()
        self.raising: set[FunctionKey] = set()  # its refusal at the limit raised (fullgraph=True): a later one too
        self.pinned: dict[FunctionKey, set[str]] = {}  # dims a graph pinned to one size, though traced dynamic
        self.compared: dict[FunctionKey, set[tuple[str, str]]] = {}  # sizes compared: no mark_unbacked on them
        self.lengths: dict[FunctionKey, dict[str, list[int]]] = {}
        self.flags: dict[FunctionKey, dict[str, str]] = {}  # flags a cause showed changing, and their values since
        self.nones: dict[FunctionKey, set[str]] = {}
        """Per function, the inputs its rows show as None (a failed guard named them): a counted call shows them too."""
        self.forward_of: dict[str, Capture] = {}  # compile id -> its forward, until its backward compiles
        self.calls: Counter[FunctionKey] = Counter()
        self.breaks: dict[tuple[str, str], list[Any]] = {}
        self.failed_codes: set[tuple[FunctionKey, int]] = set()  # a function's code objects that failed
        self.hooks: dict[FunctionKey, list[Any]] = {}  # each function's graphs' snapshots, in order (hooks_changed)
        self.hooks_seen: dict[FunctionKey, Any] = {}  # a hooks note a later compile's start saw (hooks_changed)
        self.timeline: list[Point] = []
        self.code_of: dict[FunctionKey, Any] = {}
        self.under: dict[Any, set[FunctionKey]] = {}  # a code (file, line, name) -> functions compiled in its calls
        self.caller_of: dict[FunctionKey, str] = {}
        self.passed: dict[FunctionKey, tuple[tuple[str, str, str], ...]] = {}

    def compiled(
        self,
        cap: Capture,
        record: Any,
        guards: list[str] | None,
        scalars: frozenset[str],
        earlier: FunctionKey | None,
        baked: Mapping[str, tuple[str, str]] | None = None,
        places: dict[str, str] | None = None,
    ) -> CompileEvent:
        """A graph: ``record`` Dynamo's record of it (None: never came), ``guards`` the new graph's own (None:
        unreadable), ``scalars`` the numbers made dynamic, ``earlier`` the function's earlier definition (a re-run
        cell), ``baked`` numbers made dynamic the graph still pins (guard, Dynamo's comment), ``places`` comments."""
        if "BACKWARD" in cap.trigger.upper():
            return self.backward(cap, record)
        self.forward_of[cap.compile_id] = cap
        self.code_of[cap.function] = cap.code and (cap.code.co_filename, cap.code.co_firstlineno, cap.code.co_name)
        self.caller_of[cap.function] = cap.caller  # the package whose code called it ("": the user's)
        # its inputs a caller holds too (a mark there reaches them), from any compile: evaluation's inline tensor
        # (model(torch.randint(...))) holds none, but the training call's src was held in main
        self.passed[cap.function] = tuple(dict.fromkeys((*self.passed.get(cap.function, ()), *cap.passed)))[:16]
        for code in cap.callers:
            self.under.setdefault(code, set()).add(cap.function)
        if cap.hooks:
            self.hooks.setdefault(cap.function, []).append(cap.hooks)
        said = capture_causes(cap, tpu=self.tpu, dynamic=scalars, limit=cap.limit_value, baked=baked)
        causes = [RowCause(c.words, c.guard, c.fix, c.kind, shown_guard=self._shown(c.guard, cap)) for c in said]
        for (key, _), r in self.rows.items():  # what pins a number, known now, said of its earlier changes too
            r.causes = what_next.told_as(r.causes, causes) if key == cap.function else r.causes
        before = [c for (k, _), r in self.rows.items() if k == cap.function for c in r.causes]
        grown = growing(
            causes, self.lengths.setdefault(cap.function, {}), cap.limit_value, cap.function.name.startswith(RESUME)
        )
        causes = what_next.told_as(grown, before)
        if not causes:
            again = any(k == cap.function and r.compiles for (k, _), r in self.rows.items())
            after_reset = again and cap.resets > self.resets_before
            causes = [RowCause(first_compile_words(cap.function, earlier, after_reset=after_reset), kind="first")]
        # tried: with the sizes traced symbolic, then one size after all; inside: enc.data['input_ids'], by name
        found, tried = dynamic_inputs(record, cap.signature, inside_names(tensor_sources(guards)))
        found = ", ".join(filter(None, [found, guarded_dynamic(guards)]))
        tried = renamed(", ".join(dict.fromkeys(filter(None, [*found.split(", "), *tried.split(", ")]))), cap.names)
        shapes = unpinned(renamed(", ".join(dict.fromkeys(found.split(", "))), cap.names), guards, cap.names)
        if cap.function.name.startswith(RESUME):  # the carried value by the name its line assigns, as causes say
            shapes, tried = (
                carried_named(shapes, cap.function, cap.names),
                carried_named(tried, cap.function, cap.names),
            )
        seen, first, told = (
            self.dynamic.get(cap.function, ""),
            causes[0].kind == "first",
            told_dynamic(scalars, said, shapes),
        )
        dynamic, note, self.dynamic[cap.function] = dynamic_note(
            shapes,
            told,
            seen,
            first=first,
            tpu=self.tpu,
            static=cap.static,
            every=cap.all_dynamic,
            marked=marks_of(cap),
            numpy=frozenset(n for n, d in cap.shown if d.startswith("np.")),
            failed=any(k == cap.function and r.failed for (k, _), r in self.rows.items()),
        )
        pinned = self.pinned.setdefault(cap.function, set())
        causes = pinned_sizes.settled(causes, shapes, self.tpu, tried, pinned, cap)
        causes += [n] if (n := what_next.unpinned_note(note, causes)) else []
        causes = own_graph_first(what_next.in_layout(reuse_bounds.bounded(causes, guards, cap.names, places or {})))
        self._none_before(
            cap.function, [m[1] for c in causes if (m := re.match(r"(\S+) is now .+, was None", c.words))]
        )
        compared = self.compared.setdefault(cap.function, set())
        compared |= reuse_bounds.compared_sizes(causes)
        compared |= reuse_bounds.compared_in_source(causes, cap.function.filename, cap.function.line)
        if compared:  # the bound a later graph found withdraws mark_unbacked from the function's earlier causes too
            causes = [reuse_bounds.without_unbacked(c, compared) for c in causes]
            for (key, _), r in self.rows.items():
                r.causes = (
                    [reuse_bounds.without_unbacked(c, compared) for c in r.causes] if key == cap.function else r.causes
                )
        vmapped = any("as a plain Python number" in c.words for c in causes) and calls_vmap(*cap.function[1:3])
        causes = [dataclasses.replace(c, words=by_vmap(c.words)) for c in causes] if vmapped else causes
        if refix := pinned_sizes.fixed_again(causes):  # the reason an earlier graph pinned the size is known now
            for (key, _), r in self.rows.items():
                r.causes = [pinned_sizes.refiled(c, refix) for c in r.causes] if key == cap.function else r.causes
                if vmapped and key == cap.function:
                    r.causes = [dataclasses.replace(c, words=by_vmap(c.words)) for c in r.causes]
        if self._broken(cap.function):  # code after a break may fix the size, where a mark would raise
            causes = [dataclasses.replace(c, fix=maybe_marked(c.fix)) for c in causes]
            for (key, _), r in self.rows.items():  # told before the break's other part compiled: the same fix
                r.causes = (
                    [dataclasses.replace(c, fix=maybe_marked(c.fix)) for c in r.causes]
                    if key == cap.function
                    else r.causes
                )
        for name, dim in pinned_sizes.keyed(causes):  # the size is a dict key: no part of the function may mark it
            pinned_sizes.unmark_parts(self.rows, cap.function, name, dim)
        seconds = compile_seconds(record) if record is not None else 0.0
        self.rows = what_next.flags_before(self.rows, cap.function, said)
        # a flag this graph is guarded on has the value the graph was compiled for, though no cause names it
        # (the graph it was told against had the same value: a PEFT adapter back on, its scaling changed)
        compiled_for = [(m[1], m[2]) for g in guards or () if (m := _FLAG.fullmatch(readable_guard(g, cap.names)))]
        shown = named_inputs(cap.shown, cap.function)
        shown = with_flags(shown, self.flags.setdefault(cap.function, {}), said, [*compiled_for, *cap.flags])
        row = self.row(cap.function, shown)
        row.compiles += 1
        row.compile_seconds += seconds
        counted = next((c for c in causes if c.kind != "dynamic"), None)
        for c in causes:  # one cause counts the compile; the others are said with it (a compile is counted once)
            row.add(c if c is counted or c.kind == "dynamic" else dataclasses.replace(c, count=0))
        row.dynamic = dynamic or row.dynamic
        if record is not None and empty_graph(record) and not any(c.kind in ("empty", "no_ops") for c in row.causes):
            row.add(empty_note(broke_in(cap.code, str(getattr(record, "compile_id", "") or ""))))
        cached = record is not None and served_from_cache(record)
        row.cached += cached
        self.timeline.append(Point(cap.at - self.started, str(cap.function), self.calls[cap.function]))
        return CompileEvent("dynamo", cap.reason, seconds, cause=causes[0].words, cached=cached)

    @staticmethod
    def _shown(guard: str, cap: Capture) -> str:
        """Dynamo's guard in the user's names, a resumed frame's carried value by its line's (``ptr == 0``)."""
        shown = readable_guard(slots_named(guard, cap.names), cap.names)
        if not cap.function.name.startswith(RESUME):
            return shown
        named = carried_named(shown.replace(CARRIED, "the carried value"), cap.function, cap.names)
        return shown if "the carried value" in named else named

    def _broken(self, function: FunctionKey) -> bool:
        """Whether a part of ``function`` after a graph break compiled a graph in this watch (a resumed frame)."""
        resumed = f"{RESUME}{function.name.rsplit('.', 1)[-1]}_at_"
        return any(
            k.name.startswith(resumed) and k.filename == function.filename and r.compiles
            for (k, _), r in self.rows.items()
        )

    def failed(self, cap: Capture, record: Any) -> CompileEvent:
        """A compile with no graph (``failed_compile``), on its row, and among the breaks where Dynamo logs one."""
        heard = {where: entry[0] for (_, where), entry in self.breaks.items()}  # the latest at each place
        failed = failed_compile(cap, record, capture_causes(cap, tpu=self.tpu), heard)
        row = self.row(cap.function, named_inputs(cap.shown, cap.function))
        row.failed += 1
        row.raised += failed.raises
        shown = "\n".join(self._shown(g, cap) for g in failed.guard.splitlines())  # the user's names
        again = (cap.function, id(cap.code)) in self.failed_codes  # not a second code object (an inner listcomp)
        self.failed_codes.add((cap.function, id(cap.code)))
        row.add(RowCause(failed.words, failed.guard, failed.fix, "failed", shown_guard=shown), retried=again)
        if failed.break_at and not retried(cap.compile_id):  # a retry logs the break its first attempt did
            self.add_break(failed.cause, failed.break_at)
        return CompileEvent("dynamo", cap.reason, 0.0, cause=failed.words)

    def backward(self, cap: Capture, record: Any) -> CompileEvent:
        # AOTAutograd compiles the backward graph lazily, at the first backward pass through a new forward; a
        # forward with dynamic sizes has its backward compiled with it (cap.trigger: EAGER_BACKWARD)
        forward = self.forward_of.pop(cap.compile_id, None)
        key = FunctionKey(f"{forward.function.name} (backward)", *forward.function[1:]) if forward else cap.function
        seconds = compile_seconds(record) if record is not None else 0.0
        row = self.row(key, named_inputs(forward.shown, forward.function) if forward else ())  # as its forward's
        row.compiles += 1
        row.compile_seconds += seconds
        row.add(RowCause(backward_words(cap.trigger), kind="backward"))
        self.timeline.append(Point(cap.at - self.started, str(key), self.calls[key]))
        return CompileEvent("dynamo", None, seconds, cause=row.causes[-1].words)

    def refused(self, cap: Capture) -> CompileEvent:
        """A compile Dynamo refused at the recompile limit: the call ran uncompiled, or (``cap.raises``:
        fullgraph=True or Dynamo's config makes it an error) raised FailOnRecompileLimitHit."""
        self.limited.add(cap.function)
        row = self.row(cap.function, named_inputs(cap.shown, cap.function))
        row.limit_hit = True
        row.refused += 1
        said = capture_causes(cap, tpu=self.tpu, limit=cap.limit_value)  # it kept recompiling: no "usually none"
        last = [RowCause(c.words, c.guard, c.fix, c.kind) for c in said]
        last = growing(last, self.lengths.setdefault(cap.function, {}), cap.limit_value)
        told = [c for (k, _), r in self.rows.items() if k == cap.function for c in r.causes]
        shared = any(INSTANCES_SHARE in c.words for c in told)  # a pin may be another instance's
        last = pinned_sizes.at_limit(last, set() if shared else self.pinned.get(cap.function, set()))
        last = what_next.told_as(last, told)
        fixes, raised = what_next.refused_fixes([c.fix for c in last if c.fix], cap.limit_value), ""
        fixes = shared_limit(fixes, cap.function.name, [c.words for c in told], cap.limit_value)
        if cap.raises:
            self.raising.add(cap.function)
            row.raised += 1
            raised, fix = limit_raised(cap.raises, cap.fullgraph)
            fixes.append(("else " if fixes else "keep what changes between calls out of the graph's guards, or ") + fix)
        else:
            row.uncompiled += 1
        words = f"{'; '.join(c.words for c in last)} (refused: recompile limit)" if last else ""
        words = "; ".join(filter(None, [words or (LIMIT_RAISED_TEXT if raised else LIMIT_TEXT), cap.limit, raised]))
        guards = [c.guard for c in last if c.guard]
        shown = "\n".join(self._shown(g, cap) for g in guards)  # a resumed frame's carried value by its name too
        row.add(RowCause(words, "\n".join(guards), "; ".join(fixes), "limit", 0, shown_guard=shown))
        return CompileEvent("dynamo", cap.reason, 0.0, limit_hit=True, cause=words)

    def add_break(self, cause: Cause, where: str) -> None:
        entry = self.breaks.setdefault((cause.words.split(", computed from")[0], where), [cause, 0])  # an if: once
        entry[0], entry[1] = max(entry[0], cause, key=lambda c: len(c.words)), entry[1] + 1  # with its origin

    def _none_before(self, function: FunctionKey, names: list[str]) -> None:
        """The function's earlier rows show each of ``names`` as None: a later compile found it was None there
        (the inputs shown skip a None, an unused default, but not one whose change made a graph). A row whose
        new inputs another row already shows keeps its own, so no row's counts are ever lost."""
        for name in names:
            self.nones.setdefault(function, set()).add(name)
            rows: dict[tuple[FunctionKey, tuple], WatchRow] = {}
            for (k, sig), r in self.rows.items():
                shown = with_nones(sig, [name]) if k == function and not shows(sig, name) else sig
                shown = sig if (k, shown) in self.rows else shown
                r.signature = signature_text(shown) if shown != sig else r.signature
                rows[(k, shown)] = r
            self.rows = rows

    def row(self, key: FunctionKey, signature: tuple) -> WatchRow:
        if nones := [n for n, d in signature if d == "None"]:
            self.nones.setdefault(key, set()).update(nones)
        row = self.rows.get((key, signature))
        if row is None:
            row = self.rows[(key, signature)] = WatchRow(str(key), signature_text(signature))
            same = [(k, r) for (k, _), r in self.rows.items() if k[1:3] == key[1:3] and k.via != key.via]
            for k, r in [(key, row), *same] if same else []:  # a wrapper's frame and its function's: told apart
                r.function = k.through
        return row

    def frozen(self) -> tuple[tuple[WatchRow, ...], tuple[BreakRow, ...]]:
        """The rows and breaks so far, copied (a table is a snapshot)."""
        rows = tuple(r.frozen() for r in self.rows.values())
        last_row = {key: i for i, (key, _) in enumerate(self.rows)}  # each function's newest row
        for key, i in last_row.items():  # hooks changed since the function's newest graph: a note there
            now = hooks_cause(self.hooks[key]) if key in self.hooks else None
            if note := as_seen(now, self.hooks_seen.get(key), self.hooks.get(key, [])):
                rows[i].causes.append(note)
        empty = {k for (k, _), r in self.rows.items() if any(c.kind == "empty" for c in r.causes)}
        # a resumed frame's later part (Dynamo names nested resumes alike) that compiled work: not "no part after it"
        worked = {k for (k, _), r in self.rows.items() if r.compiles and all(c.kind != "empty" for c in r.causes)}
        for (key, _), r in zip(self.rows, rows, strict=True):  # an empty graph: where its work runs, by now
            callees = (k for k in self.under.get(self.code_of.get(key), ()) if k not in empty)
            later = key in worked and key.name.startswith(RESUME)
            r.causes = empty_graphs.as_now(r.causes, key, self._broken(key) or later, callees)
        nested_library.said_at_the_call(
            (k for k, _ in self.rows), rows, self.under, self.code_of, self.caller_of, self.passed
        )
        marked_each_call_for_cases(pairs := [(k, r) for (k, _), r in zip(self.rows, rows, strict=True)])
        reset_between_sequences(pairs)
        said = packed_rnn(broke := [c for c, _ in self.breaks.values()], broke)
        for r in rows:  # a frame Dynamo gave up on at the RNN (torch 2.13), beside the packing's breaks
            r.causes = packed_rnn(r.causes, broke)
        ca = any(is_compiled_autograd(k) for k, _ in self.rows)  # the backward() break hands the backward to it
        breaks = tuple(
            BreakRow(c.words, w, n, CA_BACKWARD_FIX if ca and c.fix == TRAINING_STEP_FIX else c.fix, c.guard)
            for c, ((_, w), (_, n)) in zip(said, self.breaks.items(), strict=True)
        )
        return rows, breaks
