"""What a multi-host runner (ssh or Ray) reports: which host failed its check and why (with the fix), what
went wrong first during a run, each host's result, and the whole ``LaunchResult``. Pure: reads what the
runner gathered about its hosts (``HostView``: the fields both kinds of host have)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tpu_lab.errors import LaunchError
from tpu_lab.tp.rank_compiles import RunCompiles
from tpu_lab.tp.rank_files import watched
from tpu_lab.tp.remote_command import Remote, host_python
from tpu_lab.tp.results import HostResult, LaunchResult, rank_results
from tpu_lab.tp.run_state import RunState

if TYPE_CHECKING:
    from collections import deque

    from tpu_lab.tp.job import Job
    from tpu_lab.tp.runners.ssh import _Host


class HostView(Protocol):
    """One host as a multi-host runner sees it from the kernel."""

    name: str
    node: int
    hello: dict[str, Any] | None
    problem: str | None
    result: dict[str, Any] | None
    exit_code: int | None
    argv: tuple[str, ...]
    killed_remotely: str | None
    own: deque[str]


SSH_FAILED = 255  # OpenSSH's own exit code: it could not connect or authenticate
NOT_FOUND = (126, 127)  # env(1): the interpreter does not exist or cannot run
_SSH_FIX = (
    "Check that `ssh -o BatchMode=yes HOST true` works from this machine without a prompt (keys, known_hosts, "
    "port); pass ssh options with tl.Remote(ssh_options=(...)) or reach the hosts through another tool with "
    "tl.Remote(prefix=(...))."
)
_NOTHING = "Nothing was started on any host."


def _tail(host: HostView, n: int = 6) -> str:
    lines = [line for line in host.own if line.strip()][-n:]
    return "\n    ".join(lines) if lines else "(no output)"


def _why(host: _Host, remote: Remote) -> tuple[str, str, str]:
    """(what, cause, fix) for one host that failed before its check passed."""
    python = host_python(remote, host.name)
    label = f"host {host.name} (node {host.node})"
    if host.problem:
        return f"{label}: {host.problem}", "this host cannot run the launch as asked", "Fix it as said above."
    text = "\n".join(host.own)
    if host.exit_code == SSH_FAILED:
        return (
            f"cannot reach {label}:\n    {_tail(host)}",
            "the host is down, the name or port is wrong, or ssh needs a key or a prompt",
            _SSH_FIX,
        )
    if host.exit_code in NOT_FOUND:
        return (
            f"{label} has no Python at {python}:\n    {_tail(host)}",
            "the hosts do not have this kernel's interpreter at the same path",
            "Install the same environment at the same path on every host, or set tl.Remote(python=...) (a path, or {host: path}).",
        )
    if "No module named 'tpu_lab'" in text:
        return (
            f"Python {python} on {label} cannot import tpu_lab:\n    {_tail(host)}",
            "tpu_lab is not installed in that interpreter on that host",
            "Install the same tpu_lab there (pip install the same checkout), or set tl.Remote(python=...) to an interpreter that has it.",
        )
    if "No module named 'tpu_lab." in text:
        return (
            f"Python {python} on {label} has a different tpu_lab (without the multi-host runner):\n    {_tail(host)}",
            "an older tpu_lab is installed on that host",
            "Install this kernel's tpu_lab version on every host.",
        )
    return (
        f"the host runner on {label} ended with exit code {host.exit_code} before its check:\n    {_tail(host)}",
        "see its output above",
        "Run the same Python there by hand (ssh HOST PYTHON -m tpu_lab.tp._remote) to see what fails.",
    )


def check_failed(failed: list[_Host], remote: Remote) -> LaunchError:
    whys = [_why(h, remote) for h in failed]
    what = "\n".join(f"Launch refused: {w}" for w, _, _ in whys) + f"\n{_NOTHING}"
    return LaunchError(what, cause=whys[0][1], fix=whys[0][2])


def unreachable(silent: list[_Host], waited: float) -> LaunchError:
    names = ", ".join(f"{h.name} (node {h.node})" for h in silent)
    return LaunchError(
        f"Launch refused: no answer from host(s) {names} after {waited:.0f} s. {_NOTHING}",
        cause="the host is down or unreachable from here (a firewall dropping packets), or the tool in "
        "tl.Remote(prefix=...) waits for input",
        fix=_SSH_FIX,
    )


def not_ready(waiting: Sequence[HostView], waited: float) -> LaunchError:
    names = ", ".join(f"{h.name} (node {h.node})" for h in waiting)
    return LaunchError(
        f"Launch refused: host(s) {names} did not finish their checks in {waited:.0f} s. {_NOTHING}",
        cause="a very slow or overloaded host, or torch_tpu's launch environment hanging there",
        fix="Run `tpu-lab probe` on that host to see what it reports.",
    )


def other_python(host: HostView, problem: str) -> LaunchError:
    return LaunchError(
        f"Launch refused: {problem} {_NOTHING}",
        cause=f"host {host.name} (node {host.node}) has another environment than this kernel",
        fix="Install the same versions on every host (one image or requirements file), or point "
        "tl.Remote(python=...) at a matching interpreter there.",
    )


def first_trouble(hosts: list[_Host], state: RunState, silent_before: float) -> tuple[str, float] | None:
    """What went wrong first and when (wall clock), or None: a rank that failed (the earliest by its
    failure time), a torchrun that died, a host lost (its connection ended without a result) or silent
    since ``silent_before`` (monotonic; frozen, or its machine gone)."""
    failed = state.first_failed()
    if failed is not None:
        node = next((h.node for h in hosts if h.name == failed.host), 0)
        return f"rank {failed.rank} on host {failed.host} (node {node}) {failed.label}", failed.failed_at or time.time()
    for h in hosts:
        if h.result is not None and h.result.get("failure") and not h.result.get("stopped"):
            return f"on host {h.name} (node {h.node}), {h.result['failure']}", h.result.get("failed_at") or time.time()
        if h.result is None and h.exit_code is not None:
            lost = f"host {h.name} (node {h.node}) was lost (its connection ended with exit code {h.exit_code})"
            return lost, time.time()
    for h in silent(hosts, silent_before):
        return (
            f"host {h.name} (node {h.node}) stopped answering (its runner is frozen, or the host is gone)",
            time.time(),
        )
    return None


def silent(hosts: list[_Host], before: float) -> list[_Host]:
    """Hosts whose runner runs torchrun but has said nothing (not even its heartbeat) since ``before``."""
    return [h for h in hosts if h.result is None and h.exit_code is None and h.argv and h.last_heard < before]


def earliest_failure(
    hosts: Sequence[HostView], noticed: str | None, noticed_at: float | None
) -> tuple[str | None, float | None]:
    """The failure that is not a rank's (a torchrun killed on a host, a host lost or silent), the
    earliest one, with its time; (None, None) when there was none."""
    found = [
        (float(h.result["failed_at"] or 0), f"on host {h.name} (node {h.node}), {h.result['failure']}")
        for h in hosts
        if h.result is not None and h.result.get("failure") and not h.result.get("stopped")
    ]
    if noticed is not None and not noticed.startswith("rank "):
        found.append((noticed_at or float("inf"), noticed))
    if not found:
        return None, None
    at, text = min(found)
    return text, at


def host_state(host: HostView) -> str:
    if not host.argv and host.result is None:
        return "not started"
    if host.result is None:
        return "lost"
    states = [r.get("state") for r in host.result.get("ranks", [])]
    if "failed" in states or (host.result.get("failure") and not host.result.get("stopped")):
        return "failed"
    return "ok" if states and all(s == "ok" for s in states) else "stopped"


def host_error(host: HostView) -> str | None:
    if host.problem:
        return host.problem
    if host.result is not None and host.result.get("failure"):
        return str(host.result["failure"])
    if host.argv and host.result is None:
        killed = f"\n{host.killed_remotely}" if host.killed_remotely else ""
        return f"the connection ended without a result (exit code {host.exit_code}):\n{_tail(host, 12)}{killed}"
    return None


def host_results(hosts: Sequence[HostView], nproc: int) -> tuple[HostResult, ...]:
    """Per host, in node order."""
    return tuple(
        HostResult(
            host=h.name,
            node_rank=h.node,
            ranks=tuple(range(h.node * nproc, (h.node + 1) * nproc)),
            state=host_state(h),
            argv=h.argv,
            output="\n".join(h.own),
            error=host_error(h),
        )
        for h in hosts
    )


def launch_result(state: RunState, job: Job, hosts: Sequence[HostView], failed_at: float | None = None) -> LaunchResult:
    """The whole result of a multi-host run: each rank's value or error from its host's result, each
    host's, the earliest failure that was not a rank's (a torchrun killed, a host lost or silent), and
    the compiles every rank's watcher shipped back."""
    state.end()
    reported = [r for h in hosts for r in (h.result or {}).get("ranks", [])]
    ranks = rank_results(
        state, {r["rank"]: r.get("value") for r in reported}, {r["rank"]: r.get("error") for r in reported}
    )
    failure, failed_at = earliest_failure(hosts, state.failure, failed_at)
    files = {r["rank"]: r.get("compiles") for r in reported}
    return LaunchResult(
        hosts[0].argv if hosts else (),
        Path(hosts[0].hello["run_dir"]) if hosts and hosts[0].hello else Path("/"),
        state.elapsed,
        ranks,
        "\n".join(state.lines(None)),
        state.stop_reason,
        hosts=host_results(hosts, job.nproc),
        failure=failure,
        failed_at=failed_at,
        compiles=RunCompiles.from_files(files, len(state.ranks)) if watched(job.env) else None,
    )
