"""Which call a cause is about, in words: the keyword arguments added or dropped since the graph it is told
against, the case a "mark before the first call" fix goes on where that graph was not the first call's
(an input given only later, evaluation after training), and torch's own call of a tensor subclass's
``__torch_function__``, compiled on its own."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.sources.frames import MORE

Signature = Sequence[tuple[str, str]]


def in_case(cause: Cause, graphs: Sequence[tuple[str, Signature]], best: str) -> Cause:
    """A mark told "before the first call" where the graph it would have kept was compiled for another case
    than the first call's (Mixtral's loss: no attention_mask first, then one; evaluation after training): the
    mark goes on the first call of that case (``before the first call with attention_mask given``, ``in eval
    mode with grad mode off``), else it saves nothing."""
    ids = {g: s for g, s in graphs}  # most recent first, and an input passed as None is left out of a signature
    oldest = min(ids, key=lambda g: int(g.rpartition("/")[2]) if g.rpartition("/")[2].isdigit() else 0, default="")
    first, then = dict(ids.get(oldest, ())), dict(ids.get(best, ()))
    given = [n for n in then if n not in first and re.fullmatch(r"\w+", n)]
    case = [f"with {' and '.join(given)} given"] if given else []
    case += ["in eval mode"] if _eval(then) and not _eval(first) else []
    case += ["with grad mode off"] if then.get("grad mode") == "off" != first.get("grad mode") else []
    if "mark the dimension dynamic before the first call (" not in cause.fix or not case or best == oldest:
        return cause
    return dataclasses.replace(
        cause, fix=cause.fix.replace("before the first call (", f"before the first call {' '.join(case)} (")
    )


def _eval(signature: Mapping[str, str]) -> bool:
    """Whether a graph's inputs show a module in eval mode."""
    return any(d.endswith("(eval)") for d in signature.values())


def _keyword(name: str) -> str:
    """``kwargs['attention_mask']`` -> ``attention_mask`` (a keyword through **kwargs); else the input."""
    m = re.match(r"^\w+\['([^']+)'\]", name)
    return m[1] if m else name.split("[")[0].split(".")[0]


def keywords_named(cause: Cause, before: Signature | None, now: Signature) -> Cause:
    """A change in the number of keyword arguments, said by name where the graph's inputs are known:
    ``attention_mask is now passed`` (generate passes it for a padded batch only)."""
    if not cause.words.startswith("a keyword argument was added or dropped (") or before is None:
        return cause  # the words already name it, or the graph's inputs are unknown
    was, new = ({_keyword(n) for n, _ in sig if n not in (MORE, "grad mode")} for sig in (before, now))
    added, dropped = sorted(new - was), sorted(was - new)
    if not (added or dropped):
        return cause
    said = [f"{', '.join(added)} now passed"] if added else []
    said += [f"{', '.join(dropped)} no longer passed"] if dropped else []
    return dataclasses.replace(cause, words=f"a keyword argument was added or dropped: {'; '.join(said)}")


def torch_function_cause(causes: Sequence[Cause]) -> Cause:
    """The causes of a tensor subclass's ``__torch_function__`` compiled as a frame of its own (a graph break
    inside it): its inputs are the op torch runs and that op's arguments, none the user passes, so each op is
    a graph of its own; the fix is the break, after which Dynamo inlines it into the caller's graph."""
    return Cause(
        "torch_function",
        "torch calls __torch_function__ once per op on your tensor subclass (func, args and kwargs are that op "
        "and its arguments, not yours to pass): compiled as a frame of its own, each op, and each way it is "
        "called, is a graph of its own",
        "\n".join(dict.fromkeys(c.guard for c in causes if c.guard)),
        "remove the graph break inside __torch_function__ (see its fix): Dynamo then traces it inside the "
        "caller's graph, with no graph per op",
    )
