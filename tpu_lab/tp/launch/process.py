"""The one module that spawns, signals and reaps processes, for every runner and helper: torchrun, the
clients that reach other hosts (ssh), short-lived probes (torch_tpu's launch environment), and
servers started for tests and notebooks (the loopback sshd).

Every long-lived child runs in its own session (a cell interrupt reaches only the kernel), gets SIGTERM
when this process dies (PR_SET_PDEATHSIG), and never runs through a shell. torchrun starts each rank in
a session of its own, so stopping a run means: SIGTERM to torchrun (it stops its ranks within its 2 s
shutdown timeout), then the rest is frozen and killed (``kill_run``): every process below torchrun in the
process tree (torchrun is a child subreaper) and every process that carries the run's id in its
environment. ``interrupts_held`` holds back a cell interrupt while a process starts, so none is ever
started but untracked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tpu_lab.host.processes import alive, descendants, pids_with_env
from tpu_lab.tp.launch.torchrun_command import RUN_ID_ENV

KILLED_EXIT_WAIT_S = 10.0  # how long a SIGKILLed process may take to exit (memory freed) before we go on


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
    # A SIGKILL takes effect only as the process exits: one holding gigabytes lives on for a while after
    # the signal. Wait until each is gone, so nothing of the run is still there when the caller goes on.
    deadline = time.monotonic() + KILLED_EXIT_WAIT_S
    while any(alive(pid) for pid in frozen) and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(frozen)


def run_pids(run_id: str | None = None) -> list[int]:
    """Live processes started by tl.launch (of one run, or of any run), found by their environment marker."""
    return pids_with_env(f"{RUN_ID_ENV}={run_id}".encode() if run_id else f"{RUN_ID_ENV}=".encode())


def spawn_launcher(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """torchrun: its own session, SIGTERM when this process dies, no stdin, stdout and stderr piped."""
    return _spawn(argv, env, stdin=subprocess.DEVNULL)


def spawn_server(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A server for tests and notebooks (e.g. sshd): its own session, SIGTERM when this process dies
    (so a kernel that ends, however it ends, ends it too), output appended to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_term_with_parent,
        )  # fmt: skip


def stop_session(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the session of ``proc``, SIGKILL it after ``grace`` seconds, and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def terminate_then_kill(proc: subprocess.Popen, run_id: str, grace: float) -> None:
    """Stop a torchrun: SIGTERM its session, give it ``grace`` s to stop its ranks, then freeze and kill
    whatever of the run is left (its tree and every process with the run's id)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    kill_run(run_id, root=proc.pid if proc.poll() is None else None)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)


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
