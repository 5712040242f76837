"""A library function Dynamo compiled as a function of its own while a compiled function ran a part it could
not compile (a graph break's call runs eagerly, and Dynamo compiles each function that call reaches on its
own): its inputs are what the library built from the user's, so a fix naming them asks for the impossible.
Its causes keep their words; their fixes say what the user can change instead."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from tpu_lab.compile.causes.guard_sizes import DROP_LAST
from tpu_lab.compile.causes.instances import MARK_SAID
from tpu_lab.compile.causes.source_file import enclosing_def
from tpu_lab.compile.sources.frames import RESUME, FunctionKey
from tpu_lab.compile.sources.packages import is_library, package_of
from tpu_lab.compile.watching.watch_table import WatchRow


def said_at_the_call(
    keys: Iterable[FunctionKey],
    rows: tuple[WatchRow, ...],
    under: Mapping[Any, set[FunctionKey]],
    code_of: Mapping,
    caller_of: Mapping[FunctionKey, str],
    passed: Mapping[FunctionKey, tuple[tuple[str, str, str], ...]] | None = None,
) -> None:
    """``rows`` (one per key, in order) of a library function that another library's code called inside
    another row's call, fixed in place; ``under``: a code -> the functions compiled in its calls; ``code_of``:
    a function -> its code; ``caller_of``: a function -> the package whose code called it ("": the user's,
    through torch's own frames: a compiled ``opt.step()``'s step, whose optimizer the user holds); ``passed``: a
    function -> its inputs a caller holds too, by that caller's name (``dynamo_source``'s ``passed_in``)."""
    keys = list(keys)
    outers = sorted(set(keys), key=lambda k: k.name.startswith(RESUME))  # the function itself, before its parts
    forward = [o for o in outers if "(backward)" not in o.name]
    for key, row in zip(keys, rows, strict=True):
        stdlib = package_of(key.filename) == "stdlib"  # copy's __newobj__ under a deepcopy: Python's own machinery
        around = [o for o in outers if o != key and key in under.get(code_of.get(o), ())]
        # the innermost of them: the one the others' calls reached (the user's helper, not the forward around it)
        outer = max(around, key=lambda o: sum(o in under.get(code_of.get(p), ()) for p in around), default=None)
        base = outer.label.split(" after the graph break")[0] if outer is not None else ""
        if outer is None and not key.name.startswith(RESUME):  # called by the user's code: marks by its names
            row.causes = [
                dataclasses.replace(c, fix=_marked_as_called(c.fix, (passed or {}).get(key, ()))) for c in row.causes
            ]
        if outer is None or key.name in (base, outer.name) or key.name.startswith(RESUME):  # itself is no caller
            continue
        if not is_library(key.filename):  # the user's own layer, called by compiled code: its inputs are made there
            top = min(around, key=lambda o: sum(o in under.get(code_of.get(p), ()) for p in around))  # the user's call
            home = enclosing_def(top.filename, top.line)  # a resumed part's own function, by its class
            caller = next((o.name for o in forward if o.filename == top.filename and o.line == home), top.label)
            caller = caller.split(" after the graph break")[0]
            held: dict[str, tuple[str, str]] = {}
            for i, o, w in (passed or {}).get(key, ()):
                if o:  # "": no caller holds it
                    held.setdefault(i, (o, w))  # the first compile's holder: later ones add what it lacked
            row.causes = [dataclasses.replace(c, fix=_marked_where_held(c.fix, held, caller)) for c in row.causes]
        elif caller_of.get(key) or stdlib:
            fix = _fix(key, outer)
            row.causes = [
                dataclasses.replace(c, fix=fix)
                if c.guard
                and c.kind not in ("limit", "flag", "training", "global_state")  # a setting: compiled apart anyway
                and not c.fix.startswith("none needed")
                and _asks_of_it(c.fix)
                else c
                for c in row.causes
            ]


def _marked_where_held(fix: str, held: Mapping[str, tuple[str, str]], caller: str) -> str:
    """The fix's mark on inputs every one of which a caller holds as it is (ColBERT's ``D[0]``, passed on through
    ``self.doc(*D)``): said on the caller's tensors, whose mark reaches this frame; else nothing to mark."""
    said = MARK_SAID.search(fix)
    marks = re.findall(r"maybe_mark_dynamic\(([^,()]+), (\d+)\)", said[0]) if said else []
    if not marks or any(name not in held for name, _ in marks):  # made there: no batch of the user's (an expert's rows)
        return MARK_SAID.sub(_made_by(caller), _LAST_BATCH.sub("", fix))
    calls = "; ".join(f"torch._dynamo.maybe_mark_dynamic({held[n][0]}, {d})" for n, d in marks)
    where = held[marks[0][0]][1]
    return MARK_SAID.sub(
        f"mark the dimension dynamic on the tensor{'s' * (len(marks) > 1)} your code holds in {where} and passes on, "
        f"before the call ({calls}): the same tensor reaches this frame, so the mark does too",
        fix,
        count=1,
    )


def _marked_as_called(fix: str, passed: tuple[tuple[str, str, str], ...]) -> str:
    """The fix's marks on a function the user's code calls, each by the name the user's code holds that tensor
    under (Real-ESRGAN's ``input_tile``, passed to ``forward(x)``); where no caller holds it and the calling
    frame's own variable of that name is another value (TCN's 2-D ``x``, passed as ``x.unsqueeze(0)``), said so."""
    said = MARK_SAID.search(fix)
    if not said or not passed:
        return fix
    held: dict[str, tuple[str, str]] = {}
    for inner, outer, where in passed:
        if not re.match(r"(?:args|kwargs)\[", outer):  # a caller's f(*args): a name a wrapper's would read as
            held.setdefault(inner, (outer, where))  # the first compile's holder
    notes: list[str] = []

    def named(m: re.Match) -> str:
        outer, where = held.get(m[1], (m[1], ""))
        where = "your script" if where == "<module>" else where  # a script's or a notebook cell's top level
        if outer and outer != m[1]:
            notes.append(f"{outer} is the tensor {where} holds, passed in as {m[1]}")
            return f"maybe_mark_dynamic({outer}, {m[2]})"
        if not outer:  # the caller's own variable of that name is another value
            notes.append(
                f"{m[1]} here is the tensor passed in, not the {m[1]} {where} holds: mark what the call passes"
            )
        return m[0]

    marks = re.sub(r"maybe_mark_dynamic\(([^,()]+), (\d+)\)", named, said[0])
    if notes:
        marks = f"{marks[:-1]}; {'; '.join(dict.fromkeys(notes))})"
    return fix[: said.start()] + marks + fix[said.end() :]


_LAST_BATCH = re.compile(
    rf"if this is the last, smaller batch: pad it to \d+ or drop it {re.escape(f'({DROP_LAST})')}; else "
)


def _made_by(caller: str) -> str:
    """In place of a mark on inputs that compiled code made (Autoformer's queries, made in the model's forward):
    a mark inside compiled code raises, and one on the outer input does not reach a frame compiled apart."""
    return f"nothing to mark: these inputs are made inside {caller}'s compiled code, where a mark raises"


def _fix(key: FunctionKey, outer: FunctionKey) -> str:
    package = {"stdlib": "Python's standard library"}.get(package_of(key.filename), package_of(key.filename))
    package = "generated" if package.startswith("<") else package  # a dataclass's own __init__
    caller = outer.label.split(" after the graph break")[0] if outer.name.startswith(RESUME) else outer.name
    return (
        f"nothing of yours to change here: {key.name} is {package} code that {caller} called in a part Dynamo "
        f"could not compile, so Dynamo compiled it as a function of its own, with inputs "
        f"{'the library' if package == 'generated' else package} built from "
        f"yours; fixing that graph break (see its fix) removes these graphs too"
    )


def _asks_of_it(fix: str) -> bool:
    """A fix that asks something of the function's own inputs; one that already says they are a library's
    (``it comes from transformers code ... mark_dynamic is out of reach``) is kept as it is."""
    return "out of reach" not in fix
