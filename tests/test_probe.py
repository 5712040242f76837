import json

import pytest
from _kernels_range import declared_kernels_range

import tpu_lab as tl
from tpu_lab.host.findings import diagnose
from tpu_lab.host.probe import AcceleratorInfo
from tpu_lab.testing import write_fake_tpu_host

NO_GPU = AcceleratorInfo(type=None, available=False, count=0)
TPU_ACC = AcceleratorInfo(type="tpu", available=True, count=4)
WITH_TPU = {"torch": "2.14.1", "torch_tpu": "0.2.0", "libtpu": "0.0.52"}


def codes(report):
    return [f.code for f in report.findings]


@pytest.fixture
def v6e_host(tmp_path):
    sysfs, dev = write_fake_tpu_host(tmp_path, "v6e", 4)
    return {"sysfs_root": sysfs, "dev_root": dev}


def test_real_probe_here_recommends_cpu():
    report = tl.probe()
    assert report.tpu.count == 0
    assert report.device == report.device_map == "cpu"
    assert "auto-device-map-cpu" in codes(report)
    assert report.versions["torch"] and report.versions["transformers"]
    assert report.accelerator is not None and report.accelerator.available is False


def test_probe_does_not_cache():
    assert tl.probe() is not tl.probe()


def test_simulated_v6e_host_recommends_tpu(v6e_host):
    report = tl.probe(**v6e_host, versions=WITH_TPU, accelerator=TPU_ACC, environ={})
    assert report.device == report.device_map == "tpu"
    assert (report.tpu.count, report.tpu.generation, report.tpu.rank_counts) == (4, "TPU v6e", (1, 4))
    # The "auto" trap applies on a TPU host too, with the TPU wording.
    auto = next(f for f in report.findings if f.code == "auto-device-map-cpu")
    assert "no TPU branch" in auto.message and 'device_map="tpu"' in auto.fix
    assert "here" not in auto.fix and "on a TPU VM" not in auto.fix  # it is one: no "tpu here, tpu there"
    assert "torch-tpu-without-chip" not in codes(report)


def test_chips_but_no_torch_tpu(v6e_host):
    report = tl.probe(**v6e_host, versions={"torch_tpu": None}, accelerator=NO_GPU, environ={})
    assert report.device == "cpu"
    assert codes(report)[0] == "tpu-without-torch-tpu"
    assert "pip install" in report.findings[0].fix


def test_chips_without_vfio(tmp_path):
    sysfs, dev = write_fake_tpu_host(tmp_path, "v5e", 8, vfio=False)
    report = tl.probe(sysfs_root=sysfs, dev_root=dev, versions=WITH_TPU, accelerator=NO_GPU, environ={})
    assert "tpu-without-vfio" in codes(report)
    assert report.device == "cpu"


def test_torch_tpu_without_chip(tmp_path):
    report = tl.probe(sysfs_root=tmp_path, versions=WITH_TPU, accelerator=NO_GPU, environ={})
    assert "torch-tpu-without-chip" in codes(report)
    assert "tpu-without-torch-tpu" not in codes(report)


@pytest.mark.parametrize(("torch_v", "outside"), [("2.16.0", True), ("2.10.2", True), ("2.14.1+cpu", False)])
def test_torch_outside_torch_tpu_range(tmp_path, torch_v, outside):
    report = tl.probe(sysfs_root=tmp_path, versions={**WITH_TPU, "torch": torch_v}, accelerator=NO_GPU, environ={})
    assert ("torch-outside-tpu-range" in codes(report)) is outside


def test_kernels_outside_transformers_range(tmp_path):
    declared = declared_kernels_range()
    if declared is None:  # this transformers declares no range: no kernels version is outside it
        report = tl.probe(sysfs_root=tmp_path, versions={"kernels": "0.0.1"}, accelerator=NO_GPU, environ={})
        assert "kernels-version-mismatch" not in codes(report)
        return
    spec, inside, outside = declared
    report = tl.probe(sysfs_root=tmp_path, versions={"kernels": outside}, accelerator=NO_GPU, environ={})
    finding = next(f for f in report.findings if f.code == "kernels-version-mismatch")
    assert outside in finding.message and f'"kernels{spec}"' in finding.fix
    ok = tl.probe(sysfs_root=tmp_path, versions={"kernels": inside}, accelerator=NO_GPU, environ={})
    assert "kernels-version-mismatch" not in codes(ok)


def test_cuda_wheel_without_gpu(tmp_path):
    acc = AcceleratorInfo(type="cuda", available=False, count=0, torch_cuda="13.0", cuda_devices=0)
    report = tl.probe(sysfs_root=tmp_path, accelerator=acc, environ={})
    assert "cuda-wheel-without-gpu" in codes(report)
    gpu = AcceleratorInfo(type="cuda", available=True, count=1, torch_cuda="13.0", cuda_devices=1)
    report = tl.probe(sysfs_root=tmp_path, accelerator=gpu, environ={})
    assert report.device == "cuda"
    assert not {"cuda-wheel-without-gpu", "auto-device-map-cpu"} & set(codes(report))


def test_kernel_holds_tpu(v6e_host):
    report = tl.probe(**v6e_host, versions=WITH_TPU, accelerator=TPU_ACC, holds_tpu=True, environ={})
    assert report.holds_tpu is True
    finding = next(f for f in report.findings if f.code == "kernel-holds-tpu")
    assert "Device or resource busy" in finding.message and "Restart the kernel" in finding.fix


def test_stale_launch_env(tmp_path):
    env = {"TORCH_TPU_TOPOLOGY": "2,2,1", "TORCH_TPU_SLICEBUILDER_ADDRESSES": "localhost:1,localhost:2"}
    report = tl.probe(sysfs_root=tmp_path, accelerator=NO_GPU, environ=env)
    assert "stale-launch-env" in codes(report)
    assert report.environment == env


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TORCH_DEVICE_BACKEND_AUTOLOAD", "true"),
        ("TORCH_TPU_INTERNAL_HANDSHAKE_PORT", "80000"),
        ("TORCH_TPU_INTERNAL_HANDSHAKE_PORT", "abc"),
        ("TPU_VISIBLE_CHIPS", "0;1"),
        ("TPU_PROCESS_BOUNDS", "2,x,1"),
    ],
)
def test_malformed_environment_is_an_error_finding(tmp_path, name, value):
    report = tl.probe(sysfs_root=tmp_path, accelerator=NO_GPU, environ={name: value, "HOME": "/root"})
    finding = next(f for f in report.findings if f.code == "malformed-env")
    assert finding.severity == "error" and name in finding.message and name in finding.fix
    assert report.findings[0] is finding  # errors sort first
    assert "HOME" not in report.environment


@pytest.mark.parametrize(
    "env", [{"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, {"TPU_VISIBLE_CHIPS": "0,1,2,3"}, {"PJRT_DEVICE": "TPU"}]
)
def test_wellformed_environment_is_reported_not_flagged(tmp_path, env):
    report = tl.probe(sysfs_root=tmp_path, accelerator=NO_GPU, environ=env)
    assert report.environment == env
    assert "malformed-env" not in codes(report)


def test_diagnose_is_pure_and_sorted():
    from tpu_lab.host.chips import TpuChips

    findings = diagnose(
        versions={"torch": "2.14.1", "torch_tpu": "0.2.0"},
        chips=TpuChips(0, None, None, (), ()),
        accelerator=NO_GPU,
        holds_tpu=None,
        device="cpu",
        environ={"TPU_VISIBLE_CHIPS": "x"},
    )
    assert [f.severity for f in findings] == ["error", "warning", "info"]


def test_report_renders_text_html_and_json(v6e_host):
    report = tl.probe(**v6e_host, versions=WITH_TPU, accelerator=TPU_ACC, environ={})
    bundle = report._repr_mimebundle_()
    assert "4 x TPU v6e, 32 GiB HBM each, ranks per host: 1, 4" in bundle["text/plain"]
    assert "data-code='auto-device-map-cpu'" in bundle["text/html"]
    data = json.loads(report.to_json())
    assert data["tpu"]["rank_counts"] == [1, 4] and data["device"] == "tpu"


def test_html_escapes_environment_values(tmp_path):
    report = tl.probe(sysfs_root=tmp_path, accelerator=NO_GPU, environ={"XLA_FLAGS": "<script>x</script>"})
    assert "<script>" not in report.to_html()


def test_memory_reads_meminfo_and_cgroup_limits(tmp_path):
    from tpu_lab.host.memory import memory_gib

    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    cgroup.mkdir()
    (proc / "meminfo").write_text("MemTotal:       25165824 kB\nMemFree: 1 kB\n")
    assert memory_gib(proc, cgroup) == 24.0
    (cgroup / "memory.max").write_text("2147483648\n")  # a Binder-sized container
    assert memory_gib(proc, cgroup) == 2.0
    (cgroup / "memory.max").write_text("max\n")
    assert memory_gib(proc, cgroup) == 24.0
    assert memory_gib(tmp_path / "none", tmp_path / "none") is None
    assert tl.probe().memory_gib > 0
