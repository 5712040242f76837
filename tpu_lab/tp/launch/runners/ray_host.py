"""What a Ray launch runs on each host: ``RayHost``, the body of one Ray actor per placement bundle.

It does what the ssh host runner (``runners.ssh_host``) does, with Ray method calls instead of a pipe:
``check()`` checks and prepares this host with the same code as an ssh host (versions, chips against
nproc, the code, torch_tpu's launch environment for this host's place in ``TPU_WORKER_HOSTNAMES`` /
``JOB_COMPLETION_INDEX``, a free rendezvous port on the first host); ``go()`` builds this node's
torchrun command (``tp.launch.torchrun_command.build_command``) and runs it (``runners.local.Torchrun``, so every
process is spawned, signalled and reaped by ``tp.launch.process``), returning at once; ``poll()`` hands back
the lines seen since the last call (bounded), each rank's state, and at the end each rank's result;
``stop()`` stops every process of the run here and removes the run folder. torchrun dies with this
actor's process (``tp.launch.process`` sets a parent-death signal), so a killed actor or a dead driver leaves
no rank behind.

Plain Python: the kernel wraps the class with ``ray.remote``; this module never imports ray.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any

from tpu_lab.tp.launch.run_dirs import claim_dir, prune_orphan_dirs
from tpu_lab.tp.launch.runners.host_prep import HostProblem, prepare
from tpu_lab.tp.launch.runners.local import Torchrun
from tpu_lab.tp.launch.torchrun_command import KEEPER_ENV, LaunchSpec, build_command
from tpu_lab.tp.results.run_state import RunState

PREFIX = "tpu_lab_ray_"
MAX_BUFFERED = 20_000  # lines kept between two polls; older ones are dropped (and counted)
MAX_PER_POLL = 2_000  # lines handed back per poll, so one reply stays small


class RayHost:
    """One host of a Ray launch (the body of a Ray actor). Every method returns plain data."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.marker = f"{job['run_id']}-node{job['node']}-"  # this host's processes carry it
        root = tempfile.gettempdir()
        prune_orphan_dirs(root, PREFIX)  # folders of actors that were killed (SIGKILL, a lost node)
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{self.marker}.", dir=root))
        claim_dir(self.run_dir)
        self.hello: dict[str, Any] | None = None
        self.torchrun: Torchrun | None = None
        self.state: RunState | None = None
        self.result: dict[str, Any] | None = None
        self._lines: deque[tuple[int | None, str]] = deque(maxlen=MAX_BUFFERED)
        self._seen = self._taken = 0
        self._lock = threading.Lock()

    def check(self) -> dict[str, Any]:
        """``{"hello": {...}}`` (this host's facts and preparation) or ``{"error": "why"}``."""
        try:
            self.hello = prepare(self.job, self.run_dir)
        except (HostProblem, OSError) as e:
            return {"error": str(e)}
        return {"hello": {**self.hello, "pid": os.getpid()}}

    def go(self, master: str, port: int) -> list[str]:
        """Start this host's torchrun (rendezvous on ``master:port``); returns its argv."""
        assert self.hello is not None
        job, nnodes = self.job, len(self.job["addresses"])
        spec = LaunchSpec(
            script=Path(self.hello["script"]),
            nproc=job["nproc"],
            run_dir=self.run_dir,
            run_id=self.marker,
            port=port,
            args=tuple(job["args"]),
            env={**job["forwarded"], **job["env"]},
            tpu_env=self.hello["tpu_env"],
            nnodes=nnodes,
            node_rank=job["node"],
            master=master,
            rdzv_id=job["run_id"],
        )
        argv, env = build_command(spec, os.environ)
        env[KEEPER_ENV] = "1"  # Ray SIGKILLs a dead actor's children: torchrun runs one level down
        with self._lock:
            if self.result is not None:
                return argv  # stopped before it could start
            self.state = RunState(nnodes * job["nproc"])
            self.torchrun = Torchrun(spec, argv, env, self.state)
            self.torchrun.start()
        threading.Thread(target=self._follow, name="tpu_lab-ray-host", daemon=True).start()
        return argv

    def _follow(self) -> None:
        run = self.torchrun
        assert run is not None
        while not run.poll(self._line, 0.1):
            pass
        run.end()
        self.result = self._result()

    def _line(self, rank: int | None, text: str) -> None:
        with self._lock:
            self._lines.append((rank, text))
            self._seen += 1

    def _ranks(self) -> list[dict[str, Any]]:
        if self.state is None:
            return []
        first = self.job["node"] * self.job["nproc"]
        mine = [self.state.ranks[r] for r in range(first, first + self.job["nproc"])]
        return [
            {
                "rank": s.rank,
                "state": s.state.value,
                "exit_code": s.exit_code,
                "signal": s.signal,
                "failed_at": s.failed_at,
                "compiles": s.compiles.to_marker()
                if s.compiles is not None
                else None,  # live (tp.results.live_compiles)
            }
            for s in mine
        ]

    def _result(self) -> dict[str, Any]:
        run = self.torchrun
        if run is None or self.state is None:
            return {"ranks": [], "failure": None, "stopped": True}
        self.state.end()
        values, errors = run.values(), run.errors()
        files = run.compile_files.files if run.compile_files is not None else {}  # each rank's final table
        ranks = [
            {**r, "value": values[r["rank"]], "error": errors[r["rank"]], "compiles": files.get(r["rank"])}
            for r in self._ranks()
        ]
        return {"ranks": ranks, "failure": run.failure, "stopped": run.stopping}

    def poll(self) -> dict[str, Any]:
        """The lines since the last poll (at most MAX_PER_POLL), how many were dropped, each rank's state,
        and the result once every rank here has ended and every line is out."""
        with self._lock:
            dropped = self._seen - self._taken - len(self._lines)
            lines = [self._lines.popleft() for _ in range(min(MAX_PER_POLL, len(self._lines)))]
            self._taken += dropped + len(lines)
            done = self.result is not None and not self._lines
        return {"lines": lines, "dropped": dropped, "ranks": self._ranks(), "result": self.result if done else None}

    def stop(self) -> dict[str, Any]:
        """Stop every process of the run on this host, remove its run folder; returns the result."""
        with self._lock:
            run = self.torchrun
            if run is None:
                self.result = {"ranks": [], "failure": None, "stopped": True}
        if run is not None:
            run.stop()
            for _ in range(200):  # the following thread settles within moments of the stop
                if self.result is not None:
                    break
                threading.Event().wait(0.05)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return self.result or {"ranks": self._ranks(), "failure": None, "stopped": True}
