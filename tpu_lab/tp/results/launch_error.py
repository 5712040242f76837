"""The LaunchError a finished launch deserves, the same for every runner: the rank that failed FIRST (by
its failure time, not by who reported first) with its exit code or signal and traceback; or what failed
when no rank did (torchrun itself killed, a host lost); or the timeout; or your stop. Pure."""

from __future__ import annotations

from tpu_lab.errors import LaunchError, LaunchInterrupted
from tpu_lab.tp.results.launch_result import LaunchResult, RankResult
from tpu_lab.tp.results.run_state import RankState


def first_failed(result: LaunchResult) -> RankResult | None:
    failed = [r for r in result.ranks if r.outcome is RankState.FAILED]
    return min(failed, key=lambda r: (r.failed_at or float("inf"), r.rank), default=None)


def _where(result: LaunchResult) -> str:
    return "every process on every host" if result.hosts else "every process of the run"


def describe(result: LaunchResult) -> str:
    """Argv, each host's and rank's state, the failing rank's traceback or the launcher's last lines."""
    lines = [f"host {h.host} (node {h.node_rank}, ranks {list(h.ranks)}): {h.state}" for h in result.hosts]
    if not result.hosts:
        lines.append("argv: " + " ".join(result.argv))
    lines += [f"rank {r.rank}{f' on {r.host}' if r.host else ''}: {r.state}" for r in result.ranks]
    blamed = first_failed(result)
    failing = blamed if blamed is not None and blamed.error else next((r for r in result.ranks if r.error), None)
    if failing is not None and failing.error:
        on = f" on {failing.host}" if failing.host else ""
        tail = "\n".join(failing.error.strip().splitlines()[-12:])
        lines.append(f"rank {failing.rank}{on} traceback (tail):\n{tail}")
    elif result.launcher_output.strip():
        lines.append("launcher said (tail):\n" + "\n".join(result.launcher_output.splitlines()[-12:]))
    for h in result.hosts:
        if h.error and h.state in ("lost", "failed"):
            lines.append(f"host {h.host}: {h.error}")
    if result.hosts and result.hosts[0].argv:
        lines.append("argv on node 0: " + " ".join(result.hosts[0].argv))
    return "\n".join(lines)


def stopped_by_user(result: LaunchResult) -> bool:
    """The launch ended because you stopped it (Stop, an interrupt), not by a failure or a timeout."""
    reason = result.stop_reason or ""
    return bool(reason) and not reason.startswith("timed out") and first_failed(result) is None and not result.failure


def last_lines(result: LaunchResult) -> str:
    """Each rank's state and its last line: what a stopped run had reached."""
    out = []
    for r in result.ranks:
        last = next((line for line in reversed(r.output.splitlines()) if line.strip()), "(no output)")
        out.append(f"rank {r.rank}{f' on {r.host}' if r.host else ''}: {r.state}; last line: {last}")
    return "\n".join(out)


def _rank_failed(result: LaunchResult, rank: RankResult) -> LaunchError:
    how = (
        f"was killed by {rank.signal}" if rank.exit_code is None and rank.signal else f"failed (exit {rank.exit_code})"
    )
    if result.hosts:
        node = next((h.node_rank for h in result.hosts if rank.rank in h.ranks), 0)
        what = f"Rank {rank.rank} on host {rank.host} (node {node}) {how}; every process on every host was stopped."
    else:
        what = f"Rank {rank.rank} {how}; torchrun stopped the others."
    diverged = _divergence(result)
    if rank.exit_code is None and rank.signal in _SELF_INFLICTED:
        return LaunchError(
            f"{what}\n{describe(result)}",
            result=result,
            cause=diverged
            or f"the rank's own process ended itself with {rank.signal}: a native library (gloo, libtpu, a C++ "
            "check) hit a fatal error, such as a collective whose ranks disagree",
            fix="Read the rank's last lines; make every rank run the same code on the same shapes "
            "(result.compiles shows what each rank compiled).",
        )
    if rank.exit_code is None and rank.signal:
        return LaunchError(
            f"{what}\n{describe(result)}",
            result=result,
            cause=f"something outside the rank's code sent {rank.signal}: the kernel's OOM killer (out of memory), "
            "a `kill` command, or a job scheduler",
            fix="Check the host's memory (dmesg shows OOM kills) and run again; lower the batch or model size if it was memory.",
        )
    return LaunchError(
        f"{what}\n{describe(result)}",
        result=result,
        cause=diverged,
        fix="Fix the error in the traceback above (the same code runs on every rank).",
    )


def interrupted_error(result: LaunchResult | None) -> LaunchInterrupted:
    """What a cell interrupt during a launch ends with: one sentence and each rank's last line."""
    if result is None:
        return LaunchInterrupted("The launch was stopped by you (interrupted); every process of it was stopped.")
    return LaunchInterrupted(
        f"The launch was stopped by you (interrupted) after {result.seconds:.1f} s; {_where(result)} was stopped.\n"
        f"{last_lines(result)}",
        result=result,
    )


def raise_for_failure(result: LaunchResult) -> None:
    """Raise the LaunchError a failed, stopped or timed-out launch deserves; nothing when it is ok."""
    blamed = first_failed(result)
    if blamed is None and result.failure is None and result.stop_reason:
        reason = result.stop_reason
        if reason.startswith("timed out"):
            raise LaunchError(
                f"The launch {reason}; {_where(result)} was stopped.\n{describe(result)}",
                result=result,
                cause="a rank waiting forever (a hang, a deadlock, a collective another rank never joined) or a "
                "timeout shorter than loading takes",
                fix="Look at each rank's last lines above; raise timeout= if loading is just slow.",
            )
        raise LaunchError(
            f"The launch was stopped by you ({reason}) after {result.seconds:.1f} s; {_where(result)} was "
            f"stopped.\n{last_lines(result)}",
            result=result,
            fix="Nothing to fix: run the cell again when you are ready.",
        )
    failure_first = result.failure is not None and (
        blamed is None or (result.failed_at or float("inf")) <= (blamed.failed_at or float("inf"))
    )
    if blamed is not None and not failure_first:
        raise _rank_failed(result, blamed)
    if result.failure is not None and " is full (" in result.failure:
        raise LaunchError(
            f"{result.failure[0].upper()}{result.failure[1:]}; {_where(result)} was stopped.\n{describe(result)}",
            result=result,
            cause="each rank's output and results are written under the temporary folder, and it has no space left",
            fix="Free space there, or point TMPDIR at a folder with space (e.g. TMPDIR=$HOME/tmp) and restart the kernel.",
        )
    if result.failure is not None:
        raise LaunchError(
            f"{result.failure[0].upper()}{result.failure[1:]}; {_where(result)} was stopped.\n{describe(result)}",
            result=result,
            cause="a process of the launch was killed from outside (the OOM killer, a `kill` command), or a host "
            "or its connection went down",
            fix="Check the host (its memory, dmesg, `tpu-lab probe` there), then run again.",
        )
    if not result.ok:
        raise LaunchError(f"The launch did not finish.\n{describe(result)}", result=result)


# Signals a process raises on itself (abort, a crash in native code), never the OOM killer's SIGKILL.
_SELF_INFLICTED = {"SIGABRT", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGTRAP"}


def _divergence(result: LaunchResult) -> str | None:
    """The ranks' first divergence in words, when their compiles differ (a likely cause of a failed collective)."""
    compiles = result.compiles
    if compiles is None or not compiles.diverged:
        return None
    first = next(f for f in compiles.findings if f.severity != "info")
    return f"the ranks ran different graphs: {first.message}"
