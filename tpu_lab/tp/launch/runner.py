"""The one launch interface every runner implements (one host, ssh hosts, a Ray cluster), and what they
share: the run state they fill, the wait loop (timeout, interrupt, the kernel's exit) and the default
labelled printing.

Life of a launch: ``runner = SomeRunner(job, ...)`` starts nothing (the caller can hold it first, so an
interrupt at any later moment can still stop it); ``runner.start()`` starts every process;
``runner.wait(timeout, on_output)`` calls ``stream()`` until the run is over, then returns
``result()`` or raises its LaunchError; ``runner.stop(reason)`` ends every process, from any thread.
``runner.state`` (a ``RunState``) is what views read while it runs.
"""

from __future__ import annotations

import atexit
import re
from abc import ABC, abstractmethod
from collections.abc import Callable

from tpu_lab.tp.launch.job import Job
from tpu_lab.tp.results.launch_error import interrupted_error, raise_for_failure
from tpu_lab.tp.results.launch_result import LaunchResult
from tpu_lab.tp.results.run_state import RunState

OutputCallback = Callable[["int | None", str], None]
"""``on_output(rank, line)``: one output line of a global rank (None: the launcher's own lines)."""
STREAM_SLICE_S = 0.1
DRAIN_AFTER_INTERRUPT_S = 15.0


class Runner(ABC):
    """A launch in progress, whatever runs it. Subclasses implement start, stream, stop and result."""

    def __init__(self, job: Job, state: RunState) -> None:
        self.job = job
        self.state = state
        """Live per-rank state: read it from any thread."""
        self._result: LaunchResult | None = None

    @abstractmethod
    def start(self) -> None:
        """Start every process of the launch (checks that need the hosts first). Raises LaunchError with
        nothing left running when it cannot start. Each process is tracked as it starts, so ``stop()``
        always reaches it."""

    @abstractmethod
    def stream(self, on_output: OutputCallback, seconds: float) -> bool:
        """Move the output that arrives within about ``seconds`` into ``state`` and ``on_output``, and
        notice failures (stopping the rest). True once every process has ended and all output is in."""

    @abstractmethod
    def stop(self, reason: str) -> None:
        """End every process of the launch (the first reason given is kept as ``state.stop_reason``).
        Safe from any thread, and more than once."""

    @abstractmethod
    def result(self) -> LaunchResult:
        """The LaunchResult of the finished launch (after ``stream`` returned True)."""

    def wait(self, timeout: float | None = None, on_output: OutputCallback | None = None) -> LaunchResult:
        """Stream output until the launch ends; raise LaunchError when it failed, was stopped or timed out.
        A cell interrupt stops every process of the launch, collects what each rank said up to the stop,
        and raises LaunchInterrupted (a KeyboardInterrupt) that says so in one sentence, not a traceback."""
        on_output = on_output or self.print_line
        clock = self.state.clock
        try:
            while not self.stream(on_output, STREAM_SLICE_S):
                if timeout is not None and clock() - self.state.started > timeout and self.state.stop_reason is None:
                    self.stop(f"timed out after {timeout:g} s")
        except KeyboardInterrupt:
            self.stop("interrupted")
            self._result = self._drain_after_interrupt(on_output)
            raise interrupted_error(self._result) from None
        except BaseException:
            self.stop("interrupted")
            raise
        finally:
            _LIVE.discard(self)
            self.state.end()
        self._result = self.result()
        raise_for_failure(self._result)
        return self._result

    def _drain_after_interrupt(self, on_output: OutputCallback) -> LaunchResult | None:
        """After the stop: the last output and every process's end (bounded; a second interrupt, or a
        run that will not end, gives up the collecting, never the stop)."""
        clock = self.state.clock
        deadline = clock() + DRAIN_AFTER_INTERRUPT_S
        try:
            while not self.stream(on_output, STREAM_SLICE_S):
                if clock() > deadline:
                    return None
            return self.result()
        except Exception:  # the stop already happened; a result we cannot build is not worth a traceback
            return None

    def print_line(self, rank: int | None, line: str) -> None:
        """The default ``on_output``: each rank's line, labelled ``[rank N]`` or ``[HOST rank N]``.
        The launcher's own lines stay out (they are in the result and in a LaunchError when needed)."""
        if rank is None or not line.strip():
            return
        host = self.state.ranks[rank].host if 0 <= rank < len(self.state.ranks) else None
        line = shown(line)
        print(f"[{host} rank {rank}] {line}" if host else f"[rank {rank}] {line}", flush=True)

    def track(self) -> None:
        """Stop this launch if the kernel exits while it runs (runners call it as they start)."""
        _LIVE.add(self)


_LIVE: set[Runner] = set()


@atexit.register
def _stop_all() -> None:
    """The kernel is exiting: leave no process behind, on any host."""
    for run in list(_LIVE):
        run.stop("kernel exiting")


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def shown(line: str) -> str:
    """A rank's line as the notebook may show it: terminal escapes (colours, clear-screen) dropped, other
    control characters (NUL, a stray \\r) written out visibly, so a rank cannot clear or garble the cell."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", _ANSI.sub("", line))
