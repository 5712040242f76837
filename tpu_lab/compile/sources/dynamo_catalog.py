"""Dynamo's own catalogues, read from the installed torch: the graph-break registry (every break type with
its explanation and hints, ``torch/_dynamo/graph_break_registry.json``) and the guard kinds its
``GuardBuilder`` can emit; and a check that an API or config name a hint mentions exists in this torch.
Part of the Dynamo source seam: a torch without one of these gives an empty catalogue, never an error."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import re
import warnings
from pathlib import Path
from typing import NamedTuple

from tpu_lab.compile.sources.packages import torch_folder

_URL = re.compile(r"compile-graph-break-site/gb/gb(\d{4})\.html")
_NAME = re.compile(r"\btorch(?:\.\w+)+")


class BreakType(NamedTuple):
    """One entry of Dynamo's graph-break registry."""

    key: str
    """The registry's key (``GB0098``): for tests and lookups, never printed to a user."""
    gb_type: str
    explanation: str
    hints: tuple[str, ...]


@functools.cache
def graph_break_types() -> dict[str, BreakType]:
    """Every graph-break type this torch ships, by key (empty where the registry is missing)."""
    path = Path(torch_folder(), "_dynamo", "graph_break_registry.json")  # read without importing Dynamo
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for key, entries in raw.items():
        if isinstance(entries, list) and entries and isinstance(entries[0], dict):
            e = entries[-1]  # the newest wording
            out[key] = BreakType(
                key, str(e.get("Gb_type", "")), str(e.get("Explanation", "")), tuple(e.get("Hints") or ())
            )
    return out


@functools.cache
def _by_gb_type() -> dict[str, BreakType]:
    return {t.gb_type.strip(): t for t in graph_break_types().values()}


def break_type(text: str) -> BreakType | None:
    """The registry entry of one graph break from Dynamo's text: by the page it links to, else by its
    first line (the break's type, as Dynamo writes it)."""
    if m := _URL.search(text):
        found = graph_break_types().get(f"GB{m[1]}")
        if found is not None:
            return found
    for line in text.splitlines():
        line = line.strip()
        if line in _by_gb_type():
            return _by_gb_type()[line]
    return None


@functools.cache
def resolves(name: str) -> bool:
    """Whether a dotted name (``torch._dynamo.config.capture_scalar_outputs``, ``torch.cond``) exists in the
    installed torch, and is not deprecated there: read from the module's source where it plainly defines
    the name (no import: reading a copied log needs no Dynamo), else the longest importable module, then
    attributes."""
    if _defined_in_source(name):
        return True
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:  # a module that fails to import for another reason: not usable either
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # a deprecated config key "does not do anything"
            warnings.simplefilter("error", DeprecationWarning)
            for attr in parts[cut:]:
                try:
                    obj = getattr(obj, attr)
                except (AttributeError, FutureWarning, DeprecationWarning):
                    return False
        return True
    return False


def _defined_in_source(name: str) -> bool:
    """``torch.a.b.attr`` where ``torch/a/b.py`` (or its ``__init__.py``) assigns, defines or imports ``attr``
    at its top level, and nothing deprecated or aliased is near it; False means: not known this way."""
    parts, root = name.split("."), torch_folder()
    if len(parts) < 3 or parts[0] != "torch" or not root:
        return False
    base = Path(root, *parts[1:-1])
    for file in (base.with_suffix(".py"), base / "__init__.py"):
        if file.is_file():
            return parts[-1] in _plain_names(str(file))
    return False


@functools.lru_cache(maxsize=64)
def _plain_names(file: str) -> frozenset[str]:
    """The names a module file defines at its top level, less any whose definition or the comment above it
    speaks of deprecation or an alias (those are left to the import, which sees the warning)."""
    try:
        text = Path(file).read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    lines = text.splitlines()
    out = set()
    for node in tree.body:
        targets: list[str] = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            targets = [node.name]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            targets = [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
        near = "\n".join(lines[max(node.lineno - 2, 0) : (node.end_lineno or node.lineno)]).lower()
        if "deprecat" not in near and "alias" not in near:
            out.update(targets)
    return frozenset(out)


def unresolved_names(text: str) -> list[str]:
    """The ``torch.*`` names a text mentions that this torch does not have."""
    return [n for n in dict.fromkeys(_NAME.findall(text)) if not resolves(n)]


@functools.cache
def guard_kinds() -> tuple[str, ...]:
    """The guard kinds Dynamo's ``GuardBuilder`` can emit (its upper-case methods: ``TENSOR_MATCH``, ...)."""
    try:
        from torch._dynamo.guards import GuardBuilder
    except ImportError:
        return ()
    return tuple(n for n in vars(GuardBuilder) if n.isupper() and callable(getattr(GuardBuilder, n)))


@functools.cache
def _reraised() -> tuple[type, ...]:
    """The exceptions Dynamo's compile lets through as they are; every other one it wraps as
    InternalTorchDynamoError (its own bug). Read from ``convert_frame._compile``'s ``isinstance(e, (...))``
    before that rewrap; empty where the source reads otherwise."""
    try:
        import torch._dynamo.convert_frame as convert_frame

        tree = ast.parse(Path(convert_frame.__file__).read_text())
    except Exception:  # another torch, or no source: no claim
        return ()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Call) and node.orelse):
            continue
        args = node.test.args
        wraps = any("InternalTorchDynamoError" in ast.unparse(n) for n in node.orelse)
        if getattr(node.test.func, "id", "") == "isinstance" and len(args) == 2 and wraps:
            found = [_resolve(convert_frame, ast.unparse(n)) for n in getattr(args[1], "elts", [])]
            return tuple(c for c in found if isinstance(c, type))
    return ()


def _resolve(module: object, dotted: str) -> object:
    """A name in ``module``'s source (``IndexError``, ``unittest.SkipTest``): its globals, else a builtin."""
    import builtins

    head, *rest = dotted.split(".")
    obj = getattr(module, head, getattr(builtins, head, None))
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def internal_error(fail_type: str) -> bool:
    """Whether a failed compile's ``fail_type`` (the exception Dynamo caught) is one its compile re-raised as
    InternalTorchDynamoError: an error in Dynamo itself, not an unsupported construct or the user's error."""
    if fail_type == "InternalTorchDynamoError":
        return True
    kept = _reraised()
    if not kept or not fail_type.isidentifier():
        return False
    import builtins

    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.exc as exc

    cls = next((c for m in (exc, builtins, convert_frame) if isinstance(c := getattr(m, fail_type, None), type)), None)
    return cls is not None and issubclass(cls, BaseException) and not issubclass(cls, kept)


def shape_op_captured(op: str) -> bool | None:
    """Whether ``torch._dynamo.config.capture_dynamic_output_shape_ops = True`` lets Dynamo trace ``op``
    (``aten._ctc_loss.default``), an operator whose output shape depends on its input's data: only where
    torch's fake tensors have a rule for it (``nonzero``, ``unique``); others then break with "no meta kernel".
    A private read of ``torch._subclasses.fake_impls`` (``tests/test_watch_blind18.py`` checks its shape);
    None where it cannot be read."""
    try:
        import torch
        from torch._subclasses import fake_impls

        packet, _, overload = op.removeprefix("aten.").rpartition(".")
        found = getattr(getattr(torch.ops.aten, packet), overload)
        rules = fake_impls.op_implementations_dict
    except Exception:
        return None
    # fake_impls' dyn_shape raises for every dynamic-output op except these and those with a rule of their own
    handled = (torch.ops.aten.index.Tensor, torch.ops.aten.nonzero.default, torch.ops.aten.repeat_interleave.Tensor)
    return found in rules or found in handled
