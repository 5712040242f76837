"""With the real torch-tpu package and no chip: the probe works, quietly, and never initialises it.

Run with `pip install -e '.[tpu]' && pytest -m tpu_package` (CI does); skipped without torch-tpu.
"""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tpu_package

CHECK = """
import json, sys
import tpu_lab as tl
report = tl.probe()
import torch
print(json.dumps({
    "report": report.to_dict(),
    "torch_tpu_loaded": "torch_tpu" in sys.modules,
    "initialized_after": bool(torch.tpu.is_initialized()),
}))
"""


def test_probe_with_real_torch_tpu_and_no_chip():
    # A hang here would be libtpu retrying cloud metadata: the timeout turns it into a failure.
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    report = out["report"]
    assert out["torch_tpu_loaded"] is True  # `import torch` autoloaded it
    assert out["initialized_after"] is False and report["holds_tpu"] is False
    assert report["versions"]["torch_tpu"] and report["versions"]["libtpu"]
    assert report["device"] == "cpu" and report["tpu"]["count"] == 0
    codes = [f["code"] for f in report["findings"]]
    assert "torch-tpu-without-chip" in codes and "auto-device-map-cpu" in codes
    assert "torch-outside-tpu-range" not in codes


def test_cli_with_real_torch_tpu_prints_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "tpu_lab.cli", "probe", "--json"], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["versions"]["torch_tpu"]
