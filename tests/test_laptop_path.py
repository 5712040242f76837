"""The laptop path cannot drift: README's Set up lines are what .ci/run's laptop step and Binder's
postBuild run (both read them by marker through .ci/readme-block), and pyproject.toml's torch floor is
the torch that step checks it tests."""

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_block(marker: str) -> str:
    proc = subprocess.run([str(ROOT / ".ci" / "readme-block"), marker], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_ci_and_binder_run_the_readme_lines_by_their_markers():
    ci = (ROOT / ".ci" / "run").read_text()
    for marker in ("test-command", "laptop-torch", "demo-command"):
        assert f".ci/readme-block {marker}" in ci, marker
    assert ".ci/readme-block laptop-torch" in (ROOT / "binder" / "postBuild").read_text()
    # the notebooks' environment: the same install line for a reader, for CI's notebook run and for Binder
    assert ".ci/readme-block notebook-env" in ci
    assert ".ci/readme-block notebook-env" in (ROOT / "binder" / "postBuild").read_text()
    assert readme_block("notebook-env").splitlines() == ['pip install -e ".[lab]"', "jupyter lab notebooks/"]
    assert not (ROOT / "binder" / "requirements.txt").exists()  # a second torch line could drift
    assert readme_block("laptop-torch") == "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert readme_block("demo-command") == "pip install -e . && tpu-lab demo"
    assert readme_block("test-command").startswith('pip install -e ".[test]"')
    assert readme_block("no-such-marker") == ""


def test_the_torch_floor_is_the_one_the_laptop_step_checks():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(d for d in deps if d.startswith("torch"))
    assert re.fullmatch(r"torch>=2\.13,<=2\.15", torch), torch  # 2.13: the CPU wheel (FACTS.md)
    assert "the floor in pyproject.toml" in (ROOT / ".ci" / "run").read_text()


def test_ci_main_step_gets_the_newest_torch_and_the_laptop_step_the_floor():
    """A fresh `pip install` resolves the newest torch pyproject.toml allows; this machine's pip config caps
    it locally. The main step skips the config files (and checks the torch it got against the index); the
    laptop step, after it, keeps them."""
    ci = (ROOT / ".ci" / "run").read_text()
    lifted, main = ci.index("export PIP_CONFIG_FILE=/dev/null"), ci.index(".ci/readme-block test-command")
    restored, laptop = ci.index("unset PIP_CONFIG_FILE"), ci.index('bash -euo pipefail -c "$laptop_torch"')
    assert lifted < main < restored < laptop
    assert "a fresh install resolves" in ci  # the check on the torch the main step got
