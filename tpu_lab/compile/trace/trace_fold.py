"""One process's TORCH_TRACE log folded into the ``WatchTable`` the live watch gives: each compile becomes
the ``Capture`` the live source would have heard, built from what the log holds, and goes through the
same fold (``watching.fold``) and the same words. What only the live process could read (the values
behind a guard now, a module's parameter names, refused calls at the recompile limit) is said, not guessed.
"""

from __future__ import annotations

import linecache
import re
from types import SimpleNamespace
from typing import Any

from tpu_lab.compile.causes.break_words import graph_break_words
from tpu_lab.compile.sources.dynamo_limit import limit_from_text, raises_of
from tpu_lab.compile.sources.dynamo_pins import pin_at
from tpu_lab.compile.sources.dynamo_records import is_failed, is_limit_refusal
from tpu_lab.compile.sources.dynamo_source import LIMIT_TRIGGER
from tpu_lab.compile.sources.frames import (
    RESUME,
    Capture,
    FunctionKey,
    Signature,
    carried_name,
    where_label,
)
from tpu_lab.compile.sources.packages import USER, is_library, is_pipeline, package_of, passes_through, short_path
from tpu_lab.compile.sources.tensor_text import layout_of, tensor_text
from tpu_lab.compile.trace.trace_log import CompileLog, ProcessLog
from tpu_lab.compile.watching.fold import Fold
from tpu_lab.compile.watching.watch_table import WatchTable

_LOCAL = re.compile(
    r"^\| \+- GuardManager: source=L\['(?P<name>\w+)'\], accessed_by=FrameLocalsGuardAccessor\(key='\w+', "
    r"framelocals_idx=(?P<idx>\d+)\), type=<class '(?P<type>[\w.]+)'>"
)
_EXPR = re.compile(r"\+- [A-Z_]+: (?P<expr>.*?)(?:\s+#.*)?$")
_WRAPPERS = ("inner", "wrapper", "wrapped_func", "_fn", "forward")
LIMIT_WHERE = (
    "the limit is {n} (torch._dynamo.config.recompile_limit, or this function's own torch.compile(..., "
    "recompile_limit=): a log does not say which)"
)
NOT_LOGGED = (("inputs", "not in the log"),)
POSITIONAL = "input {n}"
"""A compiled module's positional input: its ``forward``'s parameter names are not in the log."""


def fold_log(log: ProcessLog) -> WatchTable:
    """The table of one process's compiles, as the live watch would have shown it."""
    fold = Fold(started=log.first_at)
    graphs: dict[str, Signature] = {}
    last: dict[FunctionKey, Signature] = {}
    functions: dict[str, FunctionKey] = {}  # Dynamo's frame id -> the function
    for c in log.compiles.values():
        if c.record is None:
            continue  # started, never recorded: the log ends inside it (see ProcessLog.unfinished)
        cap = capture_of(c, graphs, last)
        record = SimpleNamespace(**c.record)
        frame = c.compile_id.split("/")[0]
        if is_limit_refusal(record):  # logged with no function: the frame's earlier compiles name it
            key = functions.get(frame, cap.function)
            limit = limit_from_text(record.fail_reason) or cap.limit_value  # a refusal that raised states none
            where = LIMIT_WHERE.format(n=limit) if limit is not None else ""
            refusal = cap._replace(function=key, trigger=LIMIT_TRIGGER, limit=where, raises=raises_of(record))
            fold.refused(refusal._replace(limit_value=limit))
            continue
        functions.setdefault(frame, cap.function)
        if is_failed(record):
            fold.failed(cap, record)
        else:
            guards = [m["expr"] for g in c.guards if (m := _EXPR.search(g))]
            earlier = next(
                (k for k in reversed(last) if k.name == cap.function.name and k.filename != cap.function.filename), None
            )
            fold.compiled(
                cap, record, guards if c.guards else None, _scalars(c, cap), earlier
            )  # earlier: a re-run cell's
            graphs[c.compile_id] = cap.signature
            last[cap.function] = cap.signature
        failed_break = bool(record.fail_type) and record.fail_type == "Unsupported" and not record.has_guarded_code
        for reason, stack in c.breaks[: -1 if failed_break else None]:  # the failure's own is on its row
            _graph_break(fold, reason, stack)
        if c.backward is not None:
            fold.backward(cap._replace(trigger="backward"), SimpleNamespace(**c.backward))
    rows, breaks = fold.frozen()
    return WatchTable(rows, breaks, 0, tuple(fold.timeline))


def capture_of(c: CompileLog, graphs: dict[str, Signature], last: dict[FunctionKey, Signature]) -> Capture:
    """The ``Capture`` the live source would have heard for this compile, from the log alone."""
    record = c.record or {}
    key, names = _function(c)
    signature = _inputs(c)
    reasons = tuple(c.reasons) or ((record["recompile_reason"],) if record.get("recompile_reason") else ())
    limit = record.get("config_recompile_limit")
    return Capture(
        c.compile_id,
        key,
        signature,
        reasons[0] if reasons else None,
        c.at,
        "",
        last.get(key) if reasons else None,
        reasons,
        tuple((g, graphs[g]) for g in (r.split(":", 1)[0] for r in reasons) if g in graphs),
        record.get("config_automatic_dynamic_shapes") is False,
        0,
        names,
        _caller(c),
        limit_value=limit if isinstance(limit, int) else None,
        pipeline=any(is_pipeline(file) for file, _, _ in c.stack),
        pins=tuple(p for s, v, user in c.pins if (p := pin_at(s, v, user)) is not None),
    )


def _function(c: CompileLog) -> tuple[FunctionKey, tuple[tuple[str, str], ...]]:
    """The compiled function as the user's code names it, and Dynamo's input names -> the names shown."""
    record = c.record or {}
    name = str(record.get("co_name") or (c.stack[-1][2] if c.stack else "?"))
    file = str(record.get("co_filename") or (c.stack[-1][0] if c.stack else ""))
    line = int(record.get("co_firstlineno") or (c.stack[-1][1] if c.stack else 0))
    if name in _WRAPPERS and is_library(file):  # torch.compile(module), a library decorator: the module's forward
        module = next((t for n, _, t in _locals(c) if n in ("self", "fn", "model", "module")), "")
        if module and not module.startswith(("builtins.", "torch.Tensor")):
            positional = sorted({int(m[1]) for s in c.tensors for m in [re.match(r"L\['args'\]\[(\d+)\]", s)] if m})
            keywords = {m[1] for s in c.tensors for m in [re.match(r"L\['kwargs'\]\['(\w+)'\]", s)] if m}
            names = tuple((f"args[{i}]", POSITIONAL.format(n=i + 1)) for i in positional)
            names += tuple((f"kwargs[{k!r}]", k) for k in sorted(keywords))
            return FunctionKey(f"{module.rsplit('.', 1)[-1]}.forward", _forward_file(c), 0), names
    module = next((t for n, _, t in _locals(c) if n == "self"), "") if name == "forward" else ""
    if module and not module.startswith("builtins."):  # a module's own forward compiled: named by its class
        return FunctionKey(f"{module.rsplit('.', 1)[-1]}.forward", file, line), ()
    return FunctionKey(name, file, line, c.resumes_at if name.startswith(RESUME) else 0), ()


def _forward_file(c: CompileLog) -> str:
    """Where the module's forward lives, from the guards' own comments (``... # nn/modules/linear.py:134 in forward``)."""
    for g in c.guards:
        m = re.search(r"# (\S+\.py):\d+ in forward$", g)
        if m:
            return m[1]
    return ""


def _locals(c: CompileLog) -> list[tuple[str, int, str]]:
    """The compiled frame's locals Dynamo guarded, in the frame's order: (name, index, type)."""
    found = [(m["name"], int(m["idx"]), m["type"]) for g in c.guards if (m := _LOCAL.match(g.strip()))]
    if not found:  # no guard tree (a failed compile): the tensors it described, in the order it did
        found = [(m[1], i, "torch.Tensor") for i, s in enumerate(c.tensors) if (m := re.fullmatch(r"L\['(\w+)'\]", s))]
    return sorted(found, key=lambda n: n[1])


def _inputs(c: CompileLog) -> Signature:
    """The inputs the compile specialised on, by Dynamo's names, described as the live watch describes them
    (a module by its class alone: whether it was in train or eval mode is not in the log)."""
    out: list[tuple[str, str]] = []
    for name, _, kind in _locals(c):
        short, shown = kind.rsplit(".", 1)[-1], carried_name(name)
        source = f"L['{name}']"
        if source in c.tensors:
            out.append((shown, _tensor(c.tensors[source])))
        elif short in ("int", "float", "str"):
            value = _value(c, source)
            out.append((shown, f"{short} {value}" if value else short))
        elif short in ("list", "tuple", "dict") or name in ("args", "kwargs"):
            for s, t in c.tensors.items():
                m = re.fullmatch(re.escape(source) + r"(\[\d+\]|\['\w+'\])", s)
                if m:
                    out.append((f"{shown}{m[1]}", _tensor(t)))
        elif short not in ("bool", "NoneType") and name != "fn":
            out.append((shown, short))
    if any('"grad_mode":false' in g for g in c.guards):
        out.append(("grad mode", "off"))
    return tuple(out) or NOT_LOGGED  # a refusal, a frame skipped before it read anything: said on the row


def _tensor(t: dict[str, Any]) -> str:
    text = tensor_text(str(t.get("dtype") or ""), t.get("size") or (), bool(t.get("requires_grad")))
    size, stride = t.get("size") or [], t.get("stride") or []
    known = len(size) == len(stride) and all(isinstance(n, int) for n in [*size, *stride])
    layout = layout_of(size, stride) if known else "contiguous"  # as the live watch describes a tensor
    return text if layout == "contiguous" else f"{text} {layout}"


def _value(c: CompileLog, source: str) -> str:
    """A Python number's value: its guard pins it (``L['n'] == 2``), or the compile made it symbolic."""
    for g in c.guards:
        m = re.search(re.escape(source) + r" == (-?[\d.e+-]+\b|inf\b|nan\b|'[^']*'|\"[^\"]*\")", g)
        if m:
            return m[1]
    return c.symbols.get(source, "")


def _scalars(c: CompileLog, cap: Capture) -> frozenset[str]:
    """The Python numbers this compile made symbolic (a recompile's: a first compile keeps them static)."""
    if not cap.reasons:
        return frozenset()
    return frozenset(s for s in c.symbols if re.fullmatch(r"L\['\w+'\]", s))


def _caller(c: CompileLog) -> str:
    """The package whose code called the compiled function ('' for the user's), from the logged stack,
    by the live watch's rule (``packages.library_caller``)."""
    for file, _, _ in reversed(c.stack[:-1]):
        if not passes_through(file):
            package = package_of(file)
            return "" if package == USER else package
    return ""


def _graph_break(fold: Fold, reason: str, stack: list[tuple[str, int]]) -> None:
    """Where the live watch puts a break: the user's innermost frame, and the library's line under it."""
    while stack and re.search(r"torch[\\/]_dynamo[\\/]", stack[-1][0]):  # Dynamo's own raise, not the code's
        stack = stack[:-1]
    mine = [(f, n) for f, n in stack if not is_library(f)] or stack
    file, line = mine[-1] if mine else ("", 0)
    inner = stack[-1] if stack else ("", 0)
    library = f"{short_path(inner[0])}:{inner[1]}" if inner[0] and is_library(inner[0]) else ""
    code = linecache.getline(file, line).strip() if file else ""  # where the file is on this machine too
    fold.add_break(graph_break_words(reason, library, code, (file, line)), where_label(file, line) if file else "?")
