import json
import shutil
import warnings

import pytest
from _kernels_range import declared_kernels_range

import tpu_lab as tl
from tpu_lab.errors import (
    DeviceUnavailable,
    HubUnreachable,
    InvalidArgument,
    KernelsUnavailable,
    ModelLoadError,
    TpuLabWarning,
)
from tpu_lab.host.probe import device_choices
from tpu_lab.host.versions import kernels_status
from tpu_lab.models.loading import check_kernels
from tpu_lab.models.placement import inspect_placement


@pytest.fixture
def tiny_copy(tmp_path):
    """A private copy of the tiny Qwen3 checkpoint that a test may damage."""
    dst = tmp_path / "ckpt"
    shutil.copytree(tl.tiny_model(), dst)
    return dst


@pytest.mark.parametrize(("preset", "cls"), [("tiny:qwen3", "Qwen3ForCausalLM"), ("tiny:llama", "LlamaForCausalLM")])
def test_load_tiny_models_and_report(preset, cls):
    loaded = tl.load_model(preset)
    r = loaded.report
    assert type(loaded.model).__name__ == cls
    assert r.source == "tiny" and r.device == r.device_map == "cpu" and r.dtype == "float32"
    n_tensors = len(list(loaded.model.parameters())) + len(list(loaded.model.buffers()))
    assert r.placement == {"cpu": n_tensors}
    assert r.dtypes == {"float32": n_tensors}
    assert r.parameters == sum(p.numel() for p in loaded.model.parameters())
    assert r.bytes >= r.parameters * 4
    assert r.tied_embeddings is False and r.tied_shared is None
    assert r.misplaced == () and r.ok and r.findings == ()
    assert loaded.tokenizer.pad_token == "<|pad|>"
    assert not loaded.model.training
    model, tokenizer = loaded  # unpacks like the two from_pretrained calls it replaces
    assert model is loaded.model and tokenizer is loaded.tokenizer


def test_tied_model_keeps_one_tensor():
    r = tl.load_model("tiny:qwen3-tied").report
    assert r.tied_embeddings is True and r.tied_shared is True and r.ok
    untied_params = tl.load_model("tiny:qwen3").report.parameters
    assert r.parameters < untied_params  # the shared matrix is counted once


def test_split_tied_weights_are_flagged():
    import torch

    loaded = tl.load_model("tiny:qwen3-tied")
    model = loaded.model
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    r = inspect_placement(
        model, name="x", source="local", path="x", device="cpu", device_map="cpu", dtype="float32", seconds=0.0
    )
    assert r.tied_shared is False and not r.ok
    assert [f.code for f in r.findings] == ["tied-weights-split"]


def test_misplaced_and_meta_tensors_are_flagged():
    import torch

    model = tl.load_model("tiny:qwen3").model
    r = inspect_placement(
        model, name="x", source="local", path="x", device="cuda:0", device_map="cuda:0", dtype="float32", seconds=0.0
    )
    assert len(r.misplaced) == r.placement["cpu"] and "weights-misplaced" in [f.code for f in r.findings]
    model.model.norm.weight = torch.nn.Parameter(torch.empty(64, device="meta"))
    r = inspect_placement(
        model, name="x", source="local", path="x", device="cpu", device_map="cpu", dtype="float32", seconds=0.0
    )
    assert r.misplaced == ("model.norm.weight",) and [f.code for f in r.findings] == ["weights-on-meta"]
    assert "MISPLACED" in str(r)


def test_dtype_choice():
    r = tl.load_model("tiny:qwen3", dtype="bf16").report
    assert r.dtype == "bfloat16" and r.dtypes.get("bfloat16", 0) >= 20


def test_local_folder_and_progress(tiny_copy):
    seen = []
    loaded = tl.load_model(tiny_copy, progress=lambda desc, n, total: seen.append((desc, n, total)))
    assert loaded.report.source == "local"
    assert seen[0] == ("Loading weights", 0, seen[-1][2]) and seen[-1][1] == seen[-1][2] > 0


def test_device_none_takes_the_probe_pick():
    assert tl.load_model("tiny:qwen3", device=None).report.device == tl.probe().device


def test_auto_is_replaced_with_a_warning():
    with pytest.warns(TpuLabWarning, match="device=\"auto\" was replaced by 'cpu'"):
        r = tl.load_model("tiny:qwen3", device="auto").report
    assert r.device_map == "cpu" and "auto-replaced" in [f.code for f in r.findings]


def test_device_map_is_understood_as_one_device():
    # transformers' spelling, the likeliest thing to type after notebooks 01-02
    assert tl.load_model("tiny:qwen3", device_map="cpu").report.device_map == "cpu"
    with pytest.warns(TpuLabWarning, match="device=\"auto\" was replaced by 'cpu'"):
        assert tl.load_model("tiny:qwen3", device_map="auto").report.device_map == "cpu"


def test_report_renders():
    bundle = tl.load_model("tiny:qwen3").report._repr_mimebundle_()
    assert "placement" in bundle["text/plain"] and "cpu: " in bundle["text/html"]


# Bad inputs: each a clear error with the fix, and the next load still works.


def test_nonexistent_path():
    with pytest.raises(ModelLoadError, match=r"No checkpoint folder at '\./no/such/model'") as e:
        tl.load_model("./no/such/model")
    assert "tl.tiny_model()" in e.value.fix


@pytest.mark.timeout(15)
def test_hub_id_offline_fails_fast():
    with pytest.raises(HubUnreachable, match="not reachable") as e:
        tl.load_model("Qwen/Qwen3-0.6B")
    assert "tl.tiny_model()" in e.value.fix and "local checkpoint" in e.value.fix


def test_hub_offline_env_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnreachable, match="HF_HUB_OFFLINE=1"):
        tl.load_model("Qwen/Qwen3-8B")


def test_tpu_without_chip():
    with pytest.raises(DeviceUnavailable, match="no TPU chip is visible") as e:
        tl.load_model("tiny:qwen3", device="tpu")
    assert "device='cpu'" in e.value.fix


def test_cuda_without_gpu():
    with pytest.raises(DeviceUnavailable, match="sees 0 CUDA GPU"):
        tl.load_model("tiny:qwen3", device="cuda")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "xla"])
def test_unknown_device(device):
    with pytest.raises(InvalidArgument, match="Unknown device"):
        tl.load_model("tiny:qwen3", device=device)


def test_unknown_dtype():
    with pytest.raises(InvalidArgument, match="Unknown dtype 'float8'") as e:
        tl.load_model("tiny:qwen3", dtype="float8")
    assert "bfloat16" in e.value.fix


def test_checkpoint_without_tokenizer(tiny_copy):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (tiny_copy / f).unlink()
    with pytest.raises(ModelLoadError, match="has no tokenizer") as e:
        tl.load_model(tiny_copy)
    assert "tokenizer.save_pretrained" in e.value.fix


def test_truncated_safetensors(tiny_copy):
    weights = tiny_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="truncated or corrupt") as e:
        tl.load_model(tiny_copy)
    assert "download or save" in e.value.fix
    weights.write_bytes(b"\x01")
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        tl.load_model(tiny_copy)


def test_needs_trust_remote_code(tiny_copy):
    config = json.loads((tiny_copy / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    (tiny_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="trust_remote_code=True") as e:
        tl.load_model(tiny_copy)
    assert "trust_remote_code=True" in e.value.fix
    # With trust: transformers really tries the (missing) code, and the error still explains itself.
    with pytest.raises(ModelLoadError, match=r"Loading .* failed"):
        tl.load_model(tiny_copy, trust_remote_code=True)


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        tl.load_model(tmp_path)


def test_bad_tiny_name():
    with pytest.raises(InvalidArgument, match="tiny:<arch>"):
        tl.load_model("tiny:qwen3-kvX")
    with pytest.raises(InvalidArgument, match="Unknown arch 'gpt'"):
        tl.load_model("tiny:gpt")


def test_kernel_still_usable_after_errors():
    for bad in ("./missing", "tiny:nope"):
        with pytest.raises(tl.TpuLabError):
            tl.load_model(bad)
    assert tl.load_model("tiny:qwen3").report.ok


def test_use_kernels_without_kernels_installed(monkeypatch):
    # transformers 5.25 requires kernels, so a fresh install has it: hide it as `pip uninstall kernels` would.
    import tpu_lab.host.versions as versions

    real = versions.installed_versions
    monkeypatch.setattr(versions, "installed_versions", lambda: {**real(), "kernels": None})
    with pytest.raises(KernelsUnavailable, match="needs kernels, which is not installed") as e:
        tl.load_model("tiny:qwen3", use_kernels=True)
    assert e.value.fix.startswith('pip install "kernels')


def test_use_kernels_with_what_is_installed():
    status = kernels_status()
    if status.missing or status.mismatch:
        with pytest.raises(KernelsUnavailable, match="kernels"):
            tl.load_model("tiny:qwen3", use_kernels=True)
    else:  # on CPU no jax is needed, and the tiny model has no Hub kernel to fetch
        assert tl.load_model("tiny:qwen3", use_kernels=True).report.ok


def test_kernels_checks():
    with pytest.raises(KernelsUnavailable, match="needs kernels and jax"):
        check_kernels("tpu", versions={"kernels": None, "jax": None})
    declared = declared_kernels_range()
    if declared is None:  # this transformers declares no range: any kernels passes
        check_kernels("tpu", versions={"kernels": "0.0.1", "jax": "0.10.2"})
        return
    spec, inside, outside = declared
    with pytest.raises(KernelsUnavailable, match=rf"kernels {outside} is installed but transformers") as e:
        check_kernels("tpu", versions={"kernels": outside, "jax": "0.10.2"})
    assert "use_kernels=False" in e.value.fix and f'pip install "kernels{spec}"' in e.value.fix
    check_kernels("tpu", versions={"kernels": inside, "jax": "0.10.2"})  # no error
    check_kernels("cpu", versions={"kernels": inside, "jax": None})  # jax only needed on TPU


def test_device_choices_from_reports(tmp_path):
    from tpu_lab.host.probe import AcceleratorInfo
    from tpu_lab.testing import write_fake_tpu_host

    here = {c.name: c for c in device_choices(tl.probe())}
    assert not here["tpu"].available and here["tpu"].reason == "no TPU chip visible"
    assert not here["cuda"].available and here["cpu"].available
    sysfs, dev = write_fake_tpu_host(tmp_path, "v6e", 4)
    vm = tl.probe(
        sysfs_root=sysfs,
        dev_root=dev,
        versions={"torch_tpu": None},
        accelerator=AcceleratorInfo("cpu", False, 0),
        environ={},
    )
    assert {c.name: c.reason for c in device_choices(vm)}["tpu"] == "torch_tpu not installed"


def test_warnings_are_not_raised_for_a_clean_load():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TpuLabWarning)
        tl.load_model("tiny:qwen3")


def test_hub_reachability_check_uses_hf_endpoint(monkeypatch):
    import socket

    from tpu_lab.models.checkpoint import hub_reachable

    for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        assert hub_reachable(timeout=2) is True
    assert hub_reachable(timeout=2) is False
