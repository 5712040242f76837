"""What a multi-host launch runs on each host: ``python -m tpu_lab.tp._remote``, started over ssh.

It says ``hi`` as soon as it runs (the host is reachable and its Python imports tpu_lab), reads the
job, checks this host (versions, chips against nproc) and prepares it (its own run folder, the code,
torch_tpu's launch environment computed here in a short-lived child, a free rendezvous port on the
first host), says ``hello`` and waits for ``go``. Then it runs this host's torchrun through
``tp.process.RunningLaunch``, passes each line on labelled with its global rank, and reports each
rank's result. ``stop``, or the end of stdin (the kernel's ssh client or the kernel itself is gone),
stops every process of the run on this host. The run folder is removed at the end, whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from tpu_lab.errors import LaunchError
from tpu_lab.host.chips import rank_count_problem, scan_tpu_chips
from tpu_lab.host.findings import LAUNCH_ENV
from tpu_lab.tp import wire
from tpu_lab.tp.command import LaunchSpec, build_command
from tpu_lab.tp.process import RunningLaunch, run_briefly
from tpu_lab.tp.results import LaunchResult

TPU_ENV_TIMEOUT_S = 120


class _HostProblem(Exception):
    pass


class _Out:
    """stdout (ssh's channel to the kernel), one whole line at a time from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.broken = False

    def write(self, line: str) -> None:
        with self._lock:
            if self.broken:
                return
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True  # the kernel is gone; stdin's end will stop the run


def _read_message() -> dict[str, Any] | None:
    line = sys.stdin.readline()
    if not line:
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _script(job: dict[str, Any], run_dir: Path) -> Path:
    """The worker script here: the kernel's file at the same path when it is the same file, else a copy."""
    source: str = job["source"]
    path = job.get("path")
    if path and Path(path).is_file() and Path(path).read_bytes() == source.encode("utf-8", "surrogateescape"):
        return Path(path)
    target = run_dir / (Path(path).name if path else "worker.py")
    target.write_bytes(source.encode("utf-8", "surrogateescape"))
    return target


def _rdzv_port(wanted: int | None) -> int:
    """A port free on every interface of this host (the rendezvous store listens on all of them)."""
    with socket.socket() as s:
        try:
            s.bind(("", wanted or 0))
        except OSError as e:
            raise _HostProblem(f"the rendezvous port {wanted} is in use on this host ({e.strerror})") from e
        return int(s.getsockname()[1])


def _tpu_env(job: dict[str, Any]) -> dict[str, str]:
    """On a TPU host: the rank count check, then torch_tpu's launch environment for this node, computed in
    a short-lived child (set_tpu_launch_env() caches per process and changes the environment even when it
    fails). Without chips there is none."""
    chips = scan_tpu_chips()
    if not chips.count:
        return {}
    problem = rank_count_problem(job["nproc"], chips)
    if problem is not None:
        raise _HostProblem(f"nproc={job['nproc']}: {problem.message} Fix: {problem.fix}")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    env.update({"TPU_WORKER_HOSTNAMES": ",".join(job["addresses"]), "JOB_COMPLETION_INDEX": str(job["node"])})
    code = (
        "import json, os, sys, torch\nbefore = dict(os.environ)\n"
        "torch.tpu.distributed.set_tpu_launch_env(nnodes=int(sys.argv[1]), nproc_per_node=int(sys.argv[2]))\n"
        "print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
    )
    argv = [sys.executable, "-c", code, str(len(job["addresses"])), str(job["nproc"])]
    proc = run_briefly(argv, env, TPU_ENV_TIMEOUT_S)
    if proc.returncode:
        raise _HostProblem("torch_tpu could not compute the launch environment: " + proc.stderr.strip()[-1500:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _prepare(job: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    facts = wire.python_facts()
    script = _script(job, run_dir)
    if job.get("cwd") and Path(job["cwd"]).is_dir():
        os.chdir(job["cwd"])  # the kernel's working directory where this host has it, else the login's
    port = _rdzv_port(job.get("rdzv_port")) if job["node"] == 0 else None
    return {
        **facts,
        "executable": sys.executable,
        "hostname": socket.gethostname(),
        "run_dir": str(run_dir),
        "script": str(script),
        "cwd": os.getcwd(),
        "port": port,
        "tpu_env": _tpu_env(job),
    }


def _watch_stdin(run: RunningLaunch) -> None:
    while True:
        message = _read_message()
        if message is None:
            run.stop("the connection to the kernel was lost")
            return
        if message.get("kind") == "stop":
            run.stop(str(message.get("reason") or "stopped"))
            return


def _run(go: dict[str, Any], hello: dict[str, Any], out: _Out) -> LaunchResult:
    fields = go["spec"]
    paths = {"script": Path(fields["script"]), "run_dir": Path(fields["run_dir"]), "args": tuple(fields["args"])}
    spec = LaunchSpec(**{**fields, **paths, "tpu_env": hello["tpu_env"]})  # computed on this host
    _, env = build_command(spec, os.environ)
    run = RunningLaunch(spec, list(go["argv"]), env)
    threading.Thread(target=_watch_stdin, args=(run,), name="tpu_lab-remote-stdin", daemon=True).start()
    try:
        return run.wait(None, on_output=lambda rank, text: out.write(wire.output_line(rank, text)))
    except LaunchError as e:
        return e.result


def _result_message(result: LaunchResult) -> dict[str, Any]:
    ranks = [
        {"rank": r.rank, "exit_code": r.exit_code, "signal": r.signal, "value": r.value, "error": r.error}
        for r in result.ranks
    ]
    return {"ranks": ranks, "stop_reason": result.stop_reason, "seconds": result.seconds}


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through run.wait(), which stops the run, and the cleanup


def main() -> None:
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    out = _Out()
    out.write(wire.control("hi"))
    job = _read_message()
    if job is None or job.get("kind") != "job":
        return  # the kernel gave up before sending the job: nothing was started here
    # Its own prefix: the single-host launcher's retention of tpu_lab_run_* folders never touches a live host's.
    run_dir = Path(tempfile.mkdtemp(prefix=f"tpu_lab_host_{str(job['run_id'])[:8]}_node{job['node']}_"))
    try:
        try:
            hello = _prepare(job, run_dir)
        except _HostProblem as e:
            out.write(wire.control("error", message=str(e)))
            return
        out.write(wire.control("hello", **hello))
        go = _read_message()
        if go is None or go.get("kind") != "go":
            return  # another host failed its check, or the launch was stopped: nothing starts here
        result = _run(go, hello, out)
        out.write(wire.control("result", **_result_message(result)))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
