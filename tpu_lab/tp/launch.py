"""``launch()``: run a cell's code under torchrun on N processes, stream each rank's output, collect each
rank's result, and leave nothing running. Checks everything that can be checked before a process starts
(arguments, the code's syntax, the TPU's rank counts), then hands over to ``tp.process``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpu_lab._checks import environment, optional_callable, positive_int, positive_seconds, string_args
from tpu_lab.errors import InvalidArgument, LaunchError
from tpu_lab.host.chips import TpuChips, holds_tpu, rank_count_problem, scan_tpu_chips
from tpu_lab.host.findings import LAUNCH_ENV
from tpu_lab.tp.command import LaunchSpec, build_command
from tpu_lab.tp.process import OutputCallback, RunningLaunch
from tpu_lab.tp.results import LaunchResult
from tpu_lab.tp.rundirs import new_run_dir, remove_run_dir

# A one-line string that is only a file name (no spaces, quotes, brackets or operators) is a path;
# anything else ending in ".py" is code (e.g. `run("train.py")` ends in ")", `x = a.py` has " = ").
_FILE_NAME = re.compile(r"[\w.~/\\-]+\.py")
# Ranks beyond this on one host are almost surely a typo (each rank is a Python process importing torch).
MAX_RANKS = 256

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
    track: list[RunningLaunch] | None = None,
) -> RunningLaunch | HostLaunch:
    """Check everything that can be checked, then start torchrun and return the running launch.
    A start that fails leaves no process and no run directory. With ``hosts``: one torchrun per host
    over ssh (``tp.multihost``), after every host passed its check."""
    if hosts is not None:
        from tpu_lab.tp.launch_hosts import start_hosts

        return start_hosts(code_or_path, nproc=nproc, hosts=hosts, remote=remote, env=env, args=args, environ=environ)
    if remote is not None:
        raise InvalidArgument(
            "remote= only applies to a launch with hosts=.", fix="Pass hosts=[...] too, or drop remote=."
        )
    positive_int(nproc, "nproc", example=2)
    if nproc > MAX_RANKS:
        raise InvalidArgument(
            f"nproc={nproc} processes on one host is more than tpu_lab starts (at most {MAX_RANKS}).",
            cause="each rank is a Python process that imports torch (hundreds of MB each)",
            fix="Use one rank per chip (TPU) or a few on CPU, e.g. nproc=2.",
        )
    env = environment(env)
    args = string_args(args)
    source, path = _worker_source(code_or_path)
    environ = os.environ if environ is None else environ
    tpu_env = _tpu_launch_env(nproc, environ)
    run_id = uuid.uuid4().hex
    run_dir = new_run_dir(run_id)
    track = [] if track is None else track
    try:
        if path is None:
            path = run_dir / "worker.py"
            path.write_bytes(source)
        spec = LaunchSpec(script=path, nproc=nproc, run_dir=run_dir, run_id=run_id, args=args, env=env, tpu_env=tpu_env)
        argv, full_env = build_command(spec, environ)
        return RunningLaunch(spec, argv, full_env, track=track)
    except BaseException as e:
        started = [run for run in track if run.spec.run_id == run_id]
        for run in started:  # torchrun started, but the caller may never get it: stop it now
            run.stop("interrupted")
        if not started:
            remove_run_dir(run_dir)  # nothing started: leave nothing
        if isinstance(e, OSError):
            raise LaunchError(
                f"Could not start the launch: {e}.", fix="Check the temp directory and this Python."
            ) from e
        raise


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
    cluster: Any = None,
) -> LaunchResult:
    """Run ``code_or_path`` (Python source, or a .py file) on ``nproc`` ranks under torchrun.

    ``hosts``: a list of hosts (or ``"TPU_WORKER_HOSTNAMES"``) runs ``nproc`` ranks on each, one torchrun
    per host over ssh, the rendezvous on the first host; ``remote`` (a ``tl.Remote``) says how to reach them.
    ``cluster`` (a Ray address or a ``tl.RayCluster``) runs ``nproc`` ranks on each host of a Ray cluster.

    Each rank's output is streamed live, labelled by rank (``on_output(rank, line)``; rank None is
    torchrun itself). Ranks hand values back with ``tl.report(value)``. Raises LaunchError naming each
    rank's exit code and the failing traceback; on timeout or interrupt every process of the run is stopped.
    """
    timeout = positive_seconds(timeout)
    optional_callable(on_output, "on_output")
    if cluster is not None:
        from tpu_lab.tp.runners.ray import launch_ray

        if hosts is not None or remote is not None:
            raise InvalidArgument(
                "cluster= and hosts=/remote= are two ways to reach hosts; pass one.",
                fix="Use cluster= for a Ray cluster, or hosts= (and remote=) for ssh.",
            )

        return launch_ray(
            code_or_path, nproc=nproc, cluster=cluster, timeout=timeout, on_output=on_output, env=env, args=args
        )
    if hosts is not None:
        from tpu_lab.tp.launch_hosts import launch_hosts

        kw = {"nproc": nproc, "hosts": hosts, "remote": remote, "env": env, "args": args}
        return launch_hosts(code_or_path, timeout=timeout, on_output=on_output, **kw)
    started: list[RunningLaunch] = []
    try:
        run = start(code_or_path, nproc=nproc, env=env, args=args, remote=remote, track=started)
        assert isinstance(run, RunningLaunch)
        return run.wait(timeout, on_output)
    except BaseException:
        # An interrupt between torchrun's start and the wait: wait() never ran its own clean-up.
        for run in started:
            if run.finished is None:
                run.stop("interrupted")
        raise


def _worker_source(code_or_path: str | os.PathLike) -> tuple[bytes, Path | None]:
    """(source bytes, path): a .py file as it is (path), or the code itself (path None), checked to
    compile. Bytes, so a file's coding declaration is honoured as Python honours it."""
    if isinstance(code_or_path, str):
        text = code_or_path.strip()
        is_path = "\n" not in text and text.endswith(".py") and (_FILE_NAME.fullmatch(text) or Path(text).is_file())
    elif isinstance(code_or_path, os.PathLike):
        is_path = True
    else:
        raise InvalidArgument(
            f"code_or_path must be Python source (str) or a .py path, got {type(code_or_path).__name__}.",
            fix='Pass the code as a string, e.g. "print(1)", or a pathlib.Path to a .py file.',
        )
    if is_path:
        path = Path(os.fspath(code_or_path)).expanduser().resolve()
        if not path.is_file():
            raise InvalidArgument(f"No worker script at {path}.", fix="Pass an existing .py file, or the code itself.")
        try:
            source, name = path.read_bytes(), str(path)
        except OSError as e:
            raise InvalidArgument(f"Cannot read {path}: {e.strerror or e}.", fix="Check its permissions.") from e
    else:
        assert isinstance(code_or_path, str)
        if not code_or_path.strip():
            raise InvalidArgument("Nothing to run: the code is empty.", fix="Pass Python source or a .py file.")
        try:
            source, name = code_or_path.encode("utf-8"), "<tp_run cell>"
        except UnicodeEncodeError as e:
            raise InvalidArgument(
                f"The code holds a character UTF-8 cannot encode ({e.reason} at {e.start}).",
                cause="a lone surrogate, e.g. from decoding bytes with errors='surrogateescape'",
                fix="Remove or replace that character.",
            ) from e
    try:
        compile(source, name, "exec")
    except (SyntaxError, ValueError) as e:
        where = (
            f" at line {e.lineno}: {e.msg}\n    {(e.text or '').rstrip()}" if isinstance(e, SyntaxError) else f": {e}"
        )
        hint = (
            " (if you meant a file, it does not exist)"
            if not is_path and str(code_or_path).strip().endswith(".py")
            else ""
        )
        raise InvalidArgument(
            f"The worker code has a syntax error{where}{hint}", fix="Fix the code; nothing was started."
        ) from e
    return source, path if is_path else None


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
