"""The laptop path cannot drift: README's Set up lines are what .ci/run's laptop step runs (by their
markers) and what Binder installs, and pyproject.toml's torch floor is the torch that step tests."""

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_block(marker: str) -> str:
    """The block .ci/run extracts, through .ci/run's own function (not a copy of it)."""
    script = ROOT / ".ci" / "run"
    function = re.search(r"^readme_block\(\) \{\n.*?^\}\n", script.read_text(), re.S | re.M)
    assert function, ".ci/run has no readme_block function"
    proc = subprocess.run(
        ["bash", "-c", f"{function[0]}\nreadme_block {shlex.quote(marker)}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def test_ci_runs_the_readme_lines_by_their_markers():
    script = (ROOT / ".ci" / "run").read_text()
    for marker in ("test-command", "laptop-torch", "demo-command"):
        assert f"readme_block {marker}" in script, marker
    assert readme_block("laptop-torch") == "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert readme_block("demo-command") == "pip install -e . && tpu-lab demo"
    assert readme_block("test-command").startswith('pip install -e ".[test]"')


def test_binder_installs_what_the_readme_tells_a_laptop():
    line = shlex.split(readme_block("laptop-torch"))
    assert line[:2] == ["pip", "install"]
    packages = [a for a in line[2:] if not a.startswith("--") and a != line[line.index("--index-url") + 1]]
    wanted = {"--index-url " + line[line.index("--index-url") + 1], *packages}
    requirements = ROOT / "binder" / "requirements.txt"
    got = {s.strip() for s in requirements.read_text().splitlines() if s.strip() and not s.startswith("#")}
    assert got == wanted


def test_the_torch_floor_is_the_one_the_laptop_step_checks():
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(d for d in deps if d.startswith("torch"))
    assert re.fullmatch(r"torch>=2\.13,<=2\.15", torch), torch  # 2.13: the CPU wheel (FACTS.md)
    assert "the floor in pyproject.toml" in (ROOT / ".ci" / "run").read_text()
