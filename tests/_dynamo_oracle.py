"""Dynamo's own account of a run, the oracle for the watch's tests: its compilation records and its
TORCH_LOGS records (recompiles, graph_breaks), and the check that a watch agrees with them."""

import contextlib
import logging
import re
import warnings

import pytest
import torch

from tpu_lab.compile.causes.own_graph import forces_own_graph, per_instance
from tpu_lab.testing.dynamo_account import compiling, distinct_breaks
from tpu_lab.testing.watch_invariants import misplaced_breaks, overcounted, text_violations

_WAS = re.compile(r"\(was ([^;()]+)")  # the earlier value a cause was told against

BACKEND = "eager"


class DynamoLog:
    """Dynamo's own account of one run: its compilation records and its TORCH_LOGS records."""

    def __init__(self) -> None:
        self.records: list[logging.LogRecord] = []
        self.compiling: list[str] = []  # the compile each record was logged in, by position
        self.first = None

    def clear(self) -> None:
        self.records.clear()
        self.compiling.clear()

    def compiles(self) -> int:
        from torch._dynamo.utils import get_compilation_metrics

        found = list(get_compilation_metrics())
        start = next((i + 1 for i, r in enumerate(found) if r is self.first), 0) if self.first else 0
        # a frame that traced no ops keeps a cached skip as guarded code, but has no graph (graph_op_count None)
        graphs = [r for r in found[start:] if r.has_guarded_code and getattr(r, "is_forward", True)]
        return sum(1 for r in graphs if getattr(r, "graph_op_count", 0) is not None)

    def messages(self, artifact: str) -> list[str]:
        return [r.getMessage() for r in self.records if r.name.endswith(f".__{artifact}")]

    def recompile_reasons(self) -> list[str]:
        return [m for m in self.messages("recompiles") if m.startswith("Recompiling function")]

    def graph_breaks(self) -> list[str]:
        logged = zip(self.compiling, self.records, strict=True)
        breaks = [(c, r.getMessage()) for c, r in logged if r.name.endswith(".__graph_breaks")]
        return distinct_breaks([(c, m) for c, m in breaks if "Graph break" in m and "in user code" in m])


@pytest.fixture
def dynamo():
    from torch._dynamo.utils import get_compilation_metrics

    torch._dynamo.reset()
    log = DynamoLog()
    torch._dynamo.utils.set_compilation_metrics_limit(1 << 20)  # Dynamo keeps its newest 64: the oracle keeps all
    found = list(get_compilation_metrics())
    log.first = found[-1] if found else None

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            log.records.append(record)
            log.compiling.append(compiling())

    handler = Keep(logging.DEBUG)
    torch._logging.set_logs(recompiles=True, graph_breaks=True)
    root = logging.getLogger("torch._dynamo")
    root.addHandler(handler)
    yield log
    root.removeHandler(handler)
    torch._logging.set_logs()
    torch._dynamo.utils.set_compilation_metrics_limit(torch._dynamo.utils.DEFAULT_COMPILATION_METRICS_LIMIT)


def check_against_dynamo(w, log, also=(), own=frozenset()):
    """The watch's count equals Dynamo's records; every recompile Dynamo logged is explained by one of the
    guards it logged failing (the watch picks the graph nearest the new inputs, not always the first);
    every graph break it logged is counted. Dynamo logs only the first failed guard per graph: a row may
    name more only where the test says which (``also``: each must appear, and nothing else may); ``own``: the
    compiled function's own ``*args``/``**kwargs`` names, which the words may use."""
    table = w.table
    assert table.total_compiles - sum(r.compiles for r in table if "(backward)" in r.function) == log.compiles()
    logged = []
    for message in log.recompile_reasons():
        failed = [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]
        logged.append([f.split(": ", 1)[1].split("  #")[0].strip() for f in failed if ": " in f])
    ours = [g for r in table for c in r.causes for g in c.guard.splitlines()]  # a merged cause: one per line
    for failures in logged:
        assert any(g in failures for g in ours), (failures, ours)
    every = {f for failures in logged for f in failures}
    explained = sum(c.count for r in table for c in r.causes if c.kind != "limit" and set(c.guard.splitlines()) & every)
    # a None/value case counts the compile it forces even where Dynamo logged another guard of it first (a size
    # change said with it, uncounted); so does an instance's own int (a layer's index: a graph per instance)
    explained += sum(
        c.count
        for r in table
        for c in r.causes
        if (forces_own_graph(c) or per_instance(c)) and not set(c.guard.splitlines()) & every
        if any(not o.count and set(o.guard.splitlines()) & every for o in r.causes)
    )
    # a refusal at the limit is logged as a recompile too, each time (where it raises, every later call is one)
    explained += sum(
        r.refused for r in table if any(c.kind == "limit" and set(c.guard.splitlines()) & every for c in r.causes)
    )
    assert explained == len(logged)  # one cause from a logged failed guard per recompile Dynamo logged
    extra = [g for g in ours if g not in every]
    assert all(any(a in g for a in also) for g in extra), (extra, every)  # no guard nobody expected
    assert all(any(a in g for g in ours) for a in also), (also, ours)  # each expected one is named
    assert not (over := overcounted([r for r in table if "(backward)" not in r.function])), over
    assert sum(b.count for b in table.breaks) == len(log.graph_breaks())
    assert not (wrong := misplaced_breaks(table, log.graph_breaks())), wrong  # and each at the line Dynamo logged
    text = table.to_text()  # printed, nothing is lost: every row's causes and guards whole, in it or under the table
    assert not (lost := [x for r in table for x in (r.cause, *r.shown_guard.splitlines()) if x not in text]), lost
    for r in table:  # a cause said once with each earlier value (self.p changed 3 times (was 0.0, 0.1, 0.2) keeps each
        assert all(c.words in r.cause or _WAS.search(c.words)[1] in r.cause for c in r.causes), (r.cause, r.causes)
    failed = [c.words for r in table for c in r.causes if c.kind == "internal"]  # tpu_lab's own bug, said on a row
    assert not failed, failed
    assert (found := text_violations(table, set(own))) == {"d_names": [], "e_apis": []}, (
        found
    )  # nothing unresolved or unreal


def only_causes(w, name):
    return [c for r in w.table.by_function(name) for c in r.causes if c.kind not in ("first", "dynamic")]


@contextlib.contextmanager
def printed_setting_applied(setting):
    """A fix printed as ``torch._dynamo.config.<a set>.add(...)``, run as printed on a fresh Dynamo; the set
    is restored after, so no other test sees it."""
    held = getattr(torch._dynamo.config, re.match(r"torch\._dynamo\.config\.(\w+)\.add\(", setting)[1])
    before = set(held)
    torch._dynamo.reset()
    try:
        exec(setting, {"torch": torch, "logging": logging, "warnings": warnings})  # the fix as printed
        yield
    finally:
        held.clear()
        held.update(before)


def watched_clean(run):
    """``run`` inside a watch, from a fresh Dynamo, with every invariant checked against Dynamo's own account of
    the same run (``tpu_lab.testing.watch_invariants``): (the table, the account)."""
    import tpu_lab as tl
    from tpu_lab.testing.dynamo_account import DynamoAccount
    from tpu_lab.testing.watch_invariants import violations

    torch._dynamo.reset()
    with DynamoAccount() as account, tl.watch() as w:
        run()
    assert violations(w.table, account) == {k: [] for k in violations(w.table, account)}, w.table.to_text()
    return w.table, account
