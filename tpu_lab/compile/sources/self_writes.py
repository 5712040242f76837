"""Tensors a failed guard checks that the module's own code rewrites: YOLOv5's ``Detect.forward`` keeps a grid
per level on the module and rebuilds it when the feature map's size changes, so every graph holds the grid
it read, and a graph for an earlier image size no longer matches once the code rewrote it. Read from the
class's source (its ``forward`` and the methods forward calls), per compile, never per call."""

from __future__ import annotations

import ast
import inspect
import linecache
import re
from collections.abc import Sequence
from typing import Any

from tpu_lab.compile.causes.cause import local_name
from tpu_lab.compile.causes.source_file import function_at, parsed_file
from tpu_lab.compile.sources.guarded import value_at

_TENSOR = re.compile(  # a tensor's guard, or a flag's (ActNorm's data_dep_init_done == False)
    r"tensor '(?P<s>.+?)' (?:size|stride|rank|dtype|device) mismatch"
    r"|(?:^|: )(?P<v>(?:L\['self'\]|self)\S*) == (?:True|False|-?\d+)(?![\w.])"  # a flag, or an int it keeps
    r"|(?:^|: )not (?P<c>(?:L\['self'\]|self)\S*)(?=\s|$)",  # a container compiled while empty (SAC's self.outputs)
    re.M,
)
_ARGUMENT_FILLED = re.compile(  # a container argument compiled while empty, or without a key it has now
    r"___dict_contains\([^,]+, (?:L\['(?P<a>\w+)'\]|(?P<b>\w+))\)|(?:^|: )not (?:L\['(?P<c>\w+)'\]|(?P<d>\w+))(?=\s|$)",
    re.M,
)
_FILLING = ("update", "setdefault", "append", "extend", "insert", "add")
_OWNED = re.compile(r"(?P<owner>.+?)\.(?P<attr>\w+)(?P<items>(?:\[\d+\]|\['[^']*'\])*)")


def rewritten(frame: Any, reasons: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(the tensor as the causes name it, ``Detect.forward (yolo.py:27: self.grid[i] = ...)``) for each tensor
    (or flag) a failed guard checks that is an attribute (or an item of one) of an object whose class's
    ``forward``, or a method it calls, assigns that attribute: a cache (or an init flag) the code rewrites."""
    out: dict[str, str] = {}
    for reason in reasons:
        for m in _TENSOR.finditer(reason):
            source = m["s"] or m["v"] or m["c"]
            name = local_name(source)
            if name in out or not name.startswith("self"):
                continue
            parts = _OWNED.fullmatch(source)
            buffer = re.fullmatch(r"\['(\w+)'\]", parts["items"]) if parts and parts["attr"] == "_buffers" else None
            # a parameter is no cache; a buffer counts where the class's code registers it anew (a RoPE cache)
            if parts is None or (parts["attr"] in ("_parameters", "_modules", "_buffers") and not buffer):
                continue
            attr = buffer[1] if buffer else parts["attr"]
            try:
                owner = value_at(parts["owner"], frame)
            except Exception:
                continue  # a source this reader does not follow: the words say less, never wrong
            if place := _writer(type(owner), attr):
                out[name] = place
        code = frame.f_code
        for m in _ARGUMENT_FILLED.finditer(reason):  # RetNet's incremental_state: the caller's dict, filled here
            name = m["a"] or m["b"] or m["c"] or m["d"]
            arguments = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            if name not in out and name in arguments and name != "self" and (place := _filler(code, name)):
                out[name] = place
    return tuple(out.items())


def _filler(code: Any, name: str) -> str:
    """Where the compiled function ``code`` puts items into its argument ``name`` (``incremental_state[idx] =
    {}``, ``name.update(...)``): ``RetNetDecoder.forward (retnet.py:316: incremental_state[idx] = {})``; ''
    where it does not, or the source cannot be read."""
    fn = function_at(code.co_filename, code.co_firstlineno)
    for node in ast.walk(fn) if fn else ():
        stored = isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
        called = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _FILLING
        held = node.value if stored else node.func.value if called else None  # type: ignore[attr-defined]
        if isinstance(held, ast.Name) and held.id == name:
            at = getattr(node, "lineno", 0)
            line = linecache.getline(code.co_filename, at).strip()
            return (
                f"{code.co_qualname.rpartition('.<locals>.')[2]} ({code.co_filename.rsplit('/', 1)[-1]}:{at}: {line})"
            )
    return ""


def _writer(cls: type, attr: str) -> str:
    """Where ``cls``'s forward (or a method forward calls on self) assigns ``self.<attr>`` or an item of it:
    ``Detect.forward (yolo.py:27: self.grid[i], ... = ...)``; '' where none does (set in __init__ only, or by
    code outside the class) or the source cannot be read."""
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in ("torch", "builtins"):
            continue
        try:
            file = inspect.getsourcefile(klass) or ""
        except TypeError:
            continue
        tree = parsed_file(file) or ast.Module(body=[], type_ignores=[])
        body = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == klass.__name__), None)
        methods = {n.name: n for n in body.body if isinstance(n, ast.FunctionDef)} if body else {}
        if "forward" not in methods:
            continue
        called = {
            n.func.attr
            for n in ast.walk(methods["forward"])
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _is_self(n.func.value)
        }
        found = [
            (method, node)
            for method in ["forward", *sorted(called & methods.keys() - {"forward", "__init__"})]
            for node in ast.walk(methods[method])
            if (isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and _assigns(node, attr))
            or _registers(node, attr)
        ]
        # what sets the value the guard checked, before a reset to None on another branch (self.src_mask = None)
        found.sort(key=lambda mn: isinstance(v := getattr(mn[1], "value", None), ast.Constant) and v.value is None)
        for method, node in found[:1]:
            code = ast.get_source_segment("".join(linecache.getlines(file)), node) or ""
            code = " ".join(part.strip() for part in code.splitlines())  # a call across lines, whole
            code = re.sub(r"\s+([)\]])", r"\1", re.sub(r"([(\[])\s+", r"\1", code))
            code = code if len(code) <= 100 else code[:97].rstrip() + "..."
            return f"{klass.__name__}.{method} ({file.rsplit('/', 1)[-1]}:{getattr(node, 'lineno', 0)}: {code})"
    return ""


def _assigns(node: ast.Assign | ast.AugAssign | ast.AnnAssign, attr: str) -> bool:
    """Whether the statement assigns ``self.<attr>`` or an item of it (``self.grid[i], self.anchor_grid[i] = ...``)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for t in (s for target in targets for s in _stores(target)):
        held = t.value if isinstance(t, ast.Subscript) else t
        if isinstance(held, ast.Attribute) and held.attr == attr and _is_self(held.value):
            return True
    return False


def _registers(node: ast.AST, attr: str) -> bool:
    """Whether ``node`` is ``self.register_buffer("<attr>", ...)``: a buffer set anew (a RoPE cos/sin cache)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "register_buffer"
        and _is_self(node.func.value)
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == attr
    )


def _stores(target: ast.expr) -> list[ast.expr]:
    """The expressions a target assigns: itself, or each item of a tuple or list of targets."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [s for e in target.elts for s in _stores(e)]
    return [target]


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"
