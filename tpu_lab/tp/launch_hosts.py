"""``start_hosts()`` / ``launch_hosts()``: the multi-host entry points behind ``tl.launch(hosts=...)``,
``%%tp_run --hosts`` and ``LaunchPanel(hosts=...)``. They check the arguments and the code (the same
checks as one host), write the job every host gets, and hand over to ``tp.multihost.HostLaunch``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tpu_lab._checks import environment, positive_int, string_args
from tpu_lab.tp.multihost import HostLaunch
from tpu_lab.tp.remote_command import Remote, address, check_remote, resolve_hosts
from tpu_lab.tp.results import LaunchResult


def start_hosts(
    code_or_path: str | os.PathLike,
    *,
    nproc: int,
    hosts: Any,
    remote: Remote | None = None,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    on_start: Any = None,
) -> HostLaunch:
    """Check the arguments and every host, then start torchrun on every host; returns the running launch."""
    from tpu_lab.tp.launch import _worker_source  # the same code checks as one host (syntax, paths)

    positive_int(nproc, "nproc", example=4)
    env = environment(env)
    args = string_args(args)
    environ = os.environ if environ is None else environ
    names, checked = resolve_hosts(hosts, environ), check_remote(remote)
    raw, path = _worker_source(code_or_path)
    # JSON carries text: undecodable bytes (a file in a legacy encoding) travel as surrogates and are
    # written back byte for byte on each host.
    source = raw.decode("utf-8", "surrogateescape")
    job = {
        "run_id": uuid.uuid4().hex,
        "nproc": nproc,
        "addresses": [address(n) for n in names],
        "source": source,
        "path": None if path is None else str(path),
        "cwd": os.getcwd(),
        "rdzv_port": checked.rdzv_port,
        "args": [str(a) for a in args],
        "env": env,
    }
    run = HostLaunch(names, checked, job, environ, on_start or (lambda run: None))
    run.check()
    return run


def launch_hosts(code_or_path: str | os.PathLike, *, timeout: float | None, on_output: Any, **kw: Any) -> LaunchResult:
    """``start_hosts`` then ``wait``, with no moment where an interrupt could leave a host running."""
    runs: list[HostLaunch] = []
    try:
        start_hosts(code_or_path, on_start=runs.append, **kw)
        return runs[0].wait(timeout, on_output)
    except BaseException:
        for run in runs:
            run.stop("interrupted")
        raise
