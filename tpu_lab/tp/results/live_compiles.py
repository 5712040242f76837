"""Each rank's compiles while a launch runs: ``RankCompiles`` (a field of ``RankStatus``, filled by every
runner from the rank's ``rank{R}.compiles.json``) and the words for who is compiling and who waits
("rank 3 compiling for 40 s, ranks 0-2 waiting"). Pure: times are wall-clock (the marker comes from
another process, maybe another host), and ``now`` is a parameter."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpu_lab.tp.results.checked_files import checked_compile_file

SLOW_COMPILE_S = 10.0
"""A compile running this long while other ranks are idle is named in the words as the one they wait for."""


@dataclass(frozen=True)
class RankCompiles:
    """One rank's compiles so far, live."""

    count: int = 0
    """Compiles finished so far."""
    function: str | None = None
    """The function it is compiling now (None: not compiling)."""
    inputs: str = ""
    """The inputs of that compile (or of the last one), e.g. ``input_ids: i64[1, 64]``."""
    since: float | None = None
    """Wall-clock time (time.time()) the current compile began."""
    last: str | None = None
    """What it compiled last, e.g. ``forward (m.py:3) with x: f32[2]``."""
    last_at: float | None = None
    """Wall-clock time that compile ended."""
    done: bool = False
    """The rank's code ended (the table is final)."""
    error: str | None = None
    """Why the watcher could not run in that rank."""

    @classmethod
    def from_marker(cls, data: Mapping[str, Any]) -> RankCompiles:
        """From a rank's file (or a host runner's message carrying it), checked first."""
        data = checked_compile_file(data) or {}
        now, last = data.get("compiling") or {}, data.get("last") or {}
        return cls(
            count=int(data.get("compiles") or 0),
            function=now.get("function"),
            inputs=str(now.get("inputs") or last.get("inputs") or ""),
            since=now.get("since"),
            last=_what(last) if last else None,
            last_at=last.get("ended"),
            done=bool(data.get("done")),
            error=data.get("error"),
        )

    def to_marker(self) -> dict[str, Any]:
        """The inverse of ``from_marker``, small enough for a host runner's message."""
        return {
            "compiles": self.count,
            "compiling": {"function": self.function, "inputs": self.inputs, "since": self.since}
            if self.function
            else None,
            "last": {"function": self.last, "inputs": "", "ended": self.last_at} if self.last else None,
            "done": self.done,
            "error": self.error,
        }

    @property
    def compiling(self) -> bool:
        return self.function is not None

    def label(self, now: float | None = None) -> str:
        """ "3 compiles, compiling step for 12 s" / "3 compiles" / "-"."""
        now = time.time() if now is None else now
        head = f"{self.count} compile{'s' if self.count != 1 else ''}"
        if self.function is not None and self.since is not None:
            return f"{head}, compiling {_short(self.function)} for {max(0.0, now - self.since):.0f} s"
        return head


def _what(event: Mapping[str, Any]) -> str:
    inputs = event.get("inputs")
    return f"{event.get('function')}" + (f" with {inputs}" if inputs else "")


def _short(function: str) -> str:
    return function.split(" (", 1)[0]


def rank_span(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 0, 2``, ``ranks 0-3``: consecutive runs joined."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    parts, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            run = ranks[start:i]
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
            start = i
    return "ranks " + ", ".join(parts)


def waiting_words(live: Mapping[int, RankCompiles | None], running: Sequence[int], now: float | None = None) -> str:
    """Who is compiling now and for how long, and who waits: "rank 3 compiling step for 40 s, ranks 0-2
    waiting". ``running``: the ranks still running. Empty when no rank compiles."""
    now = time.time() if now is None else now
    busy = {r: c for r, c in live.items() if c is not None and c.compiling and r in running}
    if not busy:
        return ""
    longest = max(busy.values(), key=lambda c: now - (c.since or now))
    seconds = now - (longest.since or now)
    what = f"compiling {_short(longest.function or '?')} for {seconds:.0f} s"
    idle = [r for r in running if r not in busy]
    waits = f", {rank_span(idle)} waiting" if idle else ""
    return f"{rank_span(list(busy))} {what}{waits}"


def hang_words(live: Mapping[int, RankCompiles | None], running: Sequence[int], finished: Sequence[int]) -> str:
    """Ranks still running after others finished, each named with what it did last. Empty when none."""
    if not finished or not running:
        return ""
    parts = []
    for r in running:
        c = live.get(r)
        if c is not None and c.compiling:
            did = f"still compiling {c.function}" + (f" with {c.inputs}" if c.inputs else "")
        elif c is not None and c.last:
            did = f"last compiled {c.last}"
        else:
            did = "compiled nothing"
        parts.append(f"rank {r} still running after {rank_span(finished)} finished ({did})")
    return "; ".join(parts)


def compile_words(state: Any, now: float | None = None) -> str:
    """The line a live view shows for a run state (``tp.results.run_state.RunState``): who compiles and who waits,
    or who still runs after others finished and what it did last. Empty when neither applies."""
    live = {r.rank: r.compiles for r in state.ranks}
    running = [r.rank for r in state.ranks if r.state.value == "running"]
    finished = [r.rank for r in state.ranks if r.state.final]
    return waiting_words(live, running, now) or hang_words(live, running, finished)
