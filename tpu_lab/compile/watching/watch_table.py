"""What a watch saw, as one renderable object: per function and input signature, calls, compiles, each compile's
cause in words with Dynamo's guard and the fix; graph breaks; the recompile limit; resets; a summary; a chart."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tpu_lab._report import banner_html
from tpu_lab.compile.causes.cause import KIND_LABELS
from tpu_lab.compile.causes.explain import LIMIT_RAISED_TEXT, LIMIT_TEXT
from tpu_lab.compile.causes.joined import said_once
from tpu_lab.compile.causes.summary_fixes import dims_joined, marks_joined
from tpu_lab.compile.table_base import Cell, CompileTableBase, compiled_words, cut

FUNCTION_WIDTH = 31  # characters of the function column in HTML: "Sequential.forward (backward) …"
CALLS_NOTE = (
    "calls: counted for functions the watch wraps (@w, %%watch) and the session's forwards; '-' elsewhere, "
    "where counting would cost every call"
)


INTERNAL = "internal"
"""The kind of a cause that says tpu_lab itself failed to explain a compile (counted all the same)."""


@dataclass
class RowCause:
    """One cause of one or more compiles of a row: words, Dynamo's guard, the fix, how many compiles."""

    words: str
    guard: str = ""
    fix: str = ""
    kind: str = ""
    count: int = 1
    shown_guard: str = ""
    """The guard as the user's code names things (``pixel_values``, not ``args[0]``); ``guard`` keeps Dynamo's text."""


_EAGER = "; it runs eagerly on every call"  # a frame given up on that fails again: Dynamo did not skip it
_TRIED = (
    "; Dynamo tries to compile it again at each call and fails each time: every call pays for a try, then runs eagerly"
)


@dataclass
class WatchRow:
    """One compiled function with one input signature (a watch keeps these, never a per-call history)."""

    function: str
    """Name and file:line (or notebook cell), e.g. ``step (train.py:12)``."""
    signature: str
    """The inputs it specialised on: ``x: f32[8, 128], n: int 3``."""
    calls: int | None = None
    """Calls with these inputs; None where they are not counted (code the watch does not wrap)."""
    compiles: int = 0
    compile_seconds: float = 0.0
    causes: list[RowCause] = field(default_factory=list)
    """Every compile's cause, distinct ones with counts, in the order they happened."""
    cached: int = 0
    """Compiles served from a persistent cache (inductor's on-disk FX graph cache, AOTAutograd's)."""
    uncompiled: int = 0
    """Calls that ran uncompiled because Dynamo's recompile limit was hit for this function."""
    refused: int = 0
    """Compiles Dynamo refused at the recompile limit (each a record of its own)."""
    raised: int = 0
    """Calls that raised instead of running: at the recompile limit, FailOnRecompileLimitHit (fullgraph=True or
    Dynamo's config makes the limit an error); or a failed compile whose error Dynamo re-raises."""
    failed: int = 0
    """Compiles Dynamo gave up on (no graph): that code runs eagerly, see the row's cause."""
    limit_hit: bool = False
    dynamic: str = ""
    """Inputs made dynamic by automatic dynamic shapes (e.g. ``x dim 0``)."""

    def add(self, cause: RowCause, *, retried: bool = True) -> None:  # retried: the same code object failed again
        again = cause.words.replace(_EAGER, _TRIED) if cause.kind == "failed" and retried else cause.words
        for c in self.causes:
            if c.words in (cause.words, again):
                c.count += cause.count
                c.words = again
                return
        self.causes.append(cause)

    @property
    def cause(self) -> str:
        """The causes in words; ``(x2)`` where one cause made several compiles; one that recurs with each
        earlier value (``self.p changed (was 0.0``, then ``(was 0.1``) said once, with the values."""
        return said_once(self.causes)

    @property
    def guard(self) -> str:
        """Dynamo's guard text behind the causes, one per line."""
        return "\n".join(c.guard for c in self.causes if c.guard)

    @property
    def shown_guard(self) -> str:
        """The same guards in the user's names, for the table."""
        lines = [g for c in self.causes if c.guard for g in (c.shown_guard or c.guard).splitlines()]
        return "\n".join(dict.fromkeys(lines))  # once each: a cause told twice against one graph holds it twice

    def frozen(self) -> WatchRow:
        return dataclasses.replace(self, causes=[dataclasses.replace(c) for c in self.causes])


class Point(NamedTuple):
    """One compile on the chart's timeline."""

    seconds: float
    """Since the watch began."""
    function: str
    calls: int
    """The function's counted calls so far (0 where calls are not counted)."""


@dataclass(frozen=True)
class BreakRow:
    """Graph breaks at one place for one reason."""

    words: str
    where: str
    count: int
    fix: str
    reason: str
    """Dynamo's own text."""


@dataclass(frozen=True)
class WatchTable(CompileTableBase):
    rows: tuple[WatchRow, ...]
    breaks: tuple[BreakRow, ...] = ()
    resets: int = 0
    """torch._dynamo.reset() calls inside the watch."""
    timeline: tuple[Point, ...] = ()
    """One point per compile."""
    elsewhere: int = 0
    """Graphs Dynamo compiled meanwhile where the watch was not listening (other threads, between its blocks)."""
    stances: tuple[str, ...] = ()
    """Each compiler stance other than the default in force during the watch (``torch.compiler.set_stance``),
    in words: the calls it ran eagerly or made raise leave no record in Dynamo."""
    HEADER = ("function", "inputs", "calls", "compiles", "compile s", "why it compiled", "Dynamo's guard", "fix")
    # One line per row at notebook width: the guard and the fix (and whatever a cut hides) are in the row's
    # disclosure under "why it compiled", and each distinct fix also closes the summary.
    HTML_COLUMNS = ((0, FUNCTION_WIDTH), (1, 22), (2, 6), (3, 22), (4, 9), (5, 38))
    HTML_FLEX = (5, 1)  # why, then inputs, take the room the others leave

    @property
    def limit_hit(self) -> bool:
        return any(r.limit_hit for r in self.rows)

    @property
    def graph_breaks(self) -> dict[str, int]:
        """``"reason words (file:line)"`` -> how many times Dynamo broke the graph there."""
        return {f"{b.words} ({b.where})": b.count for b in self.breaks}

    def by_function(self, name: str) -> list[WatchRow]:
        """Rows of the functions whose label starts with ``name``."""
        return [r for r in self.rows if r.function.startswith(name)]

    def _cells(self) -> list[tuple[str, ...]]:
        return [
            (
                r.function,
                r.signature or "-",
                "-" if r.calls is None else str(r.calls),
                compiled_words(r.compiles, r.cached)
                + (f" ({r.failed} failed)" if r.failed else "")
                + (f" ({r.uncompiled}{'+' * (r.calls is None)} ran uncompiled)" if r.uncompiled else "")
                + (f" ({r.raised} raised)" if r.raised else ""),
                f"{r.compile_seconds:.2f}",
                cut(r.cause, 160),
                _first_guard(r.shown_guard),
                cut("; ".join(dict.fromkeys(c.fix for c in r.causes if c.fix)), 120),
            )
            for r in self.rows
        ]

    def _html_cells(self) -> list[tuple[str, ...]]:
        """A long function label drops its file:line first (``Sequential.forward (backward) …``); hover or
        the row's disclosure has it."""
        return [(_short_function(c[0], FUNCTION_WIDTH), *c[1:]) for c in self._cells()]

    def _details(self, row: WatchRow) -> list[tuple[str, str]]:
        causes = "\n".join(c.words + (f" (x{c.count})" if c.count > 1 else "") for c in row.causes)
        fixes = "\n".join(dict.fromkeys(c.fix for c in row.causes if c.fix))
        return [("why it compiled", causes), ("Dynamo's guard", row.shown_guard), ("fix", fixes)]

    def summary(self) -> list[str]:
        """The closing lines: totals, graph breaks, limit, resets, then each distinct cause with its fix."""
        lines = [self.total_line()]
        if any(r.calls is None and r.compiles for r in self.rows):
            lines.append(CALLS_NOTE)
        if self.breaks:
            lines.append(f"graph breaks: {sum(b.count for b in self.breaks)}")
            lines += [
                f"  {b.count} x {b.words} at {b.where}" + (f"; fix: {b.fix}" if b.fix else "") for b in self.breaks
            ]
        for fn in dict.fromkeys(r.function for r in self.rows if r.limit_hit):
            rows = [r for r in self.rows if r.function == fn]
            limit = next((c for r in rows for c in r.causes if c.kind == "limit" and c.guard), None)
            last = limit.words.replace(" (refused: recompile limit)", "") if limit else "unknown"
            counted = all(r.calls is not None for r in rows)
            uncompiled, raised = sum(r.uncompiled for r in rows), sum(r.raised for r in rows if r.limit_hit)
            lines.append(
                f"recompile limit: {fn} stopped compiling; last cause: {last}"
                + (
                    (f"; {uncompiled} call(s) ran uncompiled" if counted else f"; at least {uncompiled} call(s) ran ")
                    + ("" if counted else "uncompiled (Dynamo no longer sees later calls, so the rest are not counted)")
                    if uncompiled or not raised
                    else ""
                )
                + (f"; {raised} call(s) raised in this watch" if raised else "")
                + (f"; fix: {limit.fix}" if limit and limit.fix else "")
            )
        for r in self.rows:
            for c in r.causes:
                if c.kind == "failed":
                    lines.append(f"{r.function}: {c.words}" + (f"; fix: {c.fix}" if c.fix else ""))
        if self.elsewhere:
            lines.append(
                f"{self.elsewhere} other compile(s) ran meanwhile where this watch was not listening (another thread, "
                "or between its blocks): not in this table (open a watch around that code too)"
            )
        if self.resets:
            lines.append(
                f"torch._dynamo.reset() ran {self.resets} time(s) inside this watch: Dynamo forgot its graphs, "
                "so compiles after it start afresh (still counted here)"
            )
        lines += self.stances
        fixes: Counter[tuple[str, str]] = Counter()  # (what is said of the cause, its fix) -> compiles
        for r in self.rows:
            for c in r.causes:
                if c.kind not in ("first", "backward", "dynamic", "limit", "failed") and (c.count or c.guard):
                    key = (KIND_LABELS.get(c.kind, c.words), c.fix)
                    fixes[key] += c.count if c.guard else max(c.count, 1)  # 0: another cause of its compile
        if fixes:
            lines.append("causes and fixes:")
            lines += [
                f"  {said} ({n} compile{'s' * (n > 1)}): {fix or 'no fix needed'}"
                if n
                else f"  {said} (with another cause in the same compile): {fix or 'no fix needed'}"
                for (said, fix), n in marks_joined(dims_joined(fixes)).items()
            ]
        notes = dict.fromkeys(c.fix for r in self.rows for c in r.causes if c.kind == "hooks" and not c.guard)
        lines += ["causes and fixes:"] * bool(notes and not fixes)
        lines += [
            f"  hooks added after a compile (no recompile, no error: the graph never runs them): {n}" for n in notes
        ]
        return lines

    def to_text(self) -> str:
        cells = self._cells()
        w = max([8, *(len(c[0]) for c in cells)])
        lines = [f"{'function':<{w}} {'inputs':<36} {'calls':>5} {'compiles':>8}  why  [Dynamo's guard]"]
        whole: list[str] = []  # a row whose why or guard was cut short: a number, and its whole text below
        n = 0
        for r, c in zip(self.rows, cells, strict=True):
            guards = r.shown_guard.splitlines()
            note = ""
            if c[5] != getattr(c[5], "full", c[5]) or len(guards) > 1 or (guards and c[6] != guards[0]):
                n += 1
                note = f" ({n})"
                whole += [f"  ({n}) why: {r.cause}"]
                whole += [f"      Dynamo's guard: {g}" for g in guards]
            lines.append(f"{c[0]:<{w}} {c[1]:<36} {c[2]:>5} {c[3]:>8}  {c[5]}{note}" + (f"  [{c[6]}]" if c[6] else ""))
        lines += ["in full, the rows cut short above:", *whole] if whole else []
        lines += self.summary()
        lines += [f"WARNING: {text}" for text in self.limit_texts()]
        return "\n".join(lines)

    def limit_texts(self) -> list[str]:
        """The recompile limit's warning: calls past it run uncompiled, or (fullgraph=True) raise; each said
        where some function met it so."""
        raising = {r.function for r in self.rows if r.raised and r.limit_hit}
        plain = any(r.limit_hit and r.function not in raising for r in self.rows)
        return [LIMIT_TEXT] * plain + [LIMIT_RAISED_TEXT] * bool(raising)

    def to_html(self) -> str:
        texts = " ".join(self.limit_texts())
        banner = banner_html("Recompile limit hit.", texts, css_class="tpu-lab-limit-banner") if texts else ""
        return self.table_html(banner, self.summary())

    def to_dict(self) -> dict[str, Any]:
        rows = [{**dataclasses.asdict(r), "cause": r.cause, "guard": r.guard} for r in self.rows]
        return {
            "rows": rows,
            "graph_breaks": [dataclasses.asdict(b) for b in self.breaks],
            "limit_hit": self.limit_hit,
            "resets": self.resets,
            "elsewhere": self.elsewhere,
            "stances": list(self.stances),
            "total_compiles": self.total_compiles,
            "from_cache": self.from_cache,
        }

    def chart(self, *, clock: str = "the watch") -> Any:
        """A matplotlib Figure: cumulative compiles per function, over its calls where they are counted,
        else over time; the legend sits below the axes, so it is never clipped."""
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        names = list(dict.fromkeys(f for _, f, _ in self.timeline))
        fig = Figure(figsize=(7, 3.2 + 0.22 * len(names)), layout="constrained")
        ax = fig.subplots()
        by_calls = all(calls for _, _, calls in self.timeline) and bool(self.timeline)
        for name in names:
            points = [(calls if by_calls else t) for t, f, calls in self.timeline if f == name]
            ax.step([0, *points], range(len(points) + 1), where="post", label=name[:60])
        ax.set_xlabel("calls" if by_calls else f"seconds into {clock}")
        ax.set_ylabel("compiles so far")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title("cumulative compiles per function")
        if names:
            fig.legend(fontsize=7, loc="outside lower center", ncols=1 if len(names) > 3 else len(names))
        return fig


def _first_guard(guards: str) -> str:
    """The first guard behind a row, shortened, and how many more failed (all are in ``to_dict()``)."""
    lines = guards.splitlines()
    return cut(lines[0], 60) + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else "") if lines else ""


def _short_function(label: str, width: int) -> str:
    """``name (file:line)`` within ``width``: whole, else the name and an ellipsis where the place was."""
    name, paren, _ = label.rpartition(" (")
    if len(label) <= width or not paren or not label.endswith(")") or len(name) + 2 > width:
        return label
    return Cell(f"{name} …", label)
