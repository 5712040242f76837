"""``launch()``: run a cell's code under torchrun on N processes (on this machine, on ssh hosts, or on a
Ray cluster), stream each rank's output, collect each rank's result, and leave nothing running.

Everything that can be checked is checked before a process starts (``tp.launch.job``), then one runner
(``tp.launch.runners``) is picked by ``select_runner`` and started. Every runner implements ``tp.launch.runner.Runner``
and fills one ``RunState``, so what reads a launch never knows which runner runs it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from tpu_lab._checks import boolean, optional_callable, positive_seconds
from tpu_lab.errors import InvalidArgument, LaunchInterrupted
from tpu_lab.tp.launch.hosts import Hosts
from tpu_lab.tp.launch.job import Job, make_job, watch_env
from tpu_lab.tp.launch.runner import OutputCallback, Runner
from tpu_lab.tp.launch.runners.ssh_command import Remote
from tpu_lab.tp.results.launch_error import interrupted_error
from tpu_lab.tp.results.launch_result import LaunchResult


def select_runner(
    job: Job,
    *,
    hosts: Hosts | None,
    remote: Remote | None,
    cluster: object | None,
    environ: Mapping[str, str],
) -> Runner:
    """The runner for a launch, not started: ``hosts=`` -> ssh; ``cluster=`` -> a Ray cluster;
    neither -> this machine. The one place that knows every runner."""
    if cluster is not None:
        if hosts is not None or remote is not None:
            raise InvalidArgument("hosts=/remote= and cluster= both name where to run.", fix="Pass one of them.")
        from tpu_lab.tp.launch.runners.ray import RayRunner

        return RayRunner(job, cluster=cluster, environ=environ)
    if hosts is not None:
        from tpu_lab.tp.launch.runners.ssh import SshRunner

        return SshRunner(job, hosts=hosts, remote=remote, environ=environ)
    if remote is not None:
        raise InvalidArgument(
            "remote= only applies to a launch with hosts=.", fix="Pass hosts=[...] too, or drop remote=."
        )
    from tpu_lab.tp.launch.runners.local import LocalRunner

    return LocalRunner(job, environ)


def start(
    code_or_path: str | os.PathLike,
    *,
    nproc: int,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    hosts: Hosts | None = None,
    remote: Remote | None = None,
    cluster: object | None = None,
    environ: Mapping[str, str] | None = None,
    watch: bool = True,
) -> Runner:
    """Check everything, then start the launch and return its runner (``.state`` is live; ``.wait()``,
    ``.stop()``). A start that fails leaves no process and no run folder."""
    environ = os.environ if environ is None else environ
    boolean(watch, "watch")
    job = watch_env(make_job(code_or_path, nproc=nproc, args=args, env=env), watch)
    runner = select_runner(job, hosts=hosts, remote=remote, cluster=cluster, environ=environ)
    try:
        runner.start()
    except BaseException:
        runner.stop("interrupted while starting")
        raise
    return runner


def launch(
    code_or_path: str | os.PathLike,
    *,
    nproc: int,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    on_output: OutputCallback | None = None,
    hosts: Hosts | None = None,
    remote: Remote | None = None,
    cluster: object | None = None,
    watch: bool = True,
) -> LaunchResult:
    """Run ``code_or_path`` (Python source, or a .py file) on ``nproc`` ranks under torchrun.

    ``hosts``: a list of hosts (or ``"TPU_WORKER_HOSTNAMES"``) runs ``nproc`` ranks on each, one torchrun
    per host over ssh, the rendezvous on the first host; ``remote`` (a ``tl.Remote``) says how to reach them.
    ``cluster``: a Ray cluster (``"ray://HEAD:10001"``, ``"HEAD:6379"``, ``"auto"`` or a ``tl.RayCluster``) runs
    ``nproc`` ranks on each host it reserves there, one torchrun per host in a Ray actor.
    ``watch`` (default True): every rank runs inside the compile watcher; ``result.compiles`` holds each
    rank's compile table, merged, with the ranks that diverge named (``tp.results.rank_compiles``).

    Each rank's output is streamed live, labelled by rank (``on_output(rank, line)``; rank None is
    the launcher's own lines). Ranks hand values back with ``tl.report(value)``. Raises LaunchError naming
    the rank that failed first, its exit code or signal and its traceback; on timeout or interrupt every
    process of the run is stopped.
    """
    timeout = positive_seconds(timeout)
    optional_callable(on_output, "on_output")
    boolean(watch, "watch")
    job = watch_env(make_job(code_or_path, nproc=nproc, args=args, env=env), watch)
    runner = select_runner(job, hosts=hosts, remote=remote, cluster=cluster, environ=os.environ)
    try:
        runner.start()
        return runner.wait(timeout, on_output)
    except LaunchInterrupted:
        raise
    except KeyboardInterrupt:  # during the start, or before the wait took over
        runner.stop("interrupted")
        raise interrupted_error(None) from None
    except BaseException:
        if runner.state.finished is None:
            runner.stop("interrupted")
        raise
