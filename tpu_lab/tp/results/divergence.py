"""Where the ranks of a launch compiled differently, in words: a rank whose inputs differ from the others'
("rank 1: forward input_ids i64[1, 96] where rank 0 had i64[1, 64]"), a rank that compiled a function the
others never did (or never compiled one they did), a rank that kept compiling after the others stopped,
a rank that hit the recompile limit alone, graph breaks on some ranks only, a rank that ended mid-compile;
each with the likely cause and the fix. Pure over ``RankTable``s (plain data read from the ranks' files).
"""

from __future__ import annotations

from collections.abc import Sequence

from tpu_lab._report import Finding
from tpu_lab.tp.results.live_compiles import rank_span
from tpu_lab.tp.results.rank_table import RankTable, split_signature

KEPT_COMPILING_S = 1.0
"""A rank whose last compile ended this long after every other rank's last one "kept compiling"."""
PER_STEP = 4
"""Graphs of one function on every rank from which "every rank recompiles it" is said."""
MAX_FINDINGS = 12
"""Findings kept (the rest are summed up in one line): a huge divergence stays readable."""

SHAPE_CAUSE = (
    "an input whose size depends on the rank: its data shard, a prompt or batch chosen per rank, "
    "or padding that differs per rank; with dynamic=False (torch_tpu's rule) each size is its own graph, "
    "and the other ranks wait in the next collective while this one compiles"
)
SHAPE_FIX = (
    "give every rank the same shapes: pad inputs to shared bucket lengths (tl.compare_policies), "
    "split data into equal shards, or pick the prompt before the rank is known"
)
VALUE_CAUSE = (
    "a Python number that differs per rank (e.g. the rank itself) is a constant to Dynamo: one graph per value"
)
VALUE_FIX = "pass it as a tensor, or keep it out of the compiled function"


def divergence(tables: Sequence[RankTable]) -> list[Finding]:
    """Every divergence between ranks, most telling first, bounded to ``MAX_FINDINGS``."""
    seen = [t for t in tables if t.seen]
    found: list[Finding] = []
    for t in tables:
        if t.live.error:
            found.append(Finding("rank-watch-failed", "warning", f"rank {t.rank}: {t.live.error}", "See its output."))
        if t.live.function and not t.live.done:
            what = t.live.function + (f" with {t.live.inputs}" if t.live.inputs else "")
            found.append(
                Finding(
                    "rank-died-compiling",
                    "error",
                    f"rank {t.rank} ended while compiling {what}; its table holds the compiles before it",
                    "Look at its output: a crash or kill during a compile (memory?) ends the rank there.",
                )
            )
    if len(tables) > 1:
        found += _silent_ranks(tables)
        if seen:
            found += _by_function(tables)
            found += _kept_compiling(seen)
            found += _limit(tables)
            found += _breaks(seen)
    found += _per_step(tables)
    if len(found) > MAX_FINDINGS:
        rest = len(found) - MAX_FINDINGS + 1
        found = found[: MAX_FINDINGS - 1]
        found.append(
            Finding("rank-more", "info", f"... and {rest} more divergence(s)", "See result.compiles.to_dict().")
        )
    return found


def _silent_ranks(tables: Sequence[RankTable]) -> list[Finding]:
    busy = [t.rank for t in tables if t.compiles]
    idle = [t for t in tables if not t.compiles]
    if not busy or not idle:
        return []
    out = []
    for t in idle:
        if t.dynamo_disabled:
            why = "Dynamo was disabled on it (torch._dynamo.config.disable = True)"
        elif not t.seen:
            why = "it never imported Dynamo: its code took a path without torch.compile"
        elif not t.live.done:
            why = "it ended before its code finished (see its state and output), so it may have stopped first"
        else:
            why = "its compiled functions never ran, or ran under torch.compiler.disable"
        out.append(
            Finding(
                "rank-compiled-nothing",
                "warning",
                f"rank {t.rank} compiled nothing where {rank_span(busy)} compiled {_graphs(tables, busy)}: {why}",
                "Make every rank run the same compiled code: a rank-dependent branch or a disable on one rank "
                "means different programs per rank (mismatched collectives on a TPU).",
            )
        )
    return out


def _graphs(tables: Sequence[RankTable], ranks: Sequence[int]) -> str:
    counts = sorted({tables[r].compiles for r in ranks})
    return f"{counts[0]} graph(s)" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} graphs"


def _by_function(tables: Sequence[RankTable]) -> list[Finding]:
    compiling = [t for t in tables if t.compiles]
    out = []
    functions = list(dict.fromkeys(f for t in compiling for f in t.functions()))
    for fn in functions:
        groups: dict[frozenset[str], list[int]] = {}
        for t in compiling:
            groups.setdefault(frozenset(t.signatures(fn)), []).append(t.rank)
        if len(groups) < 2:
            continue
        # the shared set: held by the most ranks (ties: the one rank 0 is in)
        common = max(groups, key=lambda g: (len(groups[g]), -min(groups[g])))
        for sigs, ranks in groups.items():
            if sigs == common:
                continue
            out.append(_differs(fn, ranks, sigs, common, groups[common]))
    return out


def _differs(fn: str, ranks: list[int], mine: frozenset[str], common: frozenset[str], others: list[int]) -> Finding:
    who, them = rank_span(ranks), rank_span(others)
    name = fn.split(" (", 1)[0]
    if not mine:
        return Finding(
            "rank-missing-function",
            "warning",
            f"{who} never compiled {fn}, which {them} compiled ({len(common)} graph(s))",
            "A rank-dependent branch skips it there, or it runs under torch.compiler.disable on that rank; "
            "make every rank run the same compiled code.",
        )
    extra, missing = sorted(mine - common), sorted(common - mine)
    if not common:
        return Finding(
            "rank-extra-function",
            "warning",
            f"{who} compiled {fn} ({len(mine)} graph(s)), which {them} never compiled",
            "A rank-dependent branch runs it there only; make every rank run the same compiled code.",
        )
    words, kinds = [], set()
    for sig in extra[:3]:
        closest = max(missing or sorted(common), key=lambda c: _alike(sig, c))
        diff = _input_diff(sig, closest)
        kinds |= {k for _, _, _, k in diff}
        shown = ", ".join(_difference_words(_name(n), a, b, them) for n, a, b, _ in diff[:3]) or f"inputs {sig}"
        words.append(f"{who}: {name} {shown}")
    if len(extra) > 3:
        words.append(f"and {len(extra) - 3} more input signature(s) only {who} compiled")
    if not extra:
        words.append(f"{who}: {name} never compiled the inputs {missing[0]} that {them} compiled")
    cause, fix = (VALUE_CAUSE, VALUE_FIX) if kinds == {"value"} else (SHAPE_CAUSE, SHAPE_FIX)
    return Finding("rank-inputs-differ", "warning", "; ".join(words) + f". Likely cause: {cause}", fix)


def _kept_compiling(seen: Sequence[RankTable]) -> list[Finding]:
    out = []
    for t in seen:
        others = [o for o in seen if o.rank != t.rank]
        if not others or t.live.last_at is None or t.compiles <= max(o.compiles for o in others):
            continue
        their_last = max((o.live.last_at or 0.0) for o in others)
        late = t.live.last_at - their_last
        if late >= KEPT_COMPILING_S:
            ranks = [o.rank for o in others]
            out.append(
                Finding(
                    "rank-kept-compiling",
                    "warning",
                    f"rank {t.rank} kept compiling after {rank_span(ranks)} stopped: {t.compiles} compiles against "
                    f"at most {max(o.compiles for o in others)}, its last ({t.live.last}) {late:.0f} s after theirs; "
                    "they waited for it",
                    "See its table (result.compiles[rank]) for why each compile happened; give every rank the "
                    "same shapes.",
                )
            )
    return out


def _limit(tables: Sequence[RankTable]) -> list[Finding]:
    hit = [t.rank for t in tables if t.limit_hit]
    if not hit or len(hit) == len(tables):
        return []
    fns = sorted({r["function"] for r in (tables[hit[0]].rows) if r.get("limit_hit")})
    return [
        Finding(
            "rank-limit",
            "warning",
            f"{rank_span(hit)} hit Dynamo's recompile limit ({', '.join(fns)}) and ran uncompiled; the others did not",
            "Those ranks saw more input shapes than the rest: give every rank the same shapes.",
        )
    ]


def _breaks(seen: Sequence[RankTable]) -> list[Finding]:
    where: dict[str, list[int]] = {}
    for t in seen:
        for b in t.graph_breaks:
            where.setdefault(f"{b.get('words')} at {b.get('where')}", []).append(t.rank)
    return [
        Finding(
            "rank-graph-break",
            "warning",
            f"{rank_span(ranks)} broke the graph ({text}) where the others did not",
            "A rank-dependent path (e.g. .item() or print on one rank) breaks the graph there only.",
        )
        for text, ranks in where.items()
        if len(set(ranks)) < len(seen)
    ]


def _per_step(tables: Sequence[RankTable]) -> list[Finding]:
    if not tables or not all(t.compiles for t in tables):
        return []
    out = []
    for fn in tables[0].functions():
        counts = [len(t.signatures(fn)) for t in tables]
        if min(counts) >= PER_STEP:
            out.append(
                Finding(
                    "rank-recompiles",
                    "info",
                    f"every rank compiled {fn} for {min(counts)}+ input signatures: the run recompiles as inputs change",
                    "See a rank's table (result.compiles[0]) for the causes; pad to buckets.",
                )
            )
    return out


def _name(name: str) -> str:
    """``kwargs['input_ids']`` (a keyword argument, as the watcher names it) -> ``input_ids``."""
    return name[8:-2] if name.startswith("kwargs['") and name.endswith("']") else name


def _difference_words(name: str, mine: str, theirs: str, them: str) -> str:
    if theirs == ABSENT:
        return f"{name} {mine}, an input {them} did not pass"
    if mine == ABSENT:
        return f"no {name}, which {them} passed as {theirs}"
    return f"{name} {mine} where {them} had {theirs}"


ABSENT = "absent"


def _alike(a: str, b: str) -> int:
    x, y = split_signature(a), split_signature(b)
    return sum(x.get(k) == v for k, v in y.items())


def _input_diff(mine: str, theirs: str) -> list[tuple[str, str, str, str]]:
    """(input, mine, theirs, kind) per input that differs; kind "value" for Python numbers, else "shape"."""
    x, y = split_signature(mine), split_signature(theirs)
    out = []
    for name in dict.fromkeys([*x, *y]):
        a, b = x.get(name, ABSENT), y.get(name, ABSENT)
        if a != b:
            scalar = a.split(" ", 1)[0] in ("int", "float") and b.split(" ", 1)[0] in ("int", "float")
            out.append((name, a, b, "value" if scalar else "shape"))
    return out
