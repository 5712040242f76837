"""The state of a launch while it runs, one object whatever runs it (one host, ssh hosts, a Ray cluster):
each rank's host, state, latest lines and exit, the stop reason, and the time on an injected clock.

Runners write it (from their reader threads too); ``LaunchPanel``, ``%%tp_run`` and ``LaunchResult``
read it. Nothing here parses text: a runner sets a rank's state as it learns it.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tpu_lab.tp.results.live_compiles import RankCompiles

TAIL_LINES = 200
"""Lines kept per rank (and for the launcher's own lines)."""


class RankState(enum.Enum):
    """Where a rank is. The last three are final."""

    WAITING = "waiting"
    """Not started yet (hosts being checked, torchrun starting)."""
    RUNNING = "running"
    OK = "ok"
    """Exited 0."""
    FAILED = "failed"
    """Exited non-zero, or died of a signal nobody in the launch sent."""
    STOPPED = "stopped"
    """Ended by the launch: Stop, a timeout, an interrupt, or another rank's failure."""

    @property
    def final(self) -> bool:
        return self in (RankState.OK, RankState.FAILED, RankState.STOPPED)


@dataclass
class RankStatus:
    """One rank, as its runner knows it now."""

    rank: int
    """Global rank."""
    host: str | None = None
    """The host it runs on (None: this machine, a single-host launch)."""
    state: RankState = RankState.WAITING
    exit_code: int | None = None
    """Its exit code once known (None while running, or when a signal ended it)."""
    signal: str | None = None
    """The signal that ended it, e.g. "SIGKILL", when one did."""
    failed_at: float | None = None
    """Wall-clock time (time.time()) of its failure, to blame the first rank that failed."""
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    """Its latest output lines."""
    compiles: RankCompiles | None = None
    """Its compiles so far, live (None: not watched, or it has not imported Dynamo); see ``tp.results.live_compiles``."""

    @property
    def label(self) -> str:
        """ "running", "ok", "failed (exit 1)", "failed (SIGKILL)", "stopped", "waiting"."""
        if self.state is RankState.FAILED:
            return f"failed ({self.signal})" if self.signal else f"failed (exit {self.exit_code})"
        return self.state.value


class RunState:
    """Every rank of one launch (by global rank), the launcher's own lines, why it stopped, and its time.
    Safe to read from any thread while a runner writes it."""

    def __init__(
        self, ranks: int, hosts: Sequence[str | None] = (), clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``ranks`` ranks in all; ``hosts`` gives each rank's host (empty: all on this machine)."""
        self.clock = clock
        self.started = clock()
        self.finished: float | None = None
        self.stop_reason: str | None = None
        """Why the launch stopped its processes ("Stop button", "timed out after 60 s", ...), or None."""
        self.failure: str | None = None
        """What failed first, in words ("rank 2 on host h1 failed"), once a runner knows."""
        self.ranks = [RankStatus(r, hosts[r] if hosts else None) for r in range(ranks)]
        self.launcher: deque[str] = deque(maxlen=TAIL_LINES)
        """Lines not from a rank (torchrun's own, a host runner's, ssh's)."""
        self._lock = threading.Lock()

    @property
    def elapsed(self) -> float:
        return (self.finished if self.finished is not None else self.clock()) - self.started

    def add_line(self, rank: int | None, text: str) -> None:
        with self._lock:
            if rank is None or not 0 <= rank < len(self.ranks):
                self.launcher.append(text)
                return
            status = self.ranks[rank]
            status.tail.append(text)
            if status.state is RankState.WAITING:
                status.state = RankState.RUNNING

    def lines(self, rank: int | None) -> list[str]:
        """The latest lines of ``rank`` (None: the launcher's own)."""
        with self._lock:
            return list(self.launcher if rank is None else self.ranks[rank].tail)

    def set_rank(self, rank: int, state: RankState, **fields: object) -> None:
        """Set a rank's state (and ``exit_code``, ``signal``, ``failed_at``); a final state stays final."""
        with self._lock:
            status = self.ranks[rank]
            if status.state.final and not state.final:
                return
            status.state = state
            for name, value in fields.items():
                setattr(status, name, value)

    def set_compiles(self, rank: int, compiles: RankCompiles) -> None:
        """A rank's live compile state, as its runner last read it (live_compiles.RankCompiles)."""
        with self._lock:
            if 0 <= rank < len(self.ranks):
                self.ranks[rank].compiles = compiles

    def end(self) -> None:
        """The launch is over: ranks that never reported a final state were stopped."""
        with self._lock:
            for status in self.ranks:
                if not status.state.final:
                    status.state = RankState.STOPPED
            if self.finished is None:
                self.finished = self.clock()

    def counts(self) -> dict[RankState, int]:
        with self._lock:
            return {s: sum(r.state is s for r in self.ranks) for s in RankState}

    def first_failed(self) -> RankStatus | None:
        """The rank that failed first (by its failure time, then rank), not the first that reported."""
        with self._lock:
            failed = [r for r in self.ranks if r.state is RankState.FAILED]
        return min(failed, key=lambda r: (r.failed_at or float("inf"), r.rank), default=None)
