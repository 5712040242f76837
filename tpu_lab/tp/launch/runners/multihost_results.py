"""What a multi-host runner (ssh or Ray) reports: a host that did not finish its check or runs another
Python, the earliest failure that was not a rank's, each host's result, and the whole ``LaunchResult``.
Pure: reads what the runner gathered about its hosts (``HostView``: the fields both kinds of host have).
What only the ssh runner can tell (its client's exit codes, a silent host) is in ``ssh_failures``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tpu_lab.errors import LaunchError
from tpu_lab.tp.launch.job import Job, watched
from tpu_lab.tp.results.launch_result import HostResult, LaunchResult, rank_results
from tpu_lab.tp.results.rank_compiles import RunCompiles
from tpu_lab.tp.results.run_state import RunState

if TYPE_CHECKING:
    from collections import deque


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


NOTHING = "Nothing was started on any host."


def tail(host: HostView, n: int = 6) -> str:
    """The host's own last ``n`` lines (not a rank's), indented for an error message."""
    lines = [line for line in host.own if line.strip()][-n:]
    return "\n    ".join(lines) if lines else "(no output)"


def not_ready(waiting: Sequence[HostView], waited: float) -> LaunchError:
    names = ", ".join(f"{h.name} (node {h.node})" for h in waiting)
    return LaunchError(
        f"Launch refused: host(s) {names} did not finish their checks in {waited:.0f} s. {NOTHING}",
        cause="a very slow or overloaded host, or torch_tpu's launch environment hanging there",
        fix="Run `tpu-lab probe` on that host to see what it reports.",
    )


def other_python(host: HostView, problem: str) -> LaunchError:
    return LaunchError(
        f"Launch refused: {problem} {NOTHING}",
        cause=f"host {host.name} (node {host.node}) has another environment than this kernel",
        fix="Install the same versions on every host (one image or requirements file), or point "
        "tl.Remote(python=...) at a matching interpreter there.",
    )


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
        return f"the connection ended without a result (exit code {host.exit_code}):\n{tail(host, 12)}{killed}"
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
