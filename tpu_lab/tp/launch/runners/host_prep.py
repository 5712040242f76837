"""What each host does before its torchrun starts, whichever runner reached it (an ssh host runner or a
Ray actor): the worker script in place, the working directory, a free rendezvous port on the first host,
torch_tpu's launch environment and the memory check; what it found is the ``hello`` the kernel reads."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from tpu_lab.errors import TpuLabError
from tpu_lab.tp.launch.runners import ssh_wire as wire
from tpu_lab.tp.launch.tpu_env import check_rank_memory, tpu_launch_env


class HostProblem(Exception):
    """This host cannot run the launch as asked (its words go back to the kernel as the host's problem)."""


def _script(job: dict[str, Any], run_dir: Path) -> Path:
    """The worker script here: the kernel's file at the same path when it is the same file, else a copy."""
    source: str = job["source"]
    path = job.get("path")
    if path and Path(path).is_file() and Path(path).read_bytes() == source.encode("utf-8", "surrogateescape"):
        return Path(path)
    target = run_dir / (Path(path).name if path else "worker.py")
    target.write_bytes(source.encode("utf-8", "surrogateescape"))
    return target


def _rdzv_port(master: str, wanted: int | None) -> int:
    """A free port on the master address (the rendezvous store listens there, and only there)."""
    with socket.socket(socket.AF_INET6 if ":" in master else socket.AF_INET) as s:
        try:
            s.bind((master, wanted or 0))
        except OSError as e:
            raise HostProblem(f"cannot listen on {master}:{wanted or 0} on this host ({e.strerror})") from e
        return int(s.getsockname()[1])


def prepare(job: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Check and prepare this host for the job; the facts the kernel checks (versions, chips, port)."""
    facts = wire.python_facts()
    script = _script(job, run_dir)
    if job.get("cwd") and Path(job["cwd"]).is_dir():
        os.chdir(job["cwd"])  # the kernel's working directory where this host has it, else the login's
    port = _rdzv_port(job["addresses"][0], job.get("rdzv_port")) if job["node"] == 0 else None
    try:
        tpu_env = tpu_launch_env(
            job["nproc"], os.environ, hostnames=job["addresses"], node=job["node"], this_process_holds_tpu=False
        )
        check_rank_memory(job["nproc"], bool(tpu_env))
    except TpuLabError as e:
        raise HostProblem(str(e)) from e
    return {
        **facts,
        "executable": sys.executable,
        "hostname": socket.gethostname(),
        "run_dir": str(run_dir),
        "script": str(script),
        "cwd": os.getcwd(),
        "port": port,
        "tpu_env": tpu_env,
    }
