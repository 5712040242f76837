"""What a multi-host launch reports: which host failed its check and why (with the fix), each host's and
each rank's result, and which rank on which host failed a run. Pure: reads what ``tp.multihost`` gathered."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tpu_lab.errors import LaunchError
from tpu_lab.tp.remote_command import host_python
from tpu_lab.tp.results import HostResult, LaunchResult, RankResult, stopped_error

SSH_FAILED = 255  # OpenSSH's own exit code: it could not connect or authenticate
NOT_FOUND = (126, 127)  # env(1): the interpreter does not exist or cannot run
_SSH_FIX = (
    "Check that `ssh -o BatchMode=yes HOST true` works from this machine without a prompt (keys, known_hosts, "
    "port); pass ssh options with tl.Remote(ssh_options=(...)) or reach the hosts through another tool with "
    "tl.Remote(prefix=(...))."
)
_NOTHING = "Nothing was started on any host."


def _tail(host: Any, n: int = 6) -> str:
    lines = [line for line in host.own if line.strip()][-n:]
    return "\n    ".join(lines) if lines else "(no output)"


def _why(host: Any, remote: Any) -> tuple[str, str, str]:
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


def check_failed(failed: list[Any], remote: Any) -> LaunchError:
    whys = [_why(h, remote) for h in failed]
    what = "\n".join(f"Launch refused: {w}" for w, _, _ in whys) + f"\n{_NOTHING}"
    return LaunchError(what, cause=whys[0][1], fix=whys[0][2])


def unreachable(silent: list[Any], waited: float) -> LaunchError:
    names = ", ".join(f"{h.name} (node {h.node})" for h in silent)
    return LaunchError(
        f"Launch refused: no answer from host(s) {names} after {waited:.0f} s. {_NOTHING}",
        cause="the host is down or unreachable from here (a firewall dropping packets), or the tool in "
        "tl.Remote(prefix=...) waits for input",
        fix=_SSH_FIX,
    )


def not_ready(waiting: list[Any], waited: float) -> LaunchError:
    names = ", ".join(f"{h.name} (node {h.node})" for h in waiting)
    return LaunchError(
        f"Launch refused: host(s) {names} did not finish their checks in {waited:.0f} s. {_NOTHING}",
        cause="a very slow or overloaded host, or torch_tpu's launch environment hanging there",
        fix="Run `tpu-lab probe` on that host to see what it reports.",
    )


def other_python(host: Any, problem: str) -> LaunchError:
    return LaunchError(
        f"Launch refused: {problem} {_NOTHING}",
        cause=f"host {host.name} (node {host.node}) has another environment than this kernel",
        fix="Install the same versions on every host (one image or requirements file), or point "
        "tl.Remote(python=...) at a matching interpreter there.",
    )


def first_failure(hosts: list[Any], nproc: int) -> str | None:
    """``"rank R on host H failed"`` or ``"host H was lost"`` for the first host in trouble, else None."""
    for h in hosts:
        if h.result is not None:
            for r in h.result.get("ranks", []):
                if r.get("exit_code") not in (0, None):
                    return f"rank {r['rank']} on host {h.name} (node {h.node}) failed"
        elif h.exit_code is not None:
            return f"host {h.name} (node {h.node}) was lost (its connection ended with exit code {h.exit_code})"
    return None


def host_state(host: Any, nproc: int) -> str:
    if not host.argv:
        return "not started"
    if host.result is None:
        return "lost"
    codes = [r.get("exit_code") for r in host.result.get("ranks", [])]
    if any(c not in (0, None) for c in codes):
        return "failed"
    return "ok" if codes and all(c == 0 for c in codes) else "stopped"


def host_error(host: Any) -> str | None:
    if host.problem:
        return host.problem
    if host.argv and host.result is None:
        return f"the connection ended without a result (exit code {host.exit_code}):\n{_tail(host, 12)}"
    return None


def collect(
    hosts: list[Any], nproc: int, tails: dict[int, Any], seconds: float, stop_reason: str | None
) -> LaunchResult:
    """The LaunchResult of a finished multi-host launch: per rank and per host."""
    ranks: list[RankResult] = []
    for h in hosts:
        reported = {r["rank"]: r for r in (h.result or {}).get("ranks", [])}
        for g in range(h.node * nproc, (h.node + 1) * nproc):
            r = reported.get(g, {})
            ranks.append(
                RankResult(
                    rank=g,
                    exit_code=r.get("exit_code"),
                    signal=r.get("signal"),
                    value=r.get("value"),
                    output="\n".join(tails.get(g, ())),
                    error=r.get("error"),
                    host=h.name,
                )
            )
    per_host = tuple(
        HostResult(
            host=h.name,
            node_rank=h.node,
            ranks=tuple(range(h.node * nproc, (h.node + 1) * nproc)),
            state=host_state(h, nproc),
            argv=h.argv,
            output="\n".join(h.own),
            error=host_error(h),
        )
        for h in hosts
    )
    run_dir = Path(hosts[0].hello["run_dir"]) if hosts[0].hello else Path(tempfile.gettempdir())
    launcher = "\n".join(f"{h.name}: {line}" for h in hosts for line in h.own)
    return LaunchResult(hosts[0].argv, run_dir, seconds, tuple(ranks), launcher, stop_reason, hosts=per_host)


def _describe(result: LaunchResult) -> str:
    lines = [f"host {h.host} (node {h.node_rank}, ranks {list(h.ranks)}): {h.state}" for h in result.hosts]
    lines += [f"rank {r.rank} on {r.host}: {r.state}" for r in result.ranks]
    failing = next((r for r in result.ranks if r.error), None)
    if failing is not None and failing.error:
        tail = "\n".join(failing.error.strip().splitlines()[-12:])
        lines.append(f"rank {failing.rank} on {failing.host} traceback (tail):\n{tail}")
    lost = next((h for h in result.hosts if h.state == "lost"), None)
    if lost is not None and lost.error:
        lines.append(f"host {lost.host}: {lost.error}")
    if result.hosts and result.hosts[0].argv:
        lines.append("argv on node 0: " + " ".join(result.hosts[0].argv))
    return "\n".join(lines)


def raise_for_failure(result: LaunchResult, failure: str | None) -> None:
    """The LaunchError a failed, lost, timed-out or stopped multi-host run deserves."""
    if failure:
        raise LaunchError(
            f"{failure[0].upper()}{failure[1:]}; every process on every host was stopped.\n{_describe(result)}",
            result=result,
            fix="Fix the error in the traceback above (the same code runs on every rank)."
            if failure.startswith("rank")
            else "Check that host (ssh to it, `tpu-lab probe` there), then run again.",
        )
    error = stopped_error(result, _describe(result), "every process on every host")
    if error is not None:
        raise error
    if not result.ok:
        raise LaunchError(f"The launch did not finish on every host.\n{_describe(result)}", result=result)
