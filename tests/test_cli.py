import json
import subprocess
import sys

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
    assert "device to use" in out and "auto-device-map-cpu" in out and "fix:" in out


def test_console_script_is_installed():
    import shutil

    exe = shutil.which("tpu-lab") or str(__import__("pathlib").Path(sys.executable).parent / "tpu-lab")
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "probe" in proc.stdout


def test_unknown_command_exits_2():
    proc = run_cli("frobnicate")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_demo_runs_headless_and_saves_a_chart(tmp_path):
    chart = tmp_path / "demo.png"
    proc = run_cli(
        "demo",
        "--prompts",
        "5",
        "--distinct",
        "4",
        "--max-new-tokens",
        "3",
        "--max-buckets",
        "2",
        "--chart",
        str(chart),
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "== naive" in out and "== bucketed" in out and "naive / bucketed wall time" in out
    bucketed = out.split("== bucketed")[1]
    assert "total: 3 compiles" in bucketed  # two buckets + one decode graph
    assert "bucketed:   3 compiles" in out and "(second pass: 0 compiles)" in out
    assert chart.read_bytes().startswith(b"\x89PNG")
