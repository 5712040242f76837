"""The one module that spawns, signals and reaps processes: a torchrun run in progress.

torchrun runs in its own session, never through a shell, its output drained by a thread. torchrun starts
each rank in a session of its own, so stopping a run means: SIGTERM to torchrun (it stops its ranks within
its 2 s shutdown timeout), then the rest is frozen and killed: every process below torchrun in the process
tree (torchrun is a child subreaper, so a rank's detached child stays in its tree) and every process that
carries this run's id in its environment. Ranks die with torchrun (PR_SET_PDEATHSIG in the worker
runner), and torchrun with this process. Starting torchrun holds back a cell interrupt until the run is
tracked, so no interrupt can land between the start and the wait.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from tpu_lab.host.processes import descendants, pids_with_env
from tpu_lab.tp.command import RUN_ID_ENV, LaunchSpec
from tpu_lab.tp.results import LaunchResult, RankResult, raise_for_failure, read_json

TAIL_LINES = 200
STOP_GRACE_SECONDS = 3.0
OutputCallback = Callable[["int | None", str], None]
_RANK_PREFIX = re.compile(r"^\[default(\d+)\]:(.*)$")


class RunningLaunch:
    """A torchrun run in progress. ``wait()`` streams output and returns the LaunchResult; ``stop()``
    ends every process of the run (safe from any thread)."""

    def __init__(
        self, spec: LaunchSpec, argv: list[str], env: dict[str, str], track: list[RunningLaunch] | None = None
    ) -> None:
        """Start torchrun. ``track`` gets this run appended as soon as torchrun exists, so a caller can stop
        it even when an interrupt arrives before this constructor returns."""
        self.spec, self.argv = spec, argv
        self.started = time.monotonic()
        self.finished: float | None = None
        self.tails: dict[int | None, deque[str]] = {}
        self.stop_reason: str | None = None
        self._lines: queue.Queue[tuple[int | None, str] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"tpu_lab-launch-{spec.run_id[:8]}", daemon=True)
        with interrupts_held():
            self.proc = _spawn(argv, env, stdin=subprocess.DEVNULL)
            _LIVE.add(self)
            if track is not None:
                track.append(self)
            self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:  # drained continuously, so a chatty rank never blocks on a full pipe
            line = raw.rstrip("\n")
            m = _RANK_PREFIX.match(line)
            rank, text = (int(m[1]), m[2]) if m else (None, line)
            self.tails.setdefault(rank, deque(maxlen=TAIL_LINES)).append(text)
            self._lines.put((rank, text))
        self._lines.put(None)

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, reason: str = "stopped") -> None:
        """SIGTERM torchrun (it stops its ranks), then freeze and SIGKILL whatever of the run is left."""
        with self._lock:
            self.stop_reason = self.stop_reason or reason
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(STOP_GRACE_SECONDS)
            kill_run(self.spec.run_id, root=self.proc.pid if self.proc.poll() is None else None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(STOP_GRACE_SECONDS)

    def wait(self, timeout: float | None = None, on_output: OutputCallback | None = None) -> LaunchResult:
        """Stream output until the run ends; raise LaunchError when a rank failed or time ran out.
        KeyboardInterrupt (a cell interrupt) stops every process of the run, then propagates."""
        on_output = on_output or _print_line
        deadline = None if timeout is None else self.started + timeout
        try:
            done = False
            while not done:
                try:
                    item = self._lines.get(timeout=0.1)
                    if item is None:  # the reader saw torchrun's output end
                        done = True
                    else:
                        on_output(*item)
                except queue.Empty:
                    pass
                if deadline is not None and time.monotonic() > deadline and self.running():
                    self.stop(f"timed out after {timeout:g} s")
            self.proc.wait()
        except BaseException:
            self.stop("interrupted")
            raise
        finally:
            kill_run(self.spec.run_id)
            _LIVE.discard(self)
            self.finished = time.monotonic()
        result = self._collect()
        raise_for_failure(result)
        return result

    def rank_lines(self, rank: int | None) -> list[str]:
        """The latest output lines of one rank (None: torchrun's own), up to TAIL_LINES."""
        return list(self.tails.get(rank, ()))

    def rank_state(self, rank: int) -> str:
        """ "running", "ok", "failed (exit N)" or "stopped", from the rank's status file while the run goes on."""
        status = read_json(self.spec.run_dir / f"rank{rank}.status.json")
        if status is not None:
            code = status.get("exit_code")
            return "ok" if code == 0 else f"failed (exit {code})"
        return "running" if self.finished is None and self.stop_reason is None else "stopped"

    def _collect(self) -> LaunchResult:
        launcher = "\n".join(self.tails.get(None, ()))
        torchrun_codes = {
            int(r): int(c) for r, c in re.findall(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", launcher)
        }
        ranks = []
        for rank in range(self.spec.first_rank, self.spec.first_rank + self.spec.nproc):
            status = read_json(self.spec.run_dir / f"rank{rank}.status.json") or {}
            code = status.get("exit_code", torchrun_codes.get(rank))
            sig = None
            if code is not None and code < 0:
                sig, code = signal.Signals(-code).name, None
            elif code is None and self.stop_reason:
                sig = "SIGTERM"
            error = status.get("error")
            if code not in (0, None) and not error:
                error = "\n".join(list(self.tails.get(rank, ()))[-30:])
            ranks.append(
                RankResult(
                    rank=rank,
                    exit_code=code,
                    signal=sig,
                    value=read_json(self.spec.run_dir / f"rank{rank}.value.json"),
                    output="\n".join(self.tails.get(rank, ())),
                    error=error,
                )
            )
        return LaunchResult(tuple(self.argv), self.spec.run_dir, self.elapsed, tuple(ranks), launcher, self.stop_reason)


def kill_run(run_id: str, root: int | None = None) -> int:
    """End every process of a run: those whose environment carries its id and, with ``root``, every
    descendant of ``root``. Each is frozen (SIGSTOP) until no new one appears, so none can fork or be
    re-parented away between the look-up and the kill; then all get SIGKILL. Returns how many."""
    return _freeze_and_kill(lambda: run_pids(run_id) + (descendants(root) if root else []) + ([root] if root else []))


def end_descendants() -> int:
    """End every descendant of this process (torchrun's runner calls it as it exits)."""
    return _freeze_and_kill(lambda: descendants(os.getpid()))


def _freeze_and_kill(find: Callable[[], list[int]], rounds: int = 20) -> int:
    frozen: set[int] = set()
    for _ in range(rounds):
        new = [pid for pid in find() if pid not in frozen and pid != os.getpid()]
        if not new:
            break
        for pid in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        frozen.update(new)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(frozen)


def run_pids(run_id: str | None = None) -> list[int]:
    """Live processes started by tl.launch (of one run, or of any run), found by their environment marker."""
    return pids_with_env(f"{RUN_ID_ENV}={run_id}".encode() if run_id else f"{RUN_ID_ENV}=".encode())


def spawn_client(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """A client that runs something on another host (ssh, or a tool like gcloud): its own session (a cell
    interrupt reaches only the kernel), SIGTERM when this process dies, stdin and stdout piped (stderr
    merged), never through a local shell."""
    return _spawn(argv, env, stdin=subprocess.PIPE)


def _spawn(argv: list[str], env: dict[str, str], *, stdin: int) -> subprocess.Popen[str]:
    """Every long-lived child: its own session (a cell interrupt reaches only the kernel), SIGTERM when
    this process dies, output piped line by line (stderr merged), never through a shell."""
    return subprocess.Popen(
        argv,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_term_with_parent,
        text=True,
        errors="replace",
        bufsize=1,
    )


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold back a SIGINT (a cell interrupt) inside the block and raise it at the end, so a process is
    never left started but untracked. Only the main thread receives SIGINT; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, Any]] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            if callable(previous):
                previous(*held[0])
            else:
                raise KeyboardInterrupt


def end_clients(procs: list[subprocess.Popen[str]], grace: float) -> None:
    """Give the clients ``grace`` seconds in all to exit by themselves, then SIGKILL the session of each
    one still running (a tool's own ssh child included), and reap them all."""
    deadline = time.monotonic() + grace
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_briefly(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a short-lived child to completion (output captured); it is killed at ``timeout``."""
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _term_with_parent() -> None:
    # Runs in the child before exec: torchrun gets SIGTERM when this process dies, even by SIGKILL.
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _print_line(rank: int | None, line: str) -> None:
    # torchrun's own lines (its logging and, on failure, its own traceback) stay out of the live view;
    # they are in LaunchResult.launcher_output and in a LaunchError when no rank explains the failure.
    if rank is not None and line.strip():
        print(f"[rank {rank}] {line}", flush=True)


_LIVE: set[RunningLaunch] = set()


@atexit.register
def _stop_all() -> None:
    """The kernel is exiting: leave no rank behind."""
    for run in list(_LIVE):
        run.stop("kernel exiting")
