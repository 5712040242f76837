"""``tl.read_trace(path)``: the compiles of a job tpu_lab never saw, from the TORCH_TRACE logs its ranks
wrote (``TORCH_TRACE=/dir`` on every rank, the folder copied here), as the same objects a launch gives:
per rank the live watch's ``WatchTable`` (the same fold and words, ``compile.trace``), merged across ranks
into a ``RunCompiles`` with the divergence findings, and the graph breaks of every rank once each. Several
runs in one folder are kept apart and named; a rank whose log stops mid-way gives its table up to there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from tpu_lab._report import Report
from tpu_lab.compile.sources.frames import FunctionKey
from tpu_lab.compile.trace.trace_fold import POSITIONAL
from tpu_lab.compile.trace.trace_log import ProcessLog
from tpu_lab.compile.trace.trace_runs import group_runs, read_logs
from tpu_lab.compile.watching.watch_table import WatchTable
from tpu_lab.errors import InvalidArgument
from tpu_lab.tp.results.divergence import divergence
from tpu_lab.tp.results.live_compiles import rank_span
from tpu_lab.tp.results.rank_compiles import RunCompiles, merge
from tpu_lab.tp.results.rank_table import RankTable

OFFLINE_NOTE = (
    "read from logs: a log holds the first failed guard of each graph Dynamo checked (where several inputs "
    "changed at once, a row names the first), not what the objects behind a guard are now, not whether a "
    "module was in train or eval mode, and not the inputs of a call refused at the recompile limit (only its "
    "first refusal is logged): those rows say less than the live watch would"
)


@dataclass(frozen=True)
class BreakPlace:
    """Graph breaks at one place for one reason, over every rank of a run."""

    words: str
    where: str
    count: int
    fix: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class TraceRun(Report):
    """One run's logs (one process, or the ranks of one job): per rank the watch's table, merged."""

    name: str
    started: str
    """``MMDD HH:MM:SS`` of its first log line, on the job's own clock."""
    files: dict[int, str]
    """rank -> its log file."""
    tables: dict[int, WatchTable]
    """rank -> the table the live watch would have shown in that rank."""
    compiles: RunCompiles
    breaks: tuple[BreakPlace, ...] = ()
    notes: tuple[str, ...] = ()
    torch_version: str = ""

    @property
    def ranks(self) -> list[int]:
        return sorted(self.tables)

    def __getitem__(self, rank: int) -> WatchTable:
        if rank not in self.tables:
            raise InvalidArgument(f"{self.name} has no log of rank {rank!r}.", fix=f"Its ranks: {self.ranks}.")
        return self.tables[rank]

    def _title(self) -> str:
        ranks = self.ranks
        who = f"ranks {rank_span(ranks).split(' ', 1)[1]}" if len(ranks) > 1 else f"rank {ranks[0]}"
        torch = f", torch {self.torch_version}" if self.torch_version else ""
        return f"{self.name}: {who}, started {self.started}{torch}, {self.compiles.total} compile(s)"

    def to_text(self) -> str:
        lines = [self._title()]
        if len(self.tables) == 1:
            lines += ["  " + line for line in next(iter(self.tables.values())).to_text().splitlines()]
        else:
            lines += ["  " + line for line in self.compiles.to_text().splitlines()[1:]]
            if self.breaks:
                lines.append("  graph breaks (every rank, each place once):")
                lines += [
                    f"    {b.count} x {b.words} at {b.where} (ranks {rank_span(b.ranks).split(' ', 1)[1]})"
                    + (f"; fix: {b.fix}" if b.fix else "")
                    for b in self.breaks
                ]
            lines.append("  one rank's whole table: run[rank] (tpu-lab trace PATH --rank N)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_html(self) -> str:
        if len(self.tables) == 1:
            body = next(iter(self.tables.values())).to_html()
        else:
            body = self.compiles.to_html() + "".join(
                f"<div>graph break: {b.count} x {escape(b.words)} at {escape(b.where)} (ranks "
                f"{escape(rank_span(b.ranks).split(' ', 1)[1])}){escape('; fix: ' + b.fix) if b.fix else ''}</div>"
                for b in self.breaks
            )
        notes = "".join(f"<div><i>note: {escape(n)}</i></div>" for n in self.notes)
        return f"<div class='tpu-lab-trace-run'><b>{escape(self._title())}</b>{body}{notes}</div>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "started": self.started,
            "torch_version": self.torch_version,
            "files": {str(r): f for r, f in self.files.items()},
            "ranks": {str(r): t.to_dict() for r, t in self.tables.items()},
            "compiles": self.compiles.to_dict(),
            "graph_breaks": [b.__dict__ for b in self.breaks],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class TraceReport(Report):
    """Every run found under a path, in the order they started."""

    path: str
    runs: tuple[TraceRun, ...]
    skipped: tuple[str, ...] = ()
    """Files under the path that are not TORCH_TRACE logs."""
    unreadable: tuple[str, ...] = ()
    """Logs that could not be read, each with why."""
    notes: tuple[str, ...] = field(default=(OFFLINE_NOTE,))

    def __getitem__(self, i: int) -> TraceRun:
        return self.runs[i]

    def __len__(self) -> int:
        return len(self.runs)

    @property
    def total(self) -> int:
        return sum(r.compiles.total for r in self.runs)

    def _head(self) -> str:
        files = sum(len(r.files) for r in self.runs)
        other = f"; {len(self.skipped)} other file(s) skipped" if self.skipped else ""
        bad = f"; {len(self.unreadable)} log(s) unreadable" if self.unreadable else ""
        return f"TORCH_TRACE logs in {self.path}: {len(self.runs)} run(s), {files} log file(s){other}{bad}"

    def to_text(self) -> str:
        lines = [self._head()] + [f"  unreadable: {u}" for u in self.unreadable]
        for run in self.runs:
            lines += ["", run.to_text()]
        return "\n".join(lines + [""] + [f"note: {n}" for n in self.notes])

    def to_html(self) -> str:
        unreadable = "".join(f"<div>unreadable: {escape(u)}</div>" for u in self.unreadable)
        notes = "".join(f"<div><i>note: {escape(n)}</i></div>" for n in self.notes)
        runs = "".join(r.to_html() for r in self.runs)
        return f"<div class='tpu-lab-trace'><b>{escape(self._head())}</b>{unreadable}{runs}{notes}</div>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "runs": [r.to_dict() for r in self.runs],
            "skipped": list(self.skipped),
            "unreadable": list(self.unreadable),
            "total_compiles": self.total,
            "notes": list(self.notes),
        }

    def chart(self, run: int = 0) -> Any:
        """A matplotlib Figure: one rank, its compiles per function; several, each rank's compiles over time."""
        if not isinstance(run, int) or isinstance(run, bool) or not 0 <= run < len(self.runs):
            raise InvalidArgument(
                f"run={run!r}: this report holds {len(self.runs)} run(s).", fix=f"Pass 0 to {len(self.runs) - 1}."
            )
        chosen = self.runs[run]
        if len(chosen.tables) == 1:
            return next(iter(chosen.tables.values())).chart(clock="the log")
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        fig = Figure(figsize=(7, 3.4), layout="constrained")
        ax = fig.subplots()
        for rank, table in sorted(chosen.tables.items()):
            times = sorted(p.seconds for p in table.timeline)
            ax.step([0.0, *times], range(len(times) + 1), where="post", label=f"rank {rank}")
        ax.set_xlabel("seconds into the run")
        ax.set_ylabel("compiles so far")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{chosen.name}: cumulative compiles per rank")
        fig.legend(fontsize=7, loc="outside lower center", ncols=min(len(chosen.tables), 8))
        return fig


def read_trace(path: str | os.PathLike[str], *, rank: int | None = None) -> TraceReport:
    """The compiles in a folder (or one file, ``.gz`` too) of TORCH_TRACE logs, per run and rank.
    ``rank``: only that rank's log of each run."""
    if not isinstance(path, str | os.PathLike):
        raise InvalidArgument(
            f"path={path!r} ({type(path).__name__}) is not a path.",
            fix="Pass the folder TORCH_TRACE pointed at (or one log file), e.g. tl.read_trace('/tmp/trace').",
        )
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
        raise InvalidArgument(f"rank={rank!r} is not a rank.", fix="Pass a rank number (0, 1, ...) or leave it out.")
    root = Path(path).expanduser()
    if not root.exists():
        raise InvalidArgument(
            f"{root} does not exist.",
            cause="the path is mistyped, or the logs were not copied here yet",
            fix="Pass the folder TORCH_TRACE pointed at when the job ran, after copying it to this machine.",
        )
    logs, skipped, unreadable = read_logs(root)
    if rank is not None:
        present = sorted({g.rank or 0 for g, _ in logs})
        logs = [(g, t) for g, t in logs if (g.rank or 0) == rank]
        if not logs and present:
            raise InvalidArgument(
                f"No log of rank {rank} in {root}.",
                cause="that rank's log was not copied, or the job ran fewer ranks (a log names its rank once "
                "the job starts torch.distributed; one that never did reads as rank 0)",
                fix=f"The ranks there: {present}.",
            )
    if not logs:
        raise InvalidArgument(
            f"No TORCH_TRACE log in {root}"
            + (f" ({len(skipped)} other file(s), none a trace log)." if skipped else "."),
            cause="the job ran without TORCH_TRACE set, or the folder holds other logs (TORCH_LOGS output is not a trace)",
            fix="Run the job with TORCH_TRACE=/some/dir set on every rank, copy that folder here, and pass it.",
        )
    runs = tuple(_run(f"run {i + 1}", group, whole=rank is None) for i, group in enumerate(group_runs(logs)))
    return TraceReport(str(root), runs, tuple(skipped), tuple(unreadable))


def _run(name: str, pairs: list[tuple[ProcessLog, WatchTable]], *, whole: bool) -> TraceRun:
    pairs = sorted(pairs, key=lambda p: p[0].rank or 0)  # by rank, as a launch's tables are (not by who started first)
    logs = [g for g, _ in pairs]
    tables = {g.rank or 0: t for g, t in pairs}
    rank_tables = tuple(RankTable.from_file(g.rank or 0, _marker(g, t)) for g, t in pairs)
    compiles = RunCompiles(rank_tables, tuple(divergence(rank_tables)), merge(rank_tables))
    first = min(logs, key=lambda g: g.first_at)
    seconds = int(first.first_at)
    started = f"{first.day[:2]}-{first.day[2:]} {seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    versions = sorted({g.torch_version for g in logs if g.torch_version})
    return TraceRun(
        name,
        started,
        {g.rank or 0: g.path for g in logs},
        tables,
        compiles,
        _breaks(tables),
        tuple(n for g, t in pairs for n in _notes(g, t)) + (_missing(logs) if whole else ()),
        ", ".join(versions),
    )


def _marker(log: ProcessLog, table: WatchTable) -> dict[str, Any]:
    """The rank file the live watcher would have written, from the log (a log ending mid-compile: compiling)."""
    unfinished = log.unfinished
    compiling = None
    if unfinished is not None:
        compiling = {"function": _compiling(log), "inputs": "", "since": None}
    return {"table": table.to_dict(), "compiles": table.total_compiles, "compiling": compiling, "done": not unfinished}


def _compiling(log: ProcessLog) -> str:
    """The function the log ends inside, named as the table names functions."""
    file, line, name = log.unfinished.stack[-1] if log.unfinished and log.unfinished.stack else ("", 0, "?")
    return str(FunctionKey(name, file, line))


def _notes(log: ProcessLog, table: WatchTable) -> list[str]:
    who = f"rank {log.rank or 0}" if log.rank is not None else "the log"
    out = []
    if log.unfinished is not None:
        out.append(
            f"{who} ends while compiling {_compiling(log)}: the process ended there, or the log was cut; its "
            "table is what it compiled up to then"
        )
    elif log.cut_last_line:
        out.append(f"{who} ends inside a line: the process was killed while writing, or the copy was cut")
    if log.bad_lines:
        out.append(f"{who}: {log.bad_lines} line(s) could not be read (damaged, or of another format) and were skipped")
    if log.unknown:
        kinds = ", ".join(f"{k} ({n})" for k, n in sorted(log.unknown.items())[:8])
        out.append(f"{who}: entries this reader does not know were kept out: {kinds} (another torch version?)")
    if log.compiled - bool(log.unfinished) > 0 and not log.records:
        out.append(
            f"{who} holds compile starts but no compilation record (another torch version?): what each compile "
            "did cannot be read from it"
        )
    if log.missing and log.records:
        out.append(f"{who}: its compilation records lack {', '.join(sorted(log.missing))} (another torch version?)")
    if log.rank is None and log.compiled:
        out.append(
            "this log names no rank (torch.distributed was not started before its first compile), so it is read "
            "as a process of its own, not as a rank of a job"
        )
    if not log.compiled:
        out.append(f"{who} holds no compile: that process never ran torch.compile'd code (or Dynamo was off)")
    if any(POSITIONAL.format(n=1) in r.signature for r in table.rows):
        out.append("input 1, input 2...: a compiled module's positional inputs in order (the log has no names)")
    return out


def _missing(logs: list[ProcessLog]) -> tuple[str, ...]:
    ranks = sorted(g.rank for g in logs if g.rank is not None)
    gaps = sorted(set(range(ranks[-1] + 1)) - set(ranks)) if ranks else []
    return (f"no log of rank(s) {', '.join(map(str, gaps))} in this run: they are not in the folder",) if gaps else ()


def _breaks(tables: dict[int, WatchTable]) -> tuple[BreakPlace, ...]:
    acc: dict[tuple[str, str], list[Any]] = {}
    for rank, table in sorted(tables.items()):
        for b in table.breaks:
            entry = acc.setdefault((b.words, b.where), [0, b.fix, []])
            entry[0] += b.count
            entry[2].append(rank)
    return tuple(BreakPlace(w, where, n, fix, tuple(ranks)) for (w, where), (n, fix, ranks) in acc.items())
