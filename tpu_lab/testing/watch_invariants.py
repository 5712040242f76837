"""Invariants that hold for a ``tl.watch()`` over ANY code, checked against Dynamo's own account of the
same run (its compilation records and its ``TORCH_LOGS`` records): no hand-written expectation, so they
can run over corpora of real code nobody here wrote (``benchmarks/watch_corpus.py``, the tests).

(a) every compilation record is shown exactly once: compiled graphs as row compiles, failed compiles as
    failed lines, refusals at the recompile limit as limit causes; and where the code compiled with
    ``counting_backend``, every backward graph AOTAutograd compiled is a backward row's compile (Dynamo keeps
    no record of a backward compiled inside its forward's compile, so the backend counts them);
(b) the graph breaks equal what ``TORCH_LOGS=graph_breaks`` logs, in all and at each file:line it logs (or
    moved from a library's line to the user's line that called it), each break once: when Dynamo gives up on a
    frame after logging its break, it logs that break again ("Failed to handle graph break gracefully"), which
    is the same break (``dynamo_account.distinct_breaks``);
(c) each recompile's logged failed guard is explained, or explicitly marked not translated;
(d) no printed cause or fix holds an unresolved internal name (``___stack0``, ``L['x']``, ``args[0]``
    where the user's code has a name, a registry key, an absolute site-packages path);
(e) every torch API or config a fix names exists in the installed torch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tpu_lab.compile.causes.cause import split_top
from tpu_lab.testing.dynamo_account import DynamoAccount

INVARIANTS = ("a_records", "b_breaks", "c_guards", "d_names", "e_apis")
_INTERNAL = re.compile(
    r"torch_dynamo_resume_in_|___stack\d|\(\d{9,}, |the value carried over the graph break(?=[.\[])|\bthe carried value\b|\b_*stack\d+_\d|\bL\[['\"]|\bG\[['\"]|\b(?P<star>\w+)(?:\[\d+\]|\[['\"])|\bGB\d{4}\b|/(?:site|dist)-packages/|\b___\w+"
)
_PLACEHOLDER = re.compile(r"\bthe carried value\b|the value carried over the graph break(?=[.\[])")
_SHOWN_PLACE = re.compile(r"[^/\s]+\.py:\d+$")
_LOGGED_PLACE = re.compile(r" in user code at (.+?):(\d+)$", re.M)
_STARRED = ("args", "kwargs")  # a wrapper's *args/**kwargs: internal unless the user's own function takes them


def violations(table: Any, account: DynamoAccount) -> dict[str, list[str]]:
    """Each invariant's violations for one watched run (``table``: the watch's ``WatchTable``)."""
    out: dict[str, list[str]] = {k: [] for k in INVARIANTS}
    rows = list(table.rows)
    forward = [r for r in rows if "(backward)" not in r.function]
    compiles = sum(r.compiles for r in forward)
    failed = sum(getattr(r, "failed", 0) for r in rows)
    refusals = sum(getattr(r, "refused", 0) for r in rows)
    if compiles != len(account.compiled()):
        out["a_records"].append(f"{compiles} compiles shown, Dynamo recorded {len(account.compiled())} graphs")
    if failed != len(account.failed()):
        reasons = [str(getattr(r, "fail_reason", None) or r.getMessage()).splitlines()[0] for r in account.failed()]
        out["a_records"].append(f"{failed} failed compiles shown, Dynamo recorded {len(account.failed())}: {reasons}")
    if refusals != len(account.refused()):
        out["a_records"].append(f"{refusals} limit refusals shown, Dynamo recorded {len(account.refused())}")
    out["a_records"] += overcounted(forward)
    if account.graphs["forward"]:  # the code compiled with counting_backend: its backward graphs are known
        backward = sum(r.compiles for r in rows if "(backward)" in r.function)
        if backward != account.graphs["backward"]:
            out["a_records"].append(
                f"{backward} backward compiles shown, AOTAutograd compiled {account.graphs['backward']} backward graphs"
            )
    breaks = sum(b.count for b in table.breaks)
    if breaks != len(account.graph_breaks()):
        out["b_breaks"].append(
            f"{breaks} graph breaks shown, TORCH_LOGS=graph_breaks logged {len(account.graph_breaks())}"
        )
    out["b_breaks"] += misplaced_breaks(table, account.graph_breaks())
    shown = [(g, c) for r in rows for c in r.causes for g in c.guard.splitlines()]
    for guards in account.recompile_guards():
        if not any(g in guards for g, _ in shown):
            out["c_guards"].append(f"logged guard not shown: {guards}")
    for g, c in shown:
        if c.kind == "verbatim" and "not translated" not in c.words:
            out["c_guards"].append(f"untranslated guard not marked: {g}")
    out["c_guards"] += [c.words for r in table.rows for c in r.causes if c.kind == "internal"]  # tpu_lab failed
    out.update(text_violations(table, own_starred(account.records)))
    return out


def misplaced_breaks(table: Any, logged: list[str]) -> list[str]:
    """Places whose breaks the watch counts otherwise than Dynamo logged them there (file name and line): the
    right total split wrongly over two lines still sends the user to the wrong line. The one move allowed is
    from a library's line (torch's polyfill of ``map``, an optimizer's own check) to the user's line that
    called it: so a user's line shows at least, and a library's line at most, what Dynamo logged there."""
    from collections import Counter

    from tpu_lab.compile.sources.packages import is_library

    shown: Counter[str] = Counter()
    library: dict[str, bool] = {}
    for b in table.breaks:
        if (b.where or "").startswith("cell "):
            return []  # a notebook cell's place ("cell In[3], line 2"): Dynamo logs a temporary file for it
        key = m[0] if (m := _SHOWN_PLACE.search(b.where or "")) else repr(b.where)
        shown[key] += b.count
        library[key] = "/" in (b.where or "")  # short_path: a package's file from its package on, the user's bare
    heard: Counter[str] = Counter()
    for text in logged:
        if m := _LOGGED_PLACE.search(text):
            heard[key := f"{Path(m[1]).name}:{m[2]}"] += 1
            library[key] = is_library(m[1])
    return [
        f"{k}: {shown[k]} graph breaks shown, {heard[k]} logged"
        for k in sorted(shown | heard)
        if (shown[k] > heard[k] if library[k] else shown[k] < heard[k])
    ]


def overcounted(rows: list[Any]) -> list[str]:
    """Rows whose causes count more compiles than the row made: each compile is counted once, under one of
    its causes (the others are said with it), so the summary's counts add up to the total."""
    out = []
    for r in rows:
        counted = sum(c.count for c in r.causes if c.kind not in ("dynamic", "limit", "failed"))
        if counted > r.compiles:
            out.append(f"{r.function}: {counted} compiles counted in its causes, {r.compiles} made")
    return out


def own_starred(records: list[Any]) -> set[str]:
    """The ``*args``/``**kwargs`` names of the user's own compiled functions in ``records`` (read from their
    source): there ``args[0]`` is the user's own name for an input, not a wrapper's that hides one."""
    import ast

    from tpu_lab.compile.sources.packages import is_library

    names: set[str] = set()
    for r in records:
        file, line = getattr(r, "co_filename", "") or "", getattr(r, "co_firstlineno", 0)
        if not file.endswith(".py") or is_library(file):
            continue
        try:
            tree = ast.parse(Path(file).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and line in (
                node.lineno,
                *(d.lineno for d in node.decorator_list),
            ):
                names |= {a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None}
                # a plain parameter of that name is the user's too (__torch_function__(cls, func, types, args=()))
                names |= {a.arg for a in (*node.args.args, *node.args.kwonlyargs) if a.arg in _STARRED}
    return names


def text_violations(table: Any, own: set[str] = frozenset()) -> dict[str, list[str]]:  # type: ignore[assignment]
    """Invariants (d) and (e), which need only the table: what it prints is resolved and real. ``own``: the
    user's own ``*args``/``**kwargs`` names (``own_starred``), which are theirs to read."""
    from tpu_lab.compile.sources.dynamo_catalog import unresolved_names

    out: dict[str, list[str]] = {"d_names": [], "e_apis": []}
    # a guard shown as Dynamo's own text is marked not translated, and counted apart (``not_translated``)
    texts = [(c.words, c.fix) for r in table.rows for c in r.causes if c.kind != "verbatim"]
    texts += [(b.words, b.fix) for b in table.breaks]
    for words, fix in texts:
        for text in (words, fix):
            for m in _INTERNAL.finditer(text or ""):
                if m["star"] is None or (m["star"] in _STARRED and m["star"] not in own):
                    out["d_names"].append(f"{m[0]!r} in: {text[:160]}")
                    break
        if fix and (missing := unresolved_names(fix)):
            out["e_apis"].append(f"{missing} in fix: {fix[:160]}")
    for row in table.rows:  # what Dynamo made dynamic is named as the code names it, never as a graph input's
        if hole := _PLACEHOLDER.search(row.signature):  # an input carried over a break is named as its line names it
            out["d_names"].append(f"{hole[0]!r} among the inputs: {row.signature[:160]}")
        roots = {part.split(": ", 1)[0].split("[")[0].split(".")[0] for part in row.signature.split(", ")}
        for item in filter(None, split_top(row.dynamic or "")):
            name = item.rsplit(" dim ", 1)[0]
            flat = [rf"{re.escape(r)}(?:_\d+)+" for r in roots if r.isidentifier()]  # x_0: a flattened x[0]
            if any(re.fullmatch(f, name) for f in [*flat, r"(?:kwargs|args)_\w+", r"_*stack\d+(?:_\d+)*"]):
                out["d_names"].append(f"{name!r} made dynamic: a graph's input name, not the code's")
            elif any(g != name and _flat(g) == _flat(name) for g in re.findall(r"tensor '(.+?)' ", row.shown_guard)):
                out["d_names"].append(f"{name!r} made dynamic: its guard names it otherwise")  # enc.data_ids
    return out


def _flat(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def not_translated(table: Any) -> list[str]:
    """Guards the watch showed as Dynamo's own text (counted by the corpus benchmark, not a violation)."""
    return [c.guard for r in table.rows for c in r.causes if c.kind == "verbatim"]
