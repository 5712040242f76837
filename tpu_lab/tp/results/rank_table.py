"""One rank's compile table in a launch (``RankTable``), as its watcher wrote it in
``rank{R}.compiles.json`` (see ``tpu_lab.compile.watching.rank_watch``): its rows (function, input
signature, compiles, causes), graph breaks, the recompile limit, torch_tpu's counters and the last live
marker; and ``split_signature``, which reads a row's inputs back from its signature text. What
``rank_compiles`` merges and ``divergence`` compares. Pure over plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any

from tpu_lab._report import Report, table
from tpu_lab.tp.results.checked_files import checked_compile_file
from tpu_lab.tp.results.live_compiles import RankCompiles

SHOWN_ROWS = 30
"""Merged rows rendered; every row stays in ``merged`` and ``to_dict()``."""


UNRECORDED = "its details never reached the table: the rank ended right after this compile"


def _unrecorded(rows: list[dict[str, Any]], data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The compile the marker counted but the table lacks: a rank that dies right after a compile (a
    collective that aborts, say) ends before Dynamo's record of it is folded in. The marker still names
    the function and its inputs, which is what a comparison between ranks needs."""
    last, counted = data.get("last"), int(data.get("compiles") or 0)
    missing = counted - sum(int(r.get("compiles") or 0) for r in rows)
    if missing <= 0 or not isinstance(last, dict) or not last.get("function"):
        return []
    signature = str(last.get("inputs") or "")
    if any(r.get("function") == last["function"] and r.get("signature") == signature for r in rows):
        return []
    return [{"function": str(last["function"]), "signature": signature, "compiles": missing, "cause": UNRECORDED}]


@dataclass(frozen=True)
class RankTable(Report):
    """What one rank compiled, as its watcher last wrote it."""

    rank: int
    rows: tuple[dict[str, Any], ...] = ()
    """Its watch table's rows (``WatchTable.to_dict()['rows']``): function, signature, compiles, causes..."""
    graph_breaks: tuple[dict[str, Any], ...] = ()
    limit_hit: bool = False
    """Dynamo's recompile limit stopped a function compiling on this rank."""
    tpu: dict[str, Any] | None = None
    """torch_tpu's compile-cache counters on this rank (requests, hits, compilations; TPU only)."""
    live: RankCompiles = field(default_factory=RankCompiles)
    """The last marker: compiles counted, compiling at the end (a rank that died mid-compile), done."""
    seen: bool = False
    """The watcher ran in this rank (False: the rank never imported Dynamo, or watching was off)."""
    dynamo_disabled: bool = False
    """``torch._dynamo.config.disable`` was set when the rank's code ended."""

    @classmethod
    def from_file(cls, rank: int, data: Mapping[str, Any] | None) -> RankTable:
        data = checked_compile_file(data)
        if not data:
            return cls(rank)
        t: Mapping[str, Any] = data.get("table") or {} if isinstance(data.get("table"), dict) else {}
        rows = [r for r in t.get("rows", ()) if isinstance(r, dict)]
        return cls(
            rank,
            (*rows, *_unrecorded(rows, data)),
            tuple(b for b in t.get("graph_breaks", ()) if isinstance(b, dict)),
            bool(t.get("limit_hit")),
            data.get("tpu"),
            RankCompiles.from_marker(data),
            True,
            bool(data.get("dynamo_disabled")),
        )

    @property
    def compiles(self) -> int:
        return sum(int(r.get("compiles") or 0) for r in self.rows)

    def signatures(self, function: str) -> set[str]:
        return {r["signature"] for r in self.rows if r.get("function") == function and r.get("compiles")}

    def functions(self) -> list[str]:
        return list(dict.fromkeys(r["function"] for r in self.rows if r.get("compiles")))

    def _cells(self) -> list[tuple[str, str, str, str, str]]:
        return [
            (
                cut(r["function"], 60),
                cut(r.get("signature") or "-", 80),
                str(r.get("compiles", 0)) + (" (limit hit)" if r.get("limit_hit") else ""),
                cut(r.get("cause") or "", 120),
                cut("; ".join(dict.fromkeys(c.get("fix", "") for c in r.get("causes", ()) if c.get("fix"))), 100),
            )
            for r in self.rows[:SHOWN_ROWS]
        ]

    def _title(self) -> str:
        more = f", first {SHOWN_ROWS} rows shown" if len(self.rows) > SHOWN_ROWS else ""
        return f"rank {self.rank}: {self.compiles} compile(s), {len(self.graph_breaks)} graph break place(s){more}"

    def to_text(self) -> str:
        lines = [self._title()] + [f"  {c[0]}  {c[1]}  compiles: {c[2]}  {c[3]}" for c in self._cells()]
        lines += [f"  graph break: {b.get('count')} x {b.get('words')} at {b.get('where')}" for b in self.graph_breaks]
        return "\n".join(lines)

    def to_html(self) -> str:
        rows = table(self._cells(), ["function", "inputs", "compiles", "why", "fix"])
        breaks = "".join(
            f"<div>graph break: {escape(str(b.get('count')))} x {escape(str(b.get('words')))} at "
            f"{escape(str(b.get('where')))}</div>"
            for b in self.graph_breaks
        )
        return f"<div class='tpu-lab-rank-table'><b>{self._title()}</b>{rows}{breaks}</div>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "seen": self.seen,
            "compiles": self.compiles,
            "rows": list(self.rows),
            "graph_breaks": list(self.graph_breaks),
            "limit_hit": self.limit_hit,
            "tpu": self.tpu,
            "dynamo_disabled": self.dynamo_disabled,
            "compiling_at_end": self.live.function,
            "error": self.live.error,
        }


def split_signature(sig: str) -> dict[str, str]:
    """``"x: f32[2, 3], n: int 4"`` -> ``{"x": "f32[2, 3]", "n": "int 4"}`` (commas inside brackets kept)."""
    parts, depth, cur = [], 0, ""
    for ch in sig:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return {name: desc for name, _, desc in (p.partition(": ") for p in parts)}


def cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
