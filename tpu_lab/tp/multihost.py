"""A launch across hosts: one torchrun per host, each started over ssh through the host runner
(``tp._remote``), with one labelled stream and one stop.

``tp.launch_hosts.start_hosts()`` checks the arguments; ``HostLaunch`` starts one client per host (``tp.process.spawn_client``), sends
each host its job and waits until every host has answered its check (reachable, the same Python with
tpu_lab, chips against nproc; a host that fails is named and nothing starts anywhere). Then every host
gets ``go`` with its torchrun argv (``tp.remote_command.node_argv``: static rendezvous on the first
host). ``HostLaunch.wait()`` streams every line labelled with host and rank; a failing rank, a lost
host, the timeout, an interrupt or the kernel's exit stops every process on every host: each host
runner stops its own processes (on ``stop`` or when its connection ends), and a client that has not
ended after the grace period is killed, which ends its connection.
"""

from __future__ import annotations

import atexit
import json
import queue
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

from tpu_lab.tp import host_results, wire
from tpu_lab.tp.command import RUN_ID_ENV, LaunchSpec
from tpu_lab.tp.process import OutputCallback, end_clients, interrupts_held, spawn_client
from tpu_lab.tp.remote_command import (
    CONNECT_TIMEOUT_S,
    Remote,
    address,
    client_argv,
    forwarded_env,
    go_message,
    host_python,
    remote_argv,
)
from tpu_lab.tp.results import LaunchResult

CONNECT_DEADLINE_S = CONNECT_TIMEOUT_S + 3  # every host says "hi" by then (ssh gives up connecting at 10 s)
READY_DEADLINE_S = 150.0  # every host has checked itself (torch_tpu's launch environment takes a while)
STOP_GRACE_S = 10.0  # a host runner stops its processes within ~6 s; its client is killed after this
TAIL_LINES = 200


@dataclass
class _Host:
    name: str
    node: int
    proc: Popen[str]
    said_hi: bool = False
    hello: dict[str, Any] | None = None
    problem: str | None = None
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    argv: tuple[str, ...] = ()
    own: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    """Lines not from a rank: the client's own, the runner's, torchrun's."""


class HostLaunch:
    """A launch on several hosts. ``check()`` then ``wait()`` (``start_hosts`` calls ``check``);
    ``stop()`` ends every process on every host (safe from any thread)."""

    def __init__(
        self, names: Sequence[str], remote: Remote, job: dict[str, Any], environ: Mapping[str, str], on_start: Any
    ) -> None:
        on_start(self)  # before any client starts: the caller can always stop this launch
        self.remote, self.job = remote, job
        self.nproc: int = job["nproc"]
        self.run_id: str = job["run_id"]
        self.started = time.monotonic()
        self.finished: float | None = None
        self.stop_reason: str | None = None
        self.failure: str | None = None
        self.tails: dict[int, deque[str]] = {}
        self.hosts: list[_Host] = []
        self._events: queue.Queue[tuple[int, str, Any]] = queue.Queue()
        self._lock = threading.Lock()
        self._kill_at: float | None = None
        env = {**environ, RUN_ID_ENV: f"{self.run_id}-local-"}  # clients are findable too
        forwarded = forwarded_env(environ)
        _LIVE.add(self)
        try:
            for node, name in enumerate(names):
                python = host_python(remote, name)
                command = remote_argv(python, forwarded, f"{RUN_ID_ENV}={self._marker(node)}")
                with interrupts_held():  # started and known, or neither
                    host = _Host(name, node, spawn_client(client_argv(remote, name, node, command), env))
                    self.hosts.append(host)
                threading.Thread(target=self._read, args=(host,), name=f"tpu_lab-host-{node}", daemon=True).start()
                self._send(host, {**job, "kind": "job", "node": node})
        except BaseException:
            self.stop("interrupted while starting")
            raise

    def _marker(self, node: int) -> str:
        return f"{self.run_id}-node{node}-"  # distinct per host, so a host's stop never reaches another's

    def _read(self, host: _Host) -> None:
        assert host.proc.stdout is not None
        for raw in host.proc.stdout:  # drained continuously, so no host ever blocks on a full pipe
            kind, data = wire.parse(raw.rstrip("\n"))
            self._events.put((host.node, kind, data))
        self._events.put((host.node, "exit", host.proc.wait()))

    def _send(self, host: _Host, message: dict[str, Any]) -> None:
        try:
            assert host.proc.stdin is not None
            host.proc.stdin.write(json.dumps(message) + "\n")
            host.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the client is gone: its exit event says so

    def _handle(self, node: int, kind: str, data: Any, on_output: OutputCallback) -> None:
        host = self.hosts[node]
        if kind == "control":
            message = data.get("kind")
            if message == "hi":
                host.said_hi = True
            elif message == "hello":
                host.hello = data
            elif message == "error":
                host.problem = str(data.get("message"))
            elif message == "result":
                host.result = data
        elif kind == "line" and data[0] is not None:
            self.tails.setdefault(data[0], deque(maxlen=TAIL_LINES)).append(data[1])
            on_output(data[0], data[1])
        elif kind in ("line", "raw"):
            text = data[1] if kind == "line" else data
            host.own.append(text)
            on_output(None, f"{host.name}: {text}")
        elif kind == "exit":
            host.exit_code = data

    def _next(self, on_output: OutputCallback) -> None:
        try:
            self._handle(*self._events.get(timeout=0.1), on_output=on_output)
        except queue.Empty:
            pass

    def check(self) -> None:
        """Wait until every host has checked itself, then start torchrun everywhere. Raises LaunchError
        naming the hosts that failed (unreachable, no tpu_lab, another Python); then nothing started."""
        ours = wire.python_facts()
        try:
            while not all(h.hello for h in self.hosts):
                failed = [h for h in self.hosts if h.problem or (h.exit_code is not None and not h.hello)]
                if failed:
                    raise host_results.check_failed(failed, self.remote)
                waited = time.monotonic() - self.started
                silent = [h for h in self.hosts if not h.said_hi and h.exit_code is None]
                if silent and waited > CONNECT_DEADLINE_S:
                    raise host_results.unreachable(silent, waited)
                if waited > READY_DEADLINE_S:
                    raise host_results.not_ready([h for h in self.hosts if not h.hello], waited)
                self._next(lambda rank, line: None)
            for h in self.hosts:
                assert h.hello is not None
                problem = wire.facts_problem(h.name, host_python(self.remote, h.name), h.hello, ours)
                if problem:
                    raise host_results.other_python(h, problem)
            self._go()
        except BaseException:
            self.stop("a host failed its check")
            _LIVE.discard(self)
            raise

    def _go(self) -> None:
        first = self.hosts[0].hello
        assert first is not None
        master, port = address(self.hosts[0].name), int(first["port"])
        for h in self.hosts:
            assert h.hello is not None
            spec = LaunchSpec(
                script=Path(h.hello["script"]),
                nproc=self.nproc,
                run_dir=Path(h.hello["run_dir"]),
                run_id=self._marker(h.node),
                port=port,
                args=tuple(self.job["args"]),
                env=dict(self.job["env"]),
                python=host_python(self.remote, h.name),
                first_rank=h.node * self.nproc,
                nnodes=len(self.hosts),
            )
            go = go_message(
                spec, nnodes=len(self.hosts), node_rank=h.node, master=master, port=port, rdzv_id=self.run_id
            )
            h.argv = tuple(go["argv"])
            self._send(h, go)

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def running(self) -> bool:
        return any(h.exit_code is None for h in self.hosts) and self.finished is None

    def _ask_stop(self, reason: str) -> None:
        for h in self.hosts:
            self._send(h, {"kind": "stop", "reason": reason})
        if self._kill_at is None:
            self._kill_at = time.monotonic() + STOP_GRACE_S

    def stop(self, reason: str = "stopped") -> None:
        """Every host stops its processes; a client still running after the grace period is killed."""
        with self._lock:
            self.stop_reason = self.stop_reason or reason
            self._ask_stop(reason)
            end_clients([h.proc for h in self.hosts], max(0.0, (self._kill_at or 0) - time.monotonic()))

    def wait(self, timeout: float | None = None, on_output: OutputCallback | None = None) -> LaunchResult:
        """Stream every host's output until all have ended; raise LaunchError when a rank failed, a host
        was lost or time ran out. KeyboardInterrupt stops every process on every host, then propagates."""
        on_output = on_output or self._print
        deadline = None if timeout is None else self.started + timeout
        try:
            while any(h.exit_code is None for h in self.hosts):
                self._next(on_output)
                now = time.monotonic()
                if self.failure is None and self.stop_reason is None:
                    self.failure = host_results.first_failure(self.hosts, self.nproc)
                    if self.failure is not None:
                        self._ask_stop(f"stopped: {self.failure}")
                if deadline is not None and now > deadline and self.stop_reason is None:
                    self.stop_reason = f"timed out after {timeout:g} s"
                    self._ask_stop(self.stop_reason)
                if self._kill_at is not None and now > self._kill_at:
                    end_clients([h.proc for h in self.hosts], 0)
            while not self._events.empty():
                self._next(on_output)
        except BaseException:
            self.stop("interrupted")
            raise
        finally:
            _LIVE.discard(self)
            self.finished = time.monotonic()
        result = host_results.collect(self.hosts, self.nproc, self.tails, self.elapsed, self.stop_reason)
        host_results.raise_for_failure(result, self.failure)
        return result

    def _print(self, rank: int | None, line: str) -> None:
        if rank is not None and line.strip():
            print(f"[{self.hosts[rank // self.nproc].name} rank {rank}] {line}", flush=True)

    def rank_lines(self, rank: int | None) -> list[str]:
        """The latest output lines of one rank (None: every host's own lines), up to TAIL_LINES."""
        if rank is None:
            return [f"{h.name}: {line}" for h in self.hosts for line in h.own]
        return list(self.tails.get(rank, ()))

    def rank_state(self, rank: int) -> str:
        """ "running", "ok", "failed (exit N)" or "stopped"."""
        host = self.hosts[rank // self.nproc]
        for r in (host.result or {}).get("ranks", []):
            if r["rank"] == rank and r["exit_code"] is not None:
                return "ok" if r["exit_code"] == 0 else f"failed (exit {r['exit_code']})"
        alive = self.finished is None and self.stop_reason is None and host.exit_code is None
        return "running" if alive else "stopped"


_LIVE: set[HostLaunch] = set()


@atexit.register
def _stop_all() -> None:
    """The kernel is exiting: leave no process behind on any host."""
    for run in list(_LIVE):
        run.stop("kernel exiting")
