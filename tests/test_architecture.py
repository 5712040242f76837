"""The import rules of docs/architecture.md, read from the source (every import statement, those inside
functions and under ``if TYPE_CHECKING`` included): layers import downwards only, inside tp its three
stories too; only widgets import ipywidgets; no import cycle of any kind; and the map at the top of
docs/architecture.md names exactly the folders the code has."""

import ast
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tpu_lab"
MAP = ROOT / "docs" / "architecture.md"
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
# inside tp: story -> the stories it may import (besides itself); the package root imports none
INSIDE_TP = {
    "tp/preflight": {"tp/launch"},  # the host list (tp.launch.hosts), checked as tl.launch checks it
    "tp/launch": {"tp/results"},
    "tp/results": set(),
}


def layer_of(module: str) -> str:
    if module in BASE:
        return "base"
    if module == "tpu_lab":
        return "app"  # the package root only re-exports, lazily
    part = module.split(".")[1]
    return part if part in ALLOWED else "app"


def story_of(module: str) -> str:
    """``tp/launch`` for ``tpu_lab.tp.launch.runners.ssh`` (only for modules of the tp layer)."""
    parts = module.split(".")
    return "tp" if len(parts) < 3 else f"tp/{parts[2]}"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(module: str, path: Path) -> set[str]:
    """Every name an import statement anywhere in the module (inside functions too) imports."""
    tree = ast.parse(path.read_text())
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
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
GRAPH = {m: {n for n in imports(m, p) if n in ALL and n not in (m, "tpu_lab")} for m, p in ALL.items()}


@pytest.mark.parametrize("module", sorted(ALL))
def test_layers_import_downwards_only(module):
    mine = layer_of(module)
    allowed = ALLOWED[mine] | {mine, "base"}
    wrong = sorted(name for name in GRAPH[module] if layer_of(name) not in allowed)
    assert not wrong, (
        f"{module} ({mine}) imports {wrong}; docs/architecture.md says {mine} may import {sorted(allowed)}"
    )


@pytest.mark.parametrize("module", sorted(m for m in ALL if layer_of(m) == "tp"))
def test_tp_stories_import_one_way(module):
    mine = story_of(module)
    allowed = INSIDE_TP.get(mine, set()) | {mine}
    wrong = sorted(n for n in GRAPH[module] if layer_of(n) == "tp" and story_of(n) not in allowed)
    assert not wrong, f"{module} ({mine}) imports {wrong}; inside tp, {mine} may import {sorted(allowed)}"


def test_only_widgets_import_ipywidgets():
    offenders = sorted(
        m
        for m, p in ALL.items()
        if layer_of(m) != "widgets" and any(n.split(".")[0] == "ipywidgets" for n in imports(m, p))
    )
    assert offenders == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle: the strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_not_even_inside_functions():
    assert cycles(GRAPH) == []


def test_the_cycle_check_sees_imports_inside_functions(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from pkg.b import g\n")
    b = tmp_path / "b.py"
    b.write_text("from pkg.a import f\n")
    graph = {
        m: {n for n in imports(m, p) if n in ("pkg.a", "pkg.b") and n != m} for m, p in (("pkg.a", a), ("pkg.b", b))
    }
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_modules_stay_small():
    # One job per module: past ~300 lines a module usually does two.
    big = {m: n for m, p in ALL.items() if (n := len(p.read_text().splitlines())) > 330}
    assert big == {}


def test_every_package_says_what_it_owns_and_may_import():
    inits = [*PACKAGE.glob("*/__init__.py"), *(PACKAGE / "tp").rglob("*/__init__.py")]
    for init in inits:
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init} must say what it owns and what it may import"


def map_entries() -> tuple[set[str], set[str]]:
    """(folders, files) named in the map at the top of docs/architecture.md: its first ```text block, one
    entry per line, indented two spaces per level; a folder ends in ``/``; a line of the package root may
    start with several module files."""
    block = re.search(r"^```text\n(.*?)^```", MAP.read_text(), re.S | re.M)
    assert block, "docs/architecture.md starts with its map in a ```text block"
    folders, files, path = set(), set(), []
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        words = line.split()
        del path[depth:]
        if words[0].endswith("/"):
            path.append(words[0])
            folders.add("".join(path))
        elif depth == 1:
            files |= set(itertools.takewhile(lambda w: w.endswith(".py"), (w.rstrip(",") for w in words)))
    return folders, files


def test_the_map_names_every_folder_and_nothing_else():
    folders, _ = map_entries()
    code = {"tpu_lab/"} | {
        f"{init.parent.relative_to(ROOT).as_posix()}/"
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE
    }
    assert sorted(folders - code) == [], "the map names folders the code does not have"
    assert sorted(code - folders) == [], "the code has folders the map does not name"


def test_the_map_names_every_module_of_the_package_root():
    _, files = map_entries()
    root = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert sorted(root - files) == [], "modules of tpu_lab/ the map does not name"
    assert sorted(f for f in files if f.endswith(".py") and f not in root) == [], "the map names modules that are gone"


def test_the_maps_import_rules_are_the_ones_enforced():
    """The "Which way imports go" list of docs/architecture.md, as this test enforces it."""
    text = MAP.read_text()
    rules = re.search(r"^```text\n(.*?)^```", text.split("Which way imports go", 1)[1], re.S | re.M)
    assert rules, 'docs/architecture.md has its import rules in a ```text block after "Which way imports go"'
    said = {}
    for line in rules.group(1).splitlines():
        if "->" in line:
            who, _, what = line.partition("->")
            said[who.split()[0]] = {w for w in re.split(r"[,\s]+", what.split("(")[0]) if w and w != "nothing"}
    enforced = {k: v for k, v in ALLOWED.items() if k != "app"} | INSIDE_TP
    assert said == enforced


def test_reports_honour_include_and_exclude():
    import tpu_lab as tl

    report = tl.probe()
    both = report._repr_mimebundle_()
    assert set(both) == {"text/plain", "text/html"} and both["text/plain"] == str(report)
    assert set(report._repr_mimebundle_(include={"text/plain"})) == {"text/plain"}
    assert set(report._repr_mimebundle_(exclude={"text/plain"})) == {"text/html"}
