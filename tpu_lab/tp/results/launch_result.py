"""What a finished launch hands back: ``LaunchResult`` (each rank's ``RankResult``: exit code or signal,
value, output, traceback; each host's ``HostResult`` on several hosts; the compiles, merged), built by a
runner from its run state (``rank_results``) and what the ranks wrote (``rank_files``). A failed one
raises the ``LaunchError`` of ``launch_error``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpu_lab._report import Report, table
from tpu_lab.tp.results.run_state import RankState, RunState

if TYPE_CHECKING:
    from tpu_lab.tp.results.rank_compiles import RunCompiles


@dataclass(frozen=True)
class RankResult:
    """How one rank ended."""

    rank: int
    exit_code: int | None
    """0 on success; None when a signal ended it or it was stopped before it could say (see ``signal``)."""
    signal: str | None
    """The signal that ended it (e.g. "SIGKILL"), if known."""
    value: Any
    """What it passed to ``tl.report()`` (None if nothing)."""
    output: str
    """The tail of its output (stdout and stderr)."""
    error: str | None
    """Its traceback when it failed."""
    host: str | None = None
    """The host it ran on (multi-host launches; None on one host)."""
    status: RankState | None = None
    """How it ended: OK, FAILED (a non-zero exit, or a signal nobody in the launch sent) or STOPPED.
    None: worked out from ``exit_code``."""
    failed_at: float | None = None
    """Wall-clock time of its failure (the first failure is the one blamed)."""

    @property
    def outcome(self) -> RankState:
        if self.status is not None:
            return self.status
        if self.exit_code == 0:
            return RankState.OK
        return RankState.STOPPED if self.exit_code is None else RankState.FAILED

    @property
    def ok(self) -> bool:
        return self.outcome is RankState.OK

    @property
    def state(self) -> str:
        """ "ok", "failed (exit 1)", "failed (SIGKILL)" or "stopped"."""
        if self.outcome is RankState.FAILED:
            return (
                f"failed ({self.signal})"
                if self.exit_code is None and self.signal
                else f"failed (exit {self.exit_code})"
            )
        return self.outcome.value


@dataclass(frozen=True)
class HostResult:
    """How one host of a multi-host launch ended."""

    host: str
    node_rank: int
    ranks: tuple[int, ...]
    """The global ranks it ran (node_rank x nproc onwards)."""
    state: str
    """"ok", "failed", "stopped", "lost" (the connection ended without a result) or "not started"."""
    argv: tuple[str, ...]
    """Its torchrun command line (empty when it never started)."""
    output: str
    """torchrun's and the connection's own lines (not from a rank), the latest ones."""
    error: str | None = None
    """What went wrong there, in words."""


@dataclass(frozen=True)
class LaunchResult(Report):
    """A finished launch: each rank's exit code, value and output."""

    argv: tuple[str, ...]
    run_dir: Path
    seconds: float
    ranks: tuple[RankResult, ...]
    launcher_output: str = ""
    """torchrun's own lines (not from a rank)."""
    stop_reason: str | None = None
    """Why the launcher stopped the run ("interrupted", "timed out after 60 s", ...); None when it ended by itself."""
    hosts: tuple[HostResult, ...] = ()
    """Per host, in node order (multi-host launches; empty on one host)."""
    failure: str | None = None
    """What failed when no rank did (torchrun itself killed, a host lost), in words."""
    failed_at: float | None = None
    """Wall-clock time of ``failure`` (compared with the ranks' to blame what failed first)."""
    compiles: RunCompiles | None = None
    """Each rank's compile table, merged, with divergences in words (None: launched with watch=False)."""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.ranks)

    @property
    def run_id(self) -> str | None:
        """The run's id, from torchrun's ``--rdzv-id``: its processes carry it, so
        ``tl.tp.launch.process.run_pids(result.run_id)`` counts this run's processes only."""
        return next((a.partition("=")[2] for a in self.argv if a.startswith("--rdzv-id=")), None)

    @property
    def values(self) -> list[Any]:
        """Each rank's reported value, by rank."""
        return [r.value for r in self.ranks]

    @property
    def verdict(self) -> str:
        if self.ok:
            return "ok"
        failed = self.failure or any(r.outcome is RankState.FAILED for r in self.ranks)
        return f"STOPPED ({self.stop_reason})" if self.stop_reason and not failed else "FAILED"

    def to_text(self) -> str:
        on = f" on {len(self.hosts)} host(s)" if self.hosts else ""
        lines = [f"tpu_lab launch: {len(self.ranks)} rank(s){on}, {self.verdict}, {self.seconds:.1f} s"]
        lines += [f"  host {h.host} (node {h.node_rank}): {h.state}" for h in self.hosts]
        at = {r.rank: f" on {r.host}" if r.host else "" for r in self.ranks}
        lines += [f"  rank {r.rank}{at[r.rank]}: {r.state}, value={r.value!r}" for r in self.ranks]
        if self.compiles is not None and (self.compiles.total or self.compiles.findings):
            lines.append(self.compiles.to_text())
        return "\n".join(lines)

    def to_html(self) -> str:
        on = f" on {len(self.hosts)} host(s)" if self.hosts else ""
        head = ["rank", "host", "state", "value"] if self.hosts else ["rank", "state", "value"]
        cols: list[tuple[object, ...]] = [
            (r.rank, r.host, r.state, repr(r.value)) if self.hosts else (r.rank, r.state, repr(r.value))
            for r in self.ranks
        ]
        return (
            f"<div class='tpu-lab-launch-result'><b>{len(self.ranks)} rank(s){on}, {escape(self.verdict)}, "
            f"{self.seconds:.1f} s</b>{table(cols, head)}{self._compiles_html()}</div>"
        )

    def _compiles_html(self) -> str:
        shown = self.compiles is not None and (self.compiles.total or self.compiles.findings)
        return self.compiles.to_html() if shown and self.compiles is not None else ""


def rank_results(
    state: RunState, values: Mapping[int, Any], errors: Mapping[int, str | None]
) -> tuple[RankResult, ...]:
    """Each rank's result from the run state of a finished launch and what the ranks handed back."""
    return tuple(
        RankResult(
            rank=r.rank,
            exit_code=r.exit_code,
            signal=r.signal,
            value=values.get(r.rank),
            output="\n".join(state.lines(r.rank)),
            error=errors.get(r.rank),
            host=r.host,
            status=r.state if r.state.final else RankState.STOPPED,
            failed_at=r.failed_at,
        )
        for r in state.ranks
    )
