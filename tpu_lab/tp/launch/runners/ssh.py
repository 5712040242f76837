"""The ssh runner: one torchrun per host, each started over ssh through the host runner
(``runners.ssh_host``), with one labelled stream, one run state and one stop.

``start()`` starts one client per host (``process.spawn_client``), sends each host the job and waits
until every host has answered its check (reachable, the same Python with tpu_lab, chips against nproc;
a host that fails is named and nothing starts anywhere). Then every host gets ``go`` (the rendezvous
address and port on the first host) and builds its node's torchrun command itself. ``stream()`` passes
every line on labelled with its global rank and follows each rank's state. The first failure anywhere
(a rank that failed or was killed by a signal, a torchrun killed, a host lost or gone silent) stops
every host at once: each host runner stops its own processes; a host that has not confirmed within the
grace period gets its client killed and its processes killed through a second connection.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Any

from tpu_lab.tp.launch.hosts import Hosts, address, resolve_hosts
from tpu_lab.tp.launch.job import Job
from tpu_lab.tp.launch.process import end_clients, interrupts_held, run_briefly, spawn_client
from tpu_lab.tp.launch.runner import OutputCallback, Runner
from tpu_lab.tp.launch.runners import multihost_results, ssh_failures
from tpu_lab.tp.launch.runners import ssh_wire as wire
from tpu_lab.tp.launch.runners.ssh_command import (
    CONNECT_TIMEOUT_S,
    Remote,
    check_remote,
    client_argv,
    forwarded_env,
    host_python,
    remote_argv,
)
from tpu_lab.tp.launch.runners.ssh_failures import SshHost
from tpu_lab.tp.launch.torchrun_command import RUN_ID_ENV
from tpu_lab.tp.results.launch_result import LaunchResult
from tpu_lab.tp.results.live_compiles import RankCompiles
from tpu_lab.tp.results.run_state import RankState, RunState

CONNECT_DEADLINE_S = CONNECT_TIMEOUT_S + 3  # every host says "hi" by then (ssh gives up connecting at 10 s)
READY_DEADLINE_S = 150.0  # every host has checked itself (torch_tpu's launch environment takes a while)
STOP_GRACE_S = 10.0  # a host runner stops its processes within ~6 s; its client is killed after this
SILENT_AFTER_S = 8.0  # a running host runner beats every second: this long without a line, it is frozen or gone
KILL_TIMEOUT_S = 20.0


class SshRunner(Runner):
    """``tl.launch(code, nproc=N, hosts=[...], remote=tl.Remote(...))``."""

    def __init__(self, job: Job, *, hosts: Hosts, remote: Remote | None, environ: Mapping[str, str]) -> None:
        self.names = resolve_hosts(hosts, environ)
        self.remote = check_remote(remote)
        nproc = job.nproc
        super().__init__(
            job, RunState(nproc * len(self.names), [self.names[r // nproc] for r in range(nproc * len(self.names))])
        )
        self.environ = environ
        self.hosts: list[SshHost] = []
        self._events: queue.Queue[tuple[int, str, Any]] = queue.Queue()
        self._lock = threading.Lock()
        self._kill_at: float | None = None
        self._failed_at: float | None = None
        self._going = False

    def _marker(self, node: int) -> str:
        return f"{self.job.run_id}-node{node}-"  # distinct per host, so a host's stop never reaches another's

    # ---- start ------------------------------------------------------------------------------------

    def start(self) -> None:
        job = self._job_message()
        env = {**self.environ, RUN_ID_ENV: f"{self.job.run_id}-local-"}  # clients are findable too
        forwarded = forwarded_env(self.environ)
        self.track()
        for node, name in enumerate(self.names):
            command = remote_argv(host_python(self.remote, name), forwarded, f"{RUN_ID_ENV}={self._marker(node)}")
            with interrupts_held():  # started and known, or neither
                host = SshHost(name, node, spawn_client(client_argv(self.remote, name, node, command), env))
                self.hosts.append(host)
            threading.Thread(target=self._read, args=(host,), name=f"tpu_lab-host-{node}", daemon=True).start()
            self._send(host, {**job, "node": node})
        self._check()
        self._go()

    def _job_message(self) -> dict[str, Any]:
        # JSON carries text: undecodable bytes (a file in a legacy encoding) travel as surrogates and are
        # written back byte for byte on each host.
        return {
            "kind": "job",
            "run_id": self.job.run_id,
            "nproc": self.job.nproc,
            "addresses": [address(n) for n in self.names],
            "source": self.job.source.decode("utf-8", "surrogateescape"),
            "path": None if self.job.path is None else str(self.job.path),
            "cwd": os.getcwd(),
            "rdzv_port": self.remote.rdzv_port,
            "args": list(self.job.args),
            "env": dict(self.job.env),
        }

    def _read(self, host: SshHost) -> None:
        assert host.proc.stdout is not None
        for raw in host.proc.stdout:  # drained continuously, so no host ever blocks on a full pipe
            kind, data = wire.parse(raw.rstrip("\n"))
            self._events.put((host.node, kind, data))
        self._events.put((host.node, "exit", host.proc.wait()))

    def _send(self, host: SshHost, message: dict[str, Any]) -> None:
        try:
            assert host.proc.stdin is not None
            host.proc.stdin.write(json.dumps(message) + "\n")
            host.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the client is gone: its exit event says so

    def _check(self) -> None:
        """Wait until every host has checked itself. Raises LaunchError naming the hosts that failed
        (unreachable, no tpu_lab, another Python); then nothing started anywhere."""
        ours = wire.python_facts()
        while not all(h.hello for h in self.hosts):
            failed = [h for h in self.hosts if h.problem or (h.exit_code is not None and not h.hello)]
            if failed:
                raise ssh_failures.check_failed(failed, self.remote)
            waited = self.state.elapsed
            silent = [h for h in self.hosts if not h.said_hi and h.exit_code is None]
            if silent and waited > CONNECT_DEADLINE_S:
                raise ssh_failures.unreachable(silent, waited)
            if waited > READY_DEADLINE_S:
                raise multihost_results.not_ready([h for h in self.hosts if not h.hello], waited)
            self._next(lambda rank, line: None, 0.1)
        for h in self.hosts:
            assert h.hello is not None
            problem = wire.facts_problem(h.name, host_python(self.remote, h.name), h.hello, ours)
            if problem:
                raise multihost_results.other_python(h, problem)

    def _go(self) -> None:
        first = self.hosts[0].hello
        assert first is not None
        go = {"kind": "go", "master": address(self.hosts[0].name), "port": int(first["port"])}
        now = time.monotonic()
        for h in self.hosts:
            h.last_heard = now
            self._send(h, go)
        self._going = True

    # ---- stream -----------------------------------------------------------------------------------

    def _handle(self, node: int, kind: str, data: Any, on_output: OutputCallback) -> None:
        host = self.hosts[node]
        host.last_heard = time.monotonic()
        if kind == "control":
            message = data.get("kind")
            if message == "hi":
                host.said_hi = True
            elif message == "hello":
                host.hello = data
            elif message == "error":
                host.problem = str(data.get("message"))
            elif message == "started":
                host.argv = tuple(data.get("argv") or ())
            elif message == "rank":
                self._rank_update(data)
            elif message == "compiles" and isinstance(data.get("rank"), int):
                self.state.set_compiles(data["rank"], RankCompiles.from_marker(data))
            elif message == "result":
                host.result = data
                for r in data.get("ranks", []):
                    self._rank_update(r)
        elif kind == "line" and data[0] is not None:
            self.state.add_line(data[0], data[1])
            on_output(data[0], data[1])
        elif kind in ("line", "raw"):
            text = data[1] if kind == "line" else data
            host.own.append(text)
            self.state.add_line(None, f"{host.name}: {text}")
            on_output(None, f"{host.name}: {text}")
        elif kind == "exit":
            host.exit_code = data

    def _rank_update(self, r: dict[str, Any]) -> None:
        rank = r.get("rank")
        if not isinstance(rank, int) or not 0 <= rank < len(self.state.ranks):
            return
        state = RankState(r.get("state", "running"))
        fields = {k: r.get(k) for k in ("exit_code", "signal", "failed_at")}
        self.state.set_rank(rank, state, **fields)

    def _next(self, on_output: OutputCallback, seconds: float) -> None:
        try:
            self._handle(*self._events.get(timeout=seconds), on_output=on_output)
            while True:
                self._handle(*self._events.get_nowait(), on_output=on_output)
        except queue.Empty:
            pass

    def stream(self, on_output: OutputCallback, seconds: float) -> bool:
        self._next(on_output, seconds)
        now = time.monotonic()
        if self.state.failure is None and self.state.stop_reason is None:
            trouble = ssh_failures.first_trouble(self.hosts, self.state, now - SILENT_AFTER_S)
            if trouble is not None:
                self.state.failure, self._failed_at = trouble
                self._ask_stop(f"stopped: {trouble[0]}")
                for h in ssh_failures.silent(self.hosts, now - SILENT_AFTER_S):
                    self._kill_host(h)  # a frozen runner cannot stop anything: do not wait for it
        if self._kill_at is not None and now > self._kill_at:
            self._kill_unconfirmed()
        if any(h.exit_code is None for h in self.hosts):
            return False
        self._next(on_output, 0)
        return self._events.empty()

    # ---- stop -------------------------------------------------------------------------------------

    def _ask_stop(self, reason: str) -> None:
        for h in self.hosts:
            self._send(h, {"kind": "stop", "reason": reason})
        if self._kill_at is None:
            self._kill_at = time.monotonic() + STOP_GRACE_S

    def _kill_unconfirmed(self) -> None:
        """Hosts that have not ended after the grace period: kill the client, then everything of the run
        on that host through a second connection (a frozen host runner cannot stop anything itself)."""
        for h in [h for h in self.hosts if h.proc.poll() is None]:
            self._kill_host(h)

    def _kill_host(self, host: SshHost) -> None:
        end_clients([host.proc], 0)
        if self._going and host.killed_remotely is None:
            host.killed_remotely = self._kill_remotely(host)

    def _kill_remotely(self, host: SshHost) -> str:
        python = host_python(self.remote, host.name)
        command = remote_argv(python, forwarded_env(self.environ), None, "--kill", self._marker(host.node))
        argv = client_argv(self.remote, host.name, host.node, command)
        try:
            done = run_briefly(argv, {k: v for k, v in self.environ.items() if k != RUN_ID_ENV}, KILL_TIMEOUT_S)
        except Exception as e:
            return f"could not reach it to kill its processes: {e}"
        if done.returncode:
            return f"could not kill its processes (exit {done.returncode}): {done.stdout.strip()[-300:]}"
        return f"its runner did not stop; {done.stdout.strip() or '0'} process(es) killed through a second connection"

    def stop(self, reason: str) -> None:
        """Every host stops its processes; one that has not ended after the grace period is killed."""
        with self._lock:
            self.state.stop_reason = self.state.stop_reason or reason
            self._ask_stop(reason)
            for h in self.hosts:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    h.proc.wait(max(0.0, (self._kill_at or 0) - time.monotonic()))
            self._kill_unconfirmed()

    # ---- result -----------------------------------------------------------------------------------

    def result(self) -> LaunchResult:
        return multihost_results.launch_result(self.state, self.job, self.hosts, self._failed_at)
