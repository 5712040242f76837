"""What a Ray launch runs on each host: ``RayHost``, the body of one Ray actor per placement bundle.

It does what the ssh host runner (``tp._remote``) does, with Ray's method calls instead of a pipe: on
creation it makes its run folder; ``check()`` checks and prepares this host (versions, chips against
nproc, the code, torch_tpu's launch environment with this host's ``TPU_WORKER_HOSTNAMES`` and
``JOB_COMPLETION_INDEX``, a free rendezvous port on the first host); ``go()`` starts this host's
torchrun through ``tp.process.RunningLaunch`` (the one spawn/signal/reap module) and returns at once;
``poll()`` hands back the lines seen since the last call (bounded) and, at the end, each rank's result;
``stop()`` stops every process of the run here. torchrun dies with this actor's process (the spawn
module's parent-death signal), so a killed actor or a lost driver leaves no rank behind.

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

from tpu_lab.errors import LaunchError
from tpu_lab.tp._remote import _HostProblem, _prepare, _result_message
from tpu_lab.tp.command import LaunchSpec, build_command
from tpu_lab.tp.process import RunningLaunch

MAX_BUFFERED = 20_000  # lines kept between two polls; older ones are dropped (and counted)
MAX_PER_POLL = 2_000  # lines handed back per poll, so one reply stays small


class RayHost:
    """One host of a Ray launch (the body of a Ray actor). Methods return plain data."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"tpu_lab_ray_{str(job['run_id'])[:8]}_node{job['node']}_"))
        self.run: RunningLaunch | None = None
        self.result: dict[str, Any] | None = None
        self._lines: deque[tuple[int | None, str]] = deque(maxlen=MAX_BUFFERED)
        self._seen = 0
        self._taken = 0
        self._lock = threading.Lock()

    def check(self) -> dict[str, Any]:
        """``{"hello": {...}}`` (this host's facts and preparation) or ``{"error": "why"}``."""
        try:
            return {"hello": {**_prepare(self.job, self.run_dir), "pid": os.getpid()}}
        except _HostProblem as e:
            return {"error": str(e)}

    def go(self, argv: list[str], fields: dict[str, Any], tpu_env: dict[str, str]) -> None:
        """Start this host's torchrun; its output and result are collected by a thread."""
        paths = {"script": Path(fields["script"]), "run_dir": Path(fields["run_dir"]), "args": tuple(fields["args"])}
        spec = LaunchSpec(**{**fields, **paths, "tpu_env": tpu_env})
        _, env = build_command(spec, os.environ)
        with self._lock:
            if self.run is not None or self.result is not None:
                return  # already started, or stopped before it could start
            self.run = RunningLaunch(spec, argv, env)
        threading.Thread(target=self._wait, name="tpu_lab-ray-host", daemon=True).start()

    def _wait(self) -> None:
        assert self.run is not None
        try:
            result = self.run.wait(None, on_output=self._line)
        except LaunchError as e:
            result = e.result
        self.result = _result_message(result)

    def _line(self, rank: int | None, text: str) -> None:
        with self._lock:
            self._lines.append((rank, text))
            self._seen += 1

    def poll(self) -> dict[str, Any]:
        """The lines since the last poll (at most MAX_PER_POLL), how many were dropped, and the result
        once every rank here has ended."""
        with self._lock:
            dropped = self._seen - self._taken - len(self._lines)
            lines = [self._lines.popleft() for _ in range(min(MAX_PER_POLL, len(self._lines)))]
            self._taken += dropped + len(lines)
            done = self.result is not None and not self._lines
        return {"lines": lines, "dropped": dropped, "result": self.result if done else None}

    def stop(self, reason: str = "stopped") -> dict[str, Any] | None:
        """Stop every process of the run on this host and remove its run folder; returns the result."""
        with self._lock:
            run = self.run
            if run is None:
                self.result = {"ranks": [], "stop_reason": reason, "seconds": 0.0}
        if run is not None:
            run.stop(reason)
            for _ in range(100):  # the collecting thread finishes within moments of the stop
                if self.result is not None:
                    break
                threading.Event().wait(0.05)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return self.result
