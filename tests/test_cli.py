import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _user_text import defects

from tpu_lab.cli import main


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "tpu_lab.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_probe_json_schema():
    proc = run_cli("probe", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {
        "python",
        "versions",
        "accelerator",
        "tpu",
        "holds_tpu",
        "device",
        "device_map",
        "environment",
        "memory_gib",
        "findings",
    }
    assert set(data["versions"]) == {"torch", "torch_tpu", "libtpu", "transformers", "accelerate", "kernels", "jax"}
    assert set(data["accelerator"]) == {"type", "available", "count", "torch_cuda", "cuda_devices"}
    assert set(data["tpu"]) == {
        "count",
        "generation",
        "hbm_gib_per_chip",
        "rank_counts",
        "pci_addresses",
        "without_vfio",
    }
    assert data["tpu"]["count"] == 0
    assert data["device"] == "cpu" and data["device_map"] == "cpu"
    for finding in data["findings"]:
        assert set(finding) == {"code", "severity", "message", "fix"}
    assert "auto-device-map-cpu" in [f["code"] for f in data["findings"]]


def test_probe_text(capsys):
    assert main(["probe"]) == 0
    out = capsys.readouterr().out
    assert "device to use" in out and 'device_map="auto" would load' in out and "fix:" in out
    assert "auto-device-map-cpu" not in out  # codes are for tools (JSON, data-code); readers get words


def test_console_script_is_installed():
    import shutil

    exe = shutil.which("tpu-lab") or str(__import__("pathlib").Path(sys.executable).parent / "tpu-lab")
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "probe" in proc.stdout


def test_bare_command_prints_help():
    proc = run_cli()
    assert proc.returncode == 0 and proc.stderr == ""
    assert "usage: tpu-lab" in proc.stdout and all(c in proc.stdout for c in ("probe", "demo", "preflight"))


def test_unknown_command_exits_2():
    proc = run_cli("frobnicate")
    assert proc.returncode == 2 and "invalid choice: 'frobnicate'" in proc.stderr


# Every wrong input: (argv, what the message must say). Each names the flag and what is allowed.
WRONG = [
    (["--bogus"], "unknown option(s): --bogus"),
    (["demo", "--bogus"], "unknown option(s): --bogus"),
    (["probe", "--jsn"], "tpu-lab probe: error: unknown option(s): --jsn (did you mean --json?)"),
    (["demo", "--max-bukets", "4"], "unknown option(s): --max-bukets (did you mean --max-buckets?), 4"),
    (["demo", "--distinct", "0"], "argument --distinct: '0' is not allowed; use a whole number from 1 to 93"),
    (["demo", "--prompts", "0"], "argument --prompts: '0' is not allowed; use a whole number from 1 to 200"),
    (["demo", "--prompts", "many"], "argument --prompts: 'many' is not allowed; use a whole number from 1 to 200"),
    (["demo", "--max-new-tokens", "0"], "argument --max-new-tokens: '0' is not allowed; use a whole number from 1"),
    (["demo", "--max-buckets", "-1"], "argument --max-buckets: '-1' is not allowed; use a whole number from 1 to 16"),
    (
        ["demo", "--prompts", "3", "--distinct", "5"],
        "--distinct 5 asks for more distinct lengths than there are prompts",
    ),
    (
        ["demo", "--backend", "nosuch"],
        "--backend 'nosuch' is not a torch.compile backend here. Those that work here: aot_eager",
    ),
    (["demo", "--backend", "openxla"], "--backend 'openxla' needs torch_xla, which is not installed here"),
    (["preflight", "no_such_folder", "--tp", "2"], "argument MODEL: there is no folder no_such_folder"),
    (["demo", "--chart", "/missing/dir/x.png"], "--chart: the folder /missing/dir does not exist"),
    (["demo", "--chart", "chart.jpg"], "--chart 'chart.jpg' is not a .png file name"),
    (["demo", "--model", "/no/such/model"], "--model '/no/such/model': No checkpoint folder"),
    (["demo", "--model", "tiny:gpt9"], "--model 'tiny:gpt9': Unknown arch 'gpt9'"),
    (["preflight", "tiny:qwen3"], "the following arguments are required: --tp"),
    (["preflight", "tiny:qwen3", "--tp", "0"], "argument --tp: '0' is not allowed; use a whole number from 1"),
    (["preflight", "tiny:qwen3", "--tp", "2", "--plan", "{"], "argument --plan: not valid JSON"),
    (["preflight", "tiny:qwen3", "--tp", "2", "--plan", "[1]"], "argument --plan: must be a JSON object"),
    (["preflight", "pyproject.toml", "--tp", "2"], "argument MODEL: pyproject.toml is a file"),
]


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any weight loading or generation fails the test: wrong input must be refused before."""
    import tpu_lab.compile.generation.session as session
    import tpu_lab.models.loading as loading

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded before the wrong input was refused")

    monkeypatch.setattr(loading, "load_model", forbidden)
    monkeypatch.setattr(session, "GenerationSession", forbidden)


@pytest.mark.parametrize(("argv", "says"), WRONG, ids=[" ".join(a) for a, _ in WRONG])
def test_every_wrong_input_exits_2_in_the_clis_words(argv, says, capsys, no_model_loads, tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # pyproject.toml: a file that is not a config
    with pytest.raises(SystemExit) as exit_:
        raise SystemExit(main(argv))
    out, err = capsys.readouterr()
    assert exit_.value.code == 2, (out, err)
    assert says in err, err
    assert err.startswith(("usage: tpu-lab", "tpu-lab")) and "Traceback" not in err
    assert out == ""  # refused before the demo printed anything (and before any chart was written)
    assert not (tmp_path / "x.png").exists()


def test_a_missing_folder_is_refused_before_torch_is_imported():
    code = (
        "import sys; from tpu_lab.cli import main; code = main(['preflight', 'no_such_folder', '--tp', '2']); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; sys.exit(code)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "there is no folder no_such_folder" in proc.stderr, proc.stderr


def test_wrong_input_in_a_real_process_has_no_traceback():
    for args, says in [
        (("demo", "--backend", "nosuch"), "--backend 'nosuch'"),
        (("demo", "--distinct", "0"), "--distinct"),
    ]:
        proc = run_cli(*args)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stdout == ""


def test_preflight_accepts_a_config_json_file():
    import tpu_lab as tl

    config = tl.tiny_model(kv_heads=2) / "config.json"
    assert main(["preflight", str(config), "--tp", "2"]) == 0


def _numbers(text, name):
    """From a demo output: the per-pass compiles in a policy's own table line and in the summary."""
    table = re.search(rf"^{name}: (\d+) \+ (\d+) = (\d+) compiles", text, re.M)
    summary = re.search(rf"^{name} +(\d+) \+ (\d+) = (\d+) ", text.split("== summary")[1], re.M)
    assert table and summary, text
    return tuple(map(int, table.groups())), tuple(map(int, summary.groups()))


@pytest.mark.slow
def test_demo_tells_one_story_and_saves_the_chart_where_asked(tmp_path):
    chart = tmp_path / "charts" / "demo.png"
    chart.parent.mkdir()
    args = ["--prompts", "5", "--distinct", "4", "--max-new-tokens", "3", "--max-buckets", "2"]
    proc = run_cli("demo", *args, "--chart", str(chart))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("What this shows:\n  - A compile:") and "Buckets pad" in out
    assert defects(out) == [], defects(out)  # words, not Python values or codes
    assert "Loading weights" not in out + proc.stderr and "it/s" not in out + proc.stderr  # no progress bar
    for name in ("naive", "bucketed"):
        section = out.split(f"== {name}:")[1].split("\n== ")[0]
        rows = [line.split() for line in section.splitlines() if line.startswith(("prefill ", "decode "))]
        per_shape = sum(int(r[4]) for r in rows)  # shape is three words: phase, batch x length, cache=N
        own, summary = _numbers(out, name)
        assert own == summary and own[0] + own[1] == own[2] == per_shape, (name, own, summary, per_shape)
        assert "first call ms" in section and "cached call ms (n, range)" in section
        assert "cached call ms: the median over the n prompts that ran that shape without compiling it" in section
        medians = [int(n) for n in re.findall(r" \d+\.\d \(n=(\d+)[,)]", section)]
        # bucketed: every shape serves every pass, so each distinct prompt's 3 timing calls at least; naive
        # keeps rows of cache sizes it outgrew, with the calls they had
        assert medians and min(medians) >= (3 if name == "bucketed" else 1), section
    (_, _, bucketed), _ = _numbers(out, "bucketed")
    assert bucketed == 3  # two buckets + one decode graph, all in pass 1
    assert _numbers(out, "bucketed")[0][1] == 0  # the second pass compiles nothing
    saved = re.search(r"Buckets saved (\d+) of (\d+) compiles", out)
    assert saved and int(saved[2]) - int(saved[1]) == bucketed
    assert "padding tokens per pass" in out and "Next: try" in out
    assert f"chart saved to {chart}" in out
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert not Path("tpu_lab_demo.png").exists() or Path("tpu_lab_demo.png").stat().st_mtime < chart.stat().st_mtime
