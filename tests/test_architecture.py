"""The import rules of README's Architecture section, read from the source (every import statement,
including those inside functions): layers import downwards only, only widgets import ipywidgets, and
no module-level import cycle."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tpu_lab"
BASE = {"tpu_lab.errors", "tpu_lab._report", "tpu_lab._checks"}
# layer -> the layers it may import (besides itself and the base)
ALLOWED = {
    "base": set(),
    "host": set(),
    "models": {"host"},
    "compile": {"host"},
    "tp": {"host", "models", "compile"},  # compile: every launched rank runs inside the watcher
    "widgets": {"host", "models", "compile", "tp"},
    "app": {"host", "models", "compile", "tp", "widgets"},
}


def layer_of(module: str) -> str:
    if module in BASE:
        return "base"
    if module == "tpu_lab":
        return "app"  # the package root only re-exports, lazily
    part = module.split(".")[1]
    return part if part in ALLOWED else "app"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(module: str, path: Path, *, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


ALL = modules()


@pytest.mark.parametrize("module", sorted(ALL))
def test_layers_import_downwards_only(module):
    mine = layer_of(module)
    allowed = ALLOWED[mine] | {mine, "base"}
    wrong = sorted(
        name
        for name in imports(module, ALL[module])
        if name in ALL and name != "tpu_lab" and layer_of(name) not in allowed
    )
    assert not wrong, (
        f"{module} ({mine}) imports {wrong}; README's Architecture section says {mine} may import {sorted(allowed)}"
    )


def test_only_widgets_import_ipywidgets():
    offenders = sorted(
        m
        for m, p in ALL.items()
        if layer_of(m) != "widgets" and any(n.split(".")[0] == "ipywidgets" for n in imports(m, p))
    )
    assert offenders == []


def test_no_module_level_import_cycle():
    graph = {m: {n for n in imports(m, p, top_level_only=True) if n in ALL and n != m} for m, p in ALL.items()}

    def visit(node, stack, done):
        if node in stack:
            return [*stack[stack.index(node) :], node]
        if node in done:
            return None
        done.add(node)
        for nxt in graph[node]:
            cycle = visit(nxt, [*stack, node], done)
            if cycle:
                return cycle
        return None

    done: set[str] = set()
    for m in sorted(graph):
        cycle = visit(m, [], done)
        assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_modules_stay_small():
    # One job per module: past ~300 lines a module usually does two.
    big = {m: n for m, p in ALL.items() if (n := len(p.read_text().splitlines())) > 330}
    assert big == {}


def test_every_subpackage_says_what_it_owns_and_may_import():
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init} must say what it owns and what it may import"


def test_reports_honour_include_and_exclude():
    import tpu_lab as tl

    report = tl.probe()
    both = report._repr_mimebundle_()
    assert set(both) == {"text/plain", "text/html"} and both["text/plain"] == str(report)
    assert set(report._repr_mimebundle_(include={"text/plain"})) == {"text/plain"}
    assert set(report._repr_mimebundle_(exclude={"text/plain"})) == {"text/html"}
