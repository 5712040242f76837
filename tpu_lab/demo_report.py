"""What the demo measured and how it reads: per policy, the per-shape table and the totals of each pass;
then one summary table and the sentence saying what buckets saved. Pure: no torch, no clock."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_lab._report import Report, table
from tpu_lab.compile.generation.table import CompileTable

INTRO = (
    "What this shows:",
    "  - A compile: torch.compile turns the model's forward into a graph for one exact input shape (prompt "
    "length, cache size); a new shape means a new compile.",
    "  - A TPU pays that for every new shape before it can run it: seconds to minutes per compile, while the "
    "request waits.",
    "  - Buckets pad each prompt up to one of a few fixed lengths (with one fixed cache size), so a few graphs "
    "compile once and then serve every prompt.",
)
NEXT = (
    "Next: try --max-buckets 2 (fewer compiles, more padding) or --distinct 12 (more lengths: naive climbs, "
    "bucketed does not), or open notebooks/03_recompiles.ipynb to warm the buckets up and then assert that "
    "nothing recompiles."
)

TIMING_ROUNDS = 3
"""After the passes, each distinct prompt runs this many more times, to time cached calls."""

SUMMARY_HEAD = ("policy", "compiles (pass 1 + 2)", "compile s (pass 1 + 2)", "wall s (pass 1 / 2)", "padding")


@dataclass(frozen=True)
class PassTotals:
    """One pass over the workload."""

    compiles: int
    compile_seconds: float
    wall_seconds: float
    """Wall time of the whole pass, compiles included."""


@dataclass(frozen=True)
class PolicyRun:
    """One policy (naive or bucketed) run over the workload, pass after pass."""

    name: str
    title: str
    backend: str
    table: CompileTable
    """Per shape, over every pass and the timing rounds: its compiles add up to the passes' compiles plus
    ``timing_compiles``."""
    passes: tuple[PassTotals, ...]
    cumulative: tuple[int, ...]
    """Compiles so far after each request, over every pass."""
    real_tokens: int
    """Prompt tokens of one pass."""
    padded_tokens: int
    """Tokens prefilled in one pass (prompt + padding)."""
    cached_seconds: Mapping[Any, tuple[float, int, float, float]] = field(default_factory=dict)
    """Per shape signature: the median time of its cached calls (those that compiled nothing), how many
    there were, and the fastest and slowest, over the passes and the timing rounds after them."""
    timing_compiles: int = 0
    """Compiles during the timing rounds (0 when the passes compiled every shape)."""

    @property
    def compiles(self) -> int:
        return sum(p.compiles for p in self.passes)

    @property
    def compile_seconds(self) -> float:
        """The sum of the passes' compile seconds as shown (each to 0.1 s), so a total adds up on screen."""
        return round(sum(round(p.compile_seconds, 1) for p in self.passes), 1)

    @property
    def padding(self) -> int:
        return self.padded_tokens - self.real_tokens


@dataclass(frozen=True)
class DemoResult(Report):
    """Both policies, the buckets used and where the chart went (None: no chart)."""

    runs: tuple[PolicyRun, ...]
    buckets: tuple[int, ...]
    chart: Path | None

    def __getitem__(self, name: str) -> PolicyRun:
        return next(r for r in self.runs if r.name == name)

    def to_text(self) -> str:
        return summary_text(self)

    def to_html(self) -> str:
        rows = [(r.name, _compiles(r), _compile_seconds(r), _walls(r), _padding(r)) for r in self.runs]
        return f"{table(rows, SUMMARY_HEAD)}<p>{saved_sentence(self)}</p>"


def short_reason(reason: str) -> str:
    """The reason's first clause ("new prompt length 4 (compiled so far: 17)"); the advice after it is
    printed once below the table."""
    return re.split(r"(?<!so far): |; ", reason, maxsplit=1)[0]


def _cached_ms(run: PolicyRun, signature: Any) -> str:
    median, n, low, high = run.cached_seconds.get(signature, (0.0, 0, 0.0, 0.0))
    if not n:
        return "-"
    spread = f", {low * 1000:.1f}-{high * 1000:.1f}" if n > 1 else ""
    return f"{median * 1000:.1f} (n={n}{spread})"


WIDE_SPREAD = 3.0
"""A shape whose slowest cached call took this many times its fastest gets the noise note."""


def _timing_note(run: PolicyRun) -> str | None:
    """Why cached-call times differ, said only where they do: between shapes (size) or within one (load)."""
    timed = [t for t in run.cached_seconds.values() if t[1]]
    if not timed:
        return None
    medians = [t[0] for t in timed]
    noisy = sum(1 for _, n, low, high in timed if n > 1 and low > 0 and high / low >= WIDE_SPREAD)
    notes = []
    if min(medians) > 0 and max(medians) / min(medians) >= WIDE_SPREAD:
        notes.append(
            f"cached calls differ {max(medians) / min(medians):.0f}x between shapes: a longer prompt or cache does "
            "more work per call"
        )
    if noisy:
        notes.append(
            f"{noisy} of {len(timed)} shapes' cached calls vary {WIDE_SPREAD:.0f}x or more from fastest to slowest: "
            "other work on this machine slowed some calls, so compare medians, not single calls"
        )
    return "  timing: " + "; ".join(notes) + "." if notes else None


def run_text(run: PolicyRun) -> str:
    cells = [
        (
            str(r.signature),
            str(r.calls),
            str(r.compiles) + (f" (+{r.uncompiled_calls} uncompiled)" if r.uncompiled_calls else ""),
            f"{r.compile_seconds:.2f}",
            f"{r.first_call_seconds * 1000:.0f}",
            _cached_ms(run, r.signature),
            short_reason(r.reason),
        )
        for r in run.table
    ]
    head = ("shape", "calls", "compiles", "compile s", "first call ms", "cached call ms (n, range)", "why it compiled")
    widths = [max([len(head[i]), *(len(c[i]) for c in cells)]) for i in range(6)]
    lines = [f"\n== {run.name}: {run.title}"]
    for row in [head, *cells]:
        left = f"{row[0]:<{widths[0]}}"
        lines.append("  ".join([left, *(f"{row[i]:>{widths[i]}}" for i in range(1, 6)), row[6]]).rstrip())
    lines.append(
        f"{run.name}: {_compiles(run)} compiles, {_compile_seconds(run)} s compiling; "
        f"pass 1 took {run.passes[0].wall_seconds:.1f} s, pass 2 {run.passes[-1].wall_seconds:.1f} s"
    )
    timing = f"; those rounds compiled {run.timing_compiles} more times" if run.timing_compiles else ""
    lines.append(
        f"  calls include {TIMING_ROUNDS} timing rounds after the passes (each distinct prompt again){timing}; "
        "cached call ms: the median over the n prompts that ran that shape without compiling it (its last "
        "call in each), then the fastest and slowest of them."
    )
    note = _timing_note(run)
    if note:
        lines.append(note)
    advice = {
        short_reason(r.reason): r.reason[len(short_reason(r.reason)) :].lstrip(":; ")
        for r in run.table
        if r.reason != short_reason(r.reason)
    }
    notes = {re.sub(r"( to)? \d+.*", "", k): v for k, v in advice.items()}  # one note per kind of reason
    lines += [f"  why, in full: {kind}: {text}" for kind, text in notes.items()]
    if run.table.limit_hit:
        lines.append("WARNING: Dynamo's recompile limit was hit: some calls ran uncompiled.")
    return "\n".join(lines)


def summary_text(result: DemoResult) -> str:
    rows = [(r.name, _compiles(r), _compile_seconds(r), _walls(r), _padding(r)) for r in result.runs]
    widths = [max(len(SUMMARY_HEAD[i]), *(len(row[i]) for row in rows)) for i in range(5)]
    lines = ["\n== summary"]
    lines += ["  ".join(f"{c:<{widths[i]}}" for i, c in enumerate(row)).rstrip() for row in [SUMMARY_HEAD, *rows]]
    return "\n".join([*lines, "", saved_sentence(result), NEXT])


def saved_sentence(result: DemoResult) -> str:
    naive, bucketed = result["naive"], result["bucketed"]
    saved = naive.compiles - bucketed.compiles
    if saved <= 0:
        return (
            f"Buckets saved no compiles here ({naive.compiles} naive, {bucketed.compiles} bucketed): with so few "
            "distinct lengths there is little to bound."
        )
    share = bucketed.padding / bucketed.padded_tokens if bucketed.padded_tokens else 0.0
    return (
        f"Buckets saved {saved} of {naive.compiles} compiles and "
        f"{naive.compile_seconds - bucketed.compile_seconds:.1f} s of compiling ({naive.compile_seconds:.1f} s -> "
        f"{bucketed.compile_seconds:.1f} s; pass 1: "
        f"{naive.passes[0].wall_seconds:.1f} s -> {bucketed.passes[0].wall_seconds:.1f} s; pass 2 compiled "
        f"{bucketed.passes[-1].compiles} times instead of {naive.passes[-1].compiles}), for "
        f"{bucketed.padding} padding tokens per pass ({share:.0%} of the tokens prefilled)."
    )


def _compiles(run: PolicyRun) -> str:
    return " + ".join(str(p.compiles) for p in run.passes) + f" = {run.compiles}"


def _compile_seconds(run: PolicyRun) -> str:
    return " + ".join(f"{p.compile_seconds:.1f}" for p in run.passes) + f" = {run.compile_seconds:.1f}"


def _walls(run: PolicyRun) -> str:
    return " / ".join(f"{p.wall_seconds:.1f}" for p in run.passes)


def _padding(run: PolicyRun) -> str:
    share = run.padding / run.padded_tokens if run.padded_tokens else 0.0
    return f"{run.padding} tokens ({share:.0%})"
