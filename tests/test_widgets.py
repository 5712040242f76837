import functools

import tpu_lab as tl
from tpu_lab.device import AcceleratorInfo
from tpu_lab.errors import EnvironmentProblem
from tpu_lab.testing import write_fake_tpu_host


def test_probe_panel_shows_findings_and_refreshes(tmp_path):
    panel = tl.widgets.ProbePanel()
    assert panel.report is not None and panel.report.device == "cpu"
    assert "data-code='auto-device-map-cpu'" in panel.body.value
    assert "device <b>cpu</b>" in panel.status.value and "warning" in panel.status.value
    first = panel.report
    panel.refresh_button.click()
    assert panel.report is not first  # a new snapshot, not a cached one


def test_probe_panel_on_a_simulated_host(tmp_path):
    sysfs, dev = write_fake_tpu_host(tmp_path, "v7", 8)
    fake = functools.partial(
        tl.probe, sysfs_root=sysfs, dev_root=dev, versions={"torch_tpu": "0.2.0"},
        accelerator=AcceleratorInfo("tpu", True, 8), holds_tpu=True, environ={},
    )
    panel = tl.widgets.ProbePanel(fake)
    assert panel.report.device == "tpu"
    assert "8 x TPU v7" in panel.body.value
    assert "data-code='kernel-holds-tpu'" in panel.body.value


def test_probe_panel_survives_a_failing_probe():
    calls = []

    def broken():
        calls.append(1)
        raise EnvironmentProblem("sysfs unreadable", fix="mount /sys")

    panel = tl.widgets.ProbePanel(broken)
    assert "tpu-lab-error" in panel.body.value and "mount /sys" in panel.body.value
    assert panel.status.value == "probe failed"
    panel.refresh_button.click()
    assert len(calls) == 2
