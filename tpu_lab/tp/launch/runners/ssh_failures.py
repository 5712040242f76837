"""The hosts of an ssh launch and how they fail, in words: ``SshHost`` (one host as the kernel sees it: its
ssh client and what its host runner said), a host that failed its check (unreachable: ssh's own exit
code; no Python at that path; no tpu_lab there) or never answered, and the first trouble during a run (a
rank that failed, a torchrun that died, a host lost or gone silent). Pure over what ``ssh`` gathered; the
wording both multi-host runners share is in ``multihost_results``."""

from __future__ import annotations

import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tpu_lab.errors import LaunchError
from tpu_lab.tp.launch.runners.multihost_results import NOTHING, tail
from tpu_lab.tp.launch.runners.ssh_command import Remote, host_python
from tpu_lab.tp.results.run_state import TAIL_LINES, RunState

SSH_FAILED = 255  # OpenSSH's own exit code: it could not connect or authenticate
NOT_FOUND = (126, 127)  # env(1): the interpreter does not exist or cannot run
_SSH_FIX = (
    "Check that `ssh -o BatchMode=yes HOST true` works from this machine without a prompt (keys, known_hosts, "
    "port); pass ssh options with tl.Remote(ssh_options=(...)) or reach the hosts through another tool with "
    "tl.Remote(prefix=(...))."
)


@dataclass
class SshHost:
    """One host of an ssh launch as the kernel sees it: its client process and what it said (a
    ``multihost_results.HostView``, plus when it was last heard)."""

    name: str
    node: int
    proc: subprocess.Popen[str]
    said_hi: bool = False
    hello: dict[str, Any] | None = None
    problem: str | None = None
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    argv: tuple[str, ...] = ()
    last_heard: float = 0.0
    killed_remotely: str | None = None
    """What the second connection's kill reported (when the host runner did not stop by itself)."""
    own: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    """Lines not from a rank: the client's own, the runner's, torchrun's."""


def _why(host: SshHost, remote: Remote) -> tuple[str, str, str]:
    """(what, cause, fix) for one host that failed before its check passed."""
    python = host_python(remote, host.name)
    label = f"host {host.name} (node {host.node})"
    if host.problem:
        return f"{label}: {host.problem}", "this host cannot run the launch as asked", "Fix it as said above."
    text = "\n".join(host.own)
    if host.exit_code == SSH_FAILED:
        return (
            f"cannot reach {label}:\n    {tail(host)}",
            "the host is down, the name or port is wrong, or ssh needs a key or a prompt",
            _SSH_FIX,
        )
    if host.exit_code in NOT_FOUND:
        return (
            f"{label} has no Python at {python}:\n    {tail(host)}",
            "the hosts do not have this kernel's interpreter at the same path",
            "Install the same environment at the same path on every host, or set tl.Remote(python=...) (a path, or {host: path}).",
        )
    if "No module named 'tpu_lab'" in text:
        return (
            f"Python {python} on {label} cannot import tpu_lab:\n    {tail(host)}",
            "tpu_lab is not installed in that interpreter on that host",
            "Install the same tpu_lab there (pip install the same checkout), or set tl.Remote(python=...) to an interpreter that has it.",
        )
    if "No module named 'tpu_lab." in text:
        return (
            f"Python {python} on {label} has a different tpu_lab (without the multi-host runner):\n    {tail(host)}",
            "an older tpu_lab is installed on that host",
            "Install this kernel's tpu_lab version on every host.",
        )
    return (
        f"the host runner on {label} ended with exit code {host.exit_code} before its check:\n    {tail(host)}",
        "see its output above",
        "Run the same Python there by hand (ssh HOST PYTHON -m tpu_lab.tp.launch.runners.ssh_host) to see what fails.",
    )


def check_failed(failed: list[SshHost], remote: Remote) -> LaunchError:
    whys = [_why(h, remote) for h in failed]
    what = "\n".join(f"Launch refused: {w}" for w, _, _ in whys) + f"\n{NOTHING}"
    return LaunchError(what, cause=whys[0][1], fix=whys[0][2])


def unreachable(silent: list[SshHost], waited: float) -> LaunchError:
    names = ", ".join(f"{h.name} (node {h.node})" for h in silent)
    return LaunchError(
        f"Launch refused: no answer from host(s) {names} after {waited:.0f} s. {NOTHING}",
        cause="the host is down or unreachable from here (a firewall dropping packets), or the tool in "
        "tl.Remote(prefix=...) waits for input",
        fix=_SSH_FIX,
    )


def first_trouble(hosts: list[SshHost], state: RunState, silent_before: float) -> tuple[str, float] | None:
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


def silent(hosts: list[SshHost], before: float) -> list[SshHost]:
    """Hosts whose runner runs torchrun but has said nothing (not even its heartbeat) since ``before``."""
    return [h for h in hosts if h.result is None and h.exit_code is None and h.argv and h.last_heard < before]
