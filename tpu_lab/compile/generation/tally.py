"""Per input-shape rows: calls, compiles, what they cost and why, folded one call at a time."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

from tpu_lab.compile.generation.shape_reasons import explain_new_shape
from tpu_lab.compile.generation.signature import ShapeSignature
from tpu_lab.compile.sources.tpu_source import CompileEvent


class ForwardCall(NamedTuple):
    """One model forward the session ran: its ``signature``, wall ``seconds`` (compiles included), the
    compile ``events`` it caused, and whether it ran ``compiled`` (False after the recompile limit).
    A NamedTuple for the same hot-path reason as ShapeSignature."""

    signature: ShapeSignature
    seconds: float
    events: tuple[CompileEvent, ...] = ()
    compiled: bool = True


@dataclass(frozen=True)
class ShapeRow:
    """Per input-shape signature: how often it ran, how often it compiled, and what that cost."""

    signature: ShapeSignature
    calls: int
    """Forward calls with this signature."""
    compiles: int
    """Compilations attributed to it."""
    compile_seconds: float
    first_call_seconds: float
    """The first call, usually the one that compiled."""
    last_call_seconds: float
    """The latest call: with no compile, what a cached call costs."""
    reason: str
    """Why it last compiled, in words ("" when it never did)."""
    guard: str
    """Dynamo's own text for the guard that failed, when there is one."""
    uncompiled_calls: int = 0
    """Calls that ran uncompiled because the recompile limit was hit."""
    cached: int = 0
    """Compiles served from a persistent compile cache."""


@dataclass
class _Running:
    """A row while it is being folded (ShapeRow is its frozen copy)."""

    calls: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0
    first_call_seconds: float = 0.0
    last_call_seconds: float = 0.0
    reason: str = ""
    guard: str = ""
    uncompiled_calls: int = 0
    cached: int = 0


class ShapeTally:
    """Folds forward calls into per-shape rows one call at a time, in O(1) each, keeping no call
    history (a notebook session can run for days). Pure: no clock, no torch."""

    def __init__(self) -> None:
        self._rows: dict[ShapeSignature, _Running] = {}
        self.compiled: list[ShapeSignature] = []
        """Signatures that compiled, in the order they first did."""

    def add(self, call: ForwardCall) -> str:
        """Count ``call``; return why it compiled, in words ("" when it didn't)."""
        reason = ""
        if call.events:
            event = call.events[-1]
            ours = None if event.limit_hit else explain_new_shape(call.signature, self.compiled)
            reason = ours or event.explanation
        row = self._rows.get(call.signature)
        if row is None:
            row = self._rows[call.signature] = _Running(first_call_seconds=call.seconds)
        compiles = [e for e in call.events if not e.limit_hit]
        row.calls += 1
        row.compiles += len(compiles)
        row.compile_seconds += sum(e.seconds for e in compiles)
        row.last_call_seconds = call.seconds
        row.uncompiled_calls += not call.compiled
        row.cached += sum(e.cached for e in compiles)
        if call.events:
            row.reason, row.guard = reason, call.events[-1].reason or ""
        if compiles and call.signature not in self.compiled:
            self.compiled.append(call.signature)
        return reason

    def rows(self) -> list[ShapeRow]:
        """One row per signature, in first-seen order."""
        return [ShapeRow(sig, **asdict(row)) for sig, row in self._rows.items()]
