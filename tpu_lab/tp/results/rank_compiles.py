"""Compiles per rank in a launch, merged (``LaunchResult.compiles``, a ``RunCompiles``): every rank's
table (``rank_table``) merged per function x inputs with the ranks that compiled each, and the findings
where ranks diverge (``divergence``). Pure over plain data: the tables cross processes and hosts as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tpu_lab._report import Finding, Report, findings_html, findings_text, table
from tpu_lab.tp.results.divergence import divergence
from tpu_lab.tp.results.live_compiles import rank_span
from tpu_lab.tp.results.rank_table import SHOWN_ROWS, RankTable, cut, split_signature


@dataclass(frozen=True)
class MergedRow:
    """One function x inputs across ranks."""

    function: str
    signature: str
    ranks: tuple[int, ...]
    """The ranks that compiled it."""
    compiles: int
    """Compiles of it, summed over those ranks."""
    seconds: float
    """The longest any rank spent compiling it."""
    cause: str
    """Why it compiled (the first rank's words)."""
    limit_ranks: tuple[int, ...] = ()
    """Ranks where Dynamo's recompile limit refused it."""


@dataclass(frozen=True)
class RunCompiles(Report):
    """Every rank's compile table of one launch, merged, with the divergences in words."""

    tables: tuple[RankTable, ...]
    """By rank."""
    findings: tuple[Finding, ...] = ()
    """Where ranks diverge, in words, with the likely cause and the fix (``tp.results.divergence``)."""
    merged: tuple[MergedRow, ...] = ()
    """Every function x inputs any rank compiled, with the ranks that compiled it."""

    @classmethod
    def from_files(cls, files: Mapping[int, Mapping[str, Any] | None], ranks: int) -> RunCompiles:
        """From each rank's watcher file (a missing rank: it never imported Dynamo)."""
        tables = tuple(RankTable.from_file(r, files.get(r)) for r in range(ranks))
        return cls(tables, tuple(divergence(tables)), merge(tables))

    def __getitem__(self, rank: int) -> RankTable:
        return self.tables[rank]

    def __len__(self) -> int:
        return len(self.tables)

    @property
    def total(self) -> int:
        return sum(t.compiles for t in self.tables)

    @property
    def diverged(self) -> bool:
        """Ranks compiled different graphs (or one kept compiling): see ``findings``."""
        return any(f.severity != "info" for f in self.findings)

    def per_rank(self) -> list[tuple[int, int, int, str]]:
        """(rank, graphs, compiles, note) per rank."""
        out = []
        for t in self.tables:
            note = "" if t.seen else "never imported Dynamo (no torch.compile ran)"
            if t.dynamo_disabled:
                note = "Dynamo disabled (torch._dynamo.config.disable)"
            if t.live.error:
                note = t.live.error
            if t.live.function and not t.live.done:
                note = f"ended while compiling {t.live.function}"
            if t.limit_hit:
                note = (note + "; " if note else "") + "recompile limit hit"
            if t.tpu:
                note = (note + "; " if note else "") + f"torch_tpu cache: {_tpu_words(t.tpu)}"
            graphs = sum(1 for r in t.rows if r.get("compiles"))
            out.append((t.rank, graphs, t.compiles, note))
        return out

    def _merged_shown(self) -> tuple[list[MergedRow], int]:
        everyone = tuple(t.rank for t in self.tables)
        rows = sorted(self.merged, key=lambda m: (m.ranks == everyone, -m.compiles))  # divergent rows first
        return rows[:SHOWN_ROWS], max(0, len(rows) - SHOWN_ROWS)

    def _merged_cells(self) -> tuple[list[tuple[str, str, str, str, str]], int]:
        everyone = tuple(t.rank for t in self.tables)
        shown, left = self._merged_shown()
        cells = [
            (
                cut(m.function, 60),
                cut(self._differing(m), 80),
                "all"
                if m.ranks == everyone and len(everyone) > 1
                else rank_span(m.ranks).split(" ", 1)[1]
                if m.ranks
                else "-",
                str(m.compiles),
                cut(m.cause, 100),
            )
            for m in shown
        ]
        return cells, left

    def _differing(self, row: MergedRow) -> str:
        """The row's inputs less those every row of its function shares (the model itself, flags)."""
        parts = [split_signature(m.signature) for m in self.merged if m.function == row.function]
        if len(parts) < 2:
            return row.signature or "-"
        shared = {k for k, v in parts[0].items() if all(p.get(k) == v for p in parts[1:])}
        mine = split_signature(row.signature)
        return ", ".join(f"{k}: {v}" for k, v in mine.items() if k not in shared) or row.signature or "-"

    def to_text(self) -> str:
        lines = [f"compiles per rank: {len(self.tables)} rank(s), {self.total} compile(s)"]
        lines += [
            f"  rank {r}: {g} graph(s), {c} compile(s)" + (f"  [{n}]" if n else "") for r, g, c, n in self.per_rank()
        ]
        cells, left = self._merged_cells()
        if cells:
            lines.append("merged (function x the inputs that differ between its rows -> ranks):")
            lines += [f"  {c[0]}  {c[1]}  ranks: {c[2]}  compiles: {c[3]}  {c[4]}" for c in cells]
            if left:
                lines.append(f"  ... and {left} more rows (result.compiles.merged holds them all)")
        lines += findings_text(self.findings)
        return "\n".join(lines)

    def to_html(self) -> str:
        per_rank = table(self.per_rank(), ["rank", "graphs", "compiles", "note"])
        cells, left = self._merged_cells()
        merged = table(cells, ["function", "inputs (those that differ)", "ranks", "compiles", "why"]) if cells else ""
        more = f"<div>... and {left} more rows (result.compiles.merged holds them all)</div>" if left else ""
        return (
            f"<div class='tpu-lab-rank-compiles'><b>compiles per rank: {len(self.tables)} rank(s), "
            f"{self.total} compile(s)</b>{per_rank}{merged}{more}{findings_html(self.findings)}</div>"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": [t.to_dict() for t in self.tables],
            "merged": [m.__dict__ for m in self.merged],
            "findings": [f.__dict__ for f in self.findings],
            "total_compiles": self.total,
        }


def merge(tables: Iterable[RankTable]) -> tuple[MergedRow, ...]:
    """The rows of every rank, one per function x inputs, with the ranks that compiled it."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for t in tables:
        for r in t.rows:
            if not r.get("compiles") and not r.get("limit_hit"):
                continue
            m = acc.setdefault(
                (r["function"], r.get("signature", "")),
                {"ranks": [], "compiles": 0, "seconds": 0.0, "cause": r.get("cause", ""), "limit": []},
            )
            if r.get("compiles"):
                m["ranks"].append(t.rank)
            if r.get("limit_hit"):
                m["limit"].append(t.rank)
            m["compiles"] += int(r.get("compiles") or 0)
            m["seconds"] = max(m["seconds"], float(r.get("compile_seconds") or 0.0))
    return tuple(
        MergedRow(f, s, tuple(m["ranks"]), m["compiles"], m["seconds"], m["cause"], tuple(m["limit"]))
        for (f, s), m in acc.items()
    )


def _tpu_words(tpu: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in tpu.items() if isinstance(v, int | float))
