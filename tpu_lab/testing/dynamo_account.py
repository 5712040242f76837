"""Dynamo's own account of what ran inside a block: its compilation records and its ``TORCH_LOGS`` records
(recompiles, graph breaks, the converter's soft failures), and the backward graphs a counting backend
compiled. The oracle ``watch_invariants`` checks a watch against: it reads nothing the watch reads."""

from __future__ import annotations

import logging
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

_CONVERTER = "torch._dynamo.convert_frame"
RETRY = "Graph Break Reason: Failed to handle graph break gracefully"
"""How Dynamo logs a frame it gives up on: where it had logged the break in an earlier attempt of the same
compile, the same break again."""


@dataclass
class DynamoAccount:
    """Dynamo's own account of what ran between ``__enter__`` and ``__exit__``."""

    records: list[Any] = field(default_factory=list)
    logs: list[logging.LogRecord] = field(default_factory=list)
    graphs: dict[str, int] = field(default_factory=lambda: {"forward": 0, "backward": 0})
    """The graphs ``counting_backend`` compiled while this account was open."""
    _first: Any = None
    _handler: Any = None
    _converter: tuple[int, bool] = (logging.NOTSET, True)
    _last: Any = None

    def __enter__(self) -> DynamoAccount:
        import torch
        from torch._dynamo.utils import get_compilation_metrics

        found = list(get_compilation_metrics())
        self._first = found[-1] if found else None
        _keep_records(1 << 20)  # Dynamo keeps its newest 64 only: the account keeps every one
        keep = self._keep

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                keep(record)

        self._handler = Keep(logging.DEBUG)
        _open.append(self)
        torch._logging.set_logs(recompiles=True, graph_breaks=True)
        for name in ("torch._dynamo", "torch._dynamo.__recompiles", "torch._dynamo.__graph_breaks"):
            logging.getLogger(name).addHandler(self._handler)
        converter = logging.getLogger(_CONVERTER)  # its INFO soft failures: a function it would not start on
        self._converter = (converter.level, converter.propagate)
        converter.setLevel(logging.INFO)
        converter.propagate = False  # heard here, not printed
        converter.filters.insert(0, self._heard)  # first: before a watch's filter passes on only the user's level
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch
        from torch._dynamo.utils import get_compilation_metrics

        for name in ("torch._dynamo", "torch._dynamo.__recompiles", "torch._dynamo.__graph_breaks"):
            logging.getLogger(name).removeHandler(self._handler)
        converter = logging.getLogger(_CONVERTER)
        converter.removeFilter(self._heard)
        converter.setLevel(self._converter[0])
        converter.propagate = self._converter[1]
        _open.remove(self)
        torch._logging.set_logs()
        found = list(get_compilation_metrics())
        _keep_records(None)
        start = next((i + 1 for i, r in enumerate(found) if r is self._first), 0) if self._first is not None else 0
        self.records = found[start:]

    def _keep(self, record: logging.LogRecord) -> None:
        """A copy of ``record``'s name and text only: its arguments may hold the user's objects (an optimizer in
        a guard's text), which kept alive would keep Dynamo's guards on them alive, unlike a run unobserved."""
        if self._last is not None and self._last() is record:  # one record reaches two of the loggers
            return
        self._last = weakref.ref(record)
        kept = {"name": record.name, "msg": record.getMessage(), "levelno": record.levelno, "compile": compiling()}
        self.logs.append(logging.makeLogRecord(kept))

    def _heard(self, record: logging.LogRecord) -> bool:  # a filter: keeps the converter's records, passes all
        if record.levelno >= logging.INFO:
            self._keep(record)
        return True

    def messages(self, artifact: str) -> list[str]:
        return [r.getMessage() for r in self.logs if r.name.endswith(f".__{artifact}")]

    def compiled(self) -> list[Any]:
        return [r for r in self.records if r.has_guarded_code and getattr(r, "is_forward", True) and not _nothing(r)]

    def failed(self) -> list[Any]:
        return [r for r in self.records if (_failed(r) and not _limit(r)) or _nothing(r)] + self.unconverted()

    def unconverted(self) -> list[logging.LogRecord]:
        """Functions Dynamo would not start compiling (a generator): its soft-failure log names one that has no
        compilation record at all (a compile that failed or was refused has its own record)."""
        recorded = {(r.co_name, r.co_filename, int(r.co_firstlineno or 0)) for r in self.records}
        out = []
        for r in self.logs:
            m = re.match(r"WON'T CONVERT (\S+) (.+) line (\d+)", r.getMessage()) if r.name == _CONVERTER else None
            if m and (m[1], m[2], int(m[3])) not in recorded:
                out.append(r)
        return out

    def refused(self) -> list[Any]:
        return [r for r in self.records if _limit(r)]

    def graph_breaks(self) -> list[str]:
        """Each graph break Dynamo logged once: a frame it gives up on logs the break of its compile's earlier
        attempt again (``RETRY``), which is not another break."""
        # a break at a place logged before reads "Graph break (user stack suppressed ...) in user code at"
        logged = [
            (getattr(r, "compile", ""), r.getMessage())
            for r in self.logs
            if r.name.endswith(".__graph_breaks") and r.getMessage().startswith("Graph break")
        ]
        return distinct_breaks([(c, m) for c, m in logged if " in user code at " in m])

    def recompile_guards(self) -> list[list[str]]:
        """Per logged recompile, the guards Dynamo logged failing (one per graph it checked)."""
        out = []
        for message in self.messages("recompiles"):
            if not message.startswith("Recompiling function"):
                continue
            failed = [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]
            out.append([f.split(": ", 1)[1].split("  #")[0].strip() for f in failed if ": " in f])
        return out


_open: list[DynamoAccount] = []  # the accounts a counting backend's graphs are counted into


def counting_backend(gm: Any, example_inputs: Any) -> Any:
    """``aot_eager`` that counts each forward and backward graph it compiles into every open
    ``DynamoAccount``: the oracle for backward rows, which Dynamo's records miss where AOTAutograd compiles
    the backward inside its forward's compile."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    def counted(kind: str) -> Any:
        def compiler(graph: Any, inputs: Any) -> Any:
            for account in _open:
                account.graphs[kind] += 1
            return boxed_nop(graph, inputs)

        return compiler

    return aot_autograd(fw_compiler=counted("forward"), bw_compiler=counted("backward"))(gm, example_inputs)


def _keep_records(size: int | None) -> None:
    """Dynamo's list of records held to ``size`` (None: its default, 64), by its own setter."""
    import torch._dynamo.utils as dynamo_utils

    default: int = getattr(dynamo_utils, "DEFAULT_COMPILATION_METRICS_LIMIT", 64)
    dynamo_utils.set_compilation_metrics_limit(size or default)


def _failed(r: Any) -> bool:
    return bool(getattr(r, "fail_type", None)) and not getattr(r, "has_guarded_code", False)


def _nothing(r: Any) -> bool:  # "No ops traced": the skip is cached as guarded code, but no graph exists
    return bool(r.has_guarded_code) and getattr(r, "graph_op_count", 0) is None and getattr(r, "is_forward", True)


def _limit(r: Any) -> bool:
    return "recompile limit" in (getattr(r, "fail_reason", None) or "").lower()


def distinct_breaks(logged: list[tuple[str, str]]) -> list[str]:
    """The messages of (compile attempt, graph-break message) pairs in log order, less each that follows the same
    break (the same first line of the break reported) logged by its own compile: a ``RETRY``, or a later attempt
    (``3/1_1``: Dynamo restarted its analysis after the break, and met it again)."""
    out, last, last_attempt = [], None, 0
    for trace, message in logged:
        compile_id, _, attempt = trace.partition("_")
        reported = message.partition("Graph Break Reason:")[2]
        reported = reported.partition("Graph break encountered:")[2] or reported.partition(":\n\n")[2] or reported
        kind = next((line.strip() for line in reported.splitlines() if line.strip()), "")
        again = RETRY in message or int(attempt or 0) > last_attempt
        if not (again and compile_id and (compile_id, kind) == last):
            out.append(message)
        last, last_attempt = (compile_id, kind), int(attempt or 0)
    return out


def compiling() -> str:
    """The compile attempt being traced now (``3/1``, a restarted one ``3/1_1``), '' outside one."""
    try:
        from torch._guards import CompileContext

        trace = CompileContext.current_trace_id()
    except (ImportError, AttributeError):  # another torch: every logged break counts
        return ""
    return str(trace) if trace is not None else ""
