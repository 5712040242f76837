"""``launch()``: run a cell's code under torchrun on N processes, stream each rank's output, collect each
rank's result, and leave nothing running. Checks everything that can be checked before a process starts
(arguments, the code's syntax, the TPU's rank counts), then hands over to ``tp.process``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpu_lab._checks import positive_int, positive_seconds
from tpu_lab.errors import InvalidArgument, LaunchError
from tpu_lab.host.chips import TpuChips, holds_tpu, rank_count_problem, scan_tpu_chips
from tpu_lab.host.findings import LAUNCH_ENV
from tpu_lab.tp.command import LaunchSpec, build_command
from tpu_lab.tp.process import OutputCallback, RunningLaunch
from tpu_lab.tp.results import LaunchResult

if TYPE_CHECKING:
    from tpu_lab.tp.multihost import HostLaunch


def start(
    code_or_path: str | os.PathLike,
    *,
    nproc: int,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    hosts: Any = None,
    remote: Any = None,
) -> RunningLaunch | HostLaunch:
    """Check everything that can be checked, then start torchrun and return the running launch.
    With ``hosts``: one torchrun per host over ssh (``tp.multihost``), after every host passed its check."""
    if hosts is not None:
        from tpu_lab.tp.launch_hosts import start_hosts

        return start_hosts(code_or_path, nproc=nproc, hosts=hosts, remote=remote, env=env, args=args, environ=environ)
    if remote is not None:
        raise InvalidArgument(
            "remote= only applies to a launch with hosts=.", fix="Pass hosts=[...] too, or drop remote=."
        )
    positive_int(nproc, "nproc", example=2)
    env = dict(env or {})
    bad = [k for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise InvalidArgument(f"env values must be strings; {bad} are not.", fix="Convert them with str().")
    environ = os.environ if environ is None else environ
    tpu_env = _tpu_launch_env(nproc, environ)
    run_dir = Path(tempfile.mkdtemp(prefix="tpu_lab_run_"))
    script = _worker_script(code_or_path, run_dir)
    spec = LaunchSpec(
        script=script,
        nproc=nproc,
        run_dir=run_dir,
        run_id=uuid.uuid4().hex,
        port=_free_port(),
        args=tuple(map(str, args)),
        env=env,
        tpu_env=tpu_env,
    )
    argv, full_env = build_command(spec, environ)
    return RunningLaunch(spec, argv, full_env)


def launch(
    code_or_path: str | os.PathLike,
    *,
    nproc: int,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    on_output: OutputCallback | None = None,
    hosts: Any = None,
    remote: Any = None,
) -> LaunchResult:
    """Run ``code_or_path`` (Python source, or a .py file) on ``nproc`` ranks under torchrun.

    ``hosts``: a list of hosts (or ``"TPU_WORKER_HOSTNAMES"``) runs ``nproc`` ranks on each, one torchrun
    per host over ssh, the rendezvous on the first host; ``remote`` (a ``tl.Remote``) says how to reach them.

    Each rank's output is streamed live, labelled by rank (``on_output(rank, line)``; rank None is
    torchrun itself). Ranks hand values back with ``tl.report(value)``. Raises LaunchError naming each
    rank's exit code and the failing traceback; on timeout or interrupt every process of the run is stopped.
    """
    timeout = positive_seconds(timeout)
    if hosts is not None:
        from tpu_lab.tp.launch_hosts import launch_hosts

        kw = {"nproc": nproc, "hosts": hosts, "remote": remote, "env": env, "args": args}
        return launch_hosts(code_or_path, timeout=timeout, on_output=on_output, **kw)
    return start(code_or_path, nproc=nproc, env=env, args=args, remote=remote).wait(timeout, on_output)


def _worker_script(code_or_path: str | os.PathLike, run_dir: Path) -> Path:
    """The script each rank runs: a .py file as it is, or the code written to the run directory."""
    looks_like_path = isinstance(code_or_path, os.PathLike) or (
        isinstance(code_or_path, str) and "\n" not in code_or_path and code_or_path.strip().endswith(".py")
    )
    if looks_like_path:
        path = Path(code_or_path).expanduser().resolve()
        if not path.is_file():
            raise InvalidArgument(f"No worker script at {path}.", fix="Pass an existing .py file, or the code itself.")
        source, name = path.read_text(), str(path)
    elif isinstance(code_or_path, str) and code_or_path.strip():
        source, name, path = code_or_path, "<tp_run cell>", run_dir / "worker.py"
    else:
        raise InvalidArgument("Nothing to run: the code is empty.", fix="Pass Python source or a .py file.")
    try:
        compile(source, name, "exec")
    except SyntaxError as e:
        raise InvalidArgument(
            f"The worker code has a syntax error at line {e.lineno}: {e.msg}\n    {(e.text or '').rstrip()}",
            fix="Fix the code; nothing was started.",
        ) from e
    if not looks_like_path:
        path.write_text(source)
    return path


def check_tpu_ranks(nproc: int, chips: TpuChips, kernel_holds_tpu: bool | None) -> None:
    """Refuse, before anything starts, a launch a TPU host cannot run. Pure."""
    problem = rank_count_problem(nproc, chips)
    if problem is not None:
        raise InvalidArgument(f"nproc={nproc}: {problem.message}", fix=problem.fix)
    if kernel_holds_tpu:
        raise LaunchError(
            "This kernel already holds the TPU, so every rank would fail with 'Device or resource busy'.",
            cause="a tensor was put on the 'tpu' device in this kernel (loading a model there counts)",
            fix="Save what you need, restart the kernel, and launch before touching the TPU here.",
        )


def _tpu_launch_env(nproc: int, environ: Mapping[str, str]) -> dict[str, str]:
    """On a TPU host: check the rank count and compute torch_tpu's launch environment in a short-lived
    child. set_tpu_launch_env() caches its values for the life of a process and changes the environment
    even when it fails, so a long-lived kernel must never call it itself."""
    chips = scan_tpu_chips()
    if not chips.count:
        return {}
    check_tpu_ranks(nproc, chips, holds_tpu())
    clean = {k: v for k, v in environ.items() if k not in LAUNCH_ENV}
    code = (
        "import json, os, sys, torch\nbefore = dict(os.environ)\n"
        "torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=int(sys.argv[1]))\n"
        "print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(nproc)], env=clean, capture_output=True, text=True, timeout=120
    )
    if proc.returncode:
        raise LaunchError(
            "torch_tpu could not compute the launch environment:\n" + proc.stderr.strip()[-2000:],
            fix="Check the TPU with `tpu-lab probe`; the error above comes from set_tpu_launch_env().",
        )
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
