import functools

import tpu_lab as tl
from tpu_lab.errors import EnvironmentProblem
from tpu_lab.host.probe import AcceleratorInfo
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
        tl.probe,
        sysfs_root=sysfs,
        dev_root=dev,
        versions={"torch_tpu": "0.2.0"},
        accelerator=AcceleratorInfo("tpu", True, 8),
        holds_tpu=True,
        environ={},
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


def test_model_loader_loads_a_tiny_model():
    loader = tl.widgets.ModelLoader()
    assert loader.device.value == "cpu" and not loader.load_button.disabled
    labels = [label for label, _ in loader.device.options]
    assert "tpu (unavailable)" in labels  # short enough to show whole; the reason goes in the status line
    assert "Qwen/Qwen3-0.6B" in loader.model_name.options and "tiny:qwen3" in loader.model_name.options
    assert loader.model is None
    loader.load_button.click()
    assert loader.loaded is not None and loader.model is loader.loaded.model
    assert loader.tokenizer is loader.loaded.tokenizer
    assert loader.status.value.startswith("ok: tiny:qwen3 on <b>cpu</b>")
    assert "Model loaded" in loader.report_view.value and "cpu: 27" in loader.report_view.value
    assert loader.progress.value == loader.progress.max > 1
    assert loader.progress.description == "Loading weights" and loader.progress.style.description_width == "initial"
    assert not loader.load_button.disabled


def test_model_loader_says_when_a_hub_preset_needs_a_network():
    # No hub cache holds the seed's 8B model on a test machine: it would have to be downloaded.
    loader = tl.widgets.ModelLoader("Qwen/Qwen3-8B")
    assert "downloads from the Hugging Face Hub: it needs a network" in loader.hint.value
    assert "tiny:" in loader.hint.value
    loader.model_name.value = "tiny:qwen3"
    assert loader.hint.value == ""


def test_model_loader_disables_unavailable_devices():
    loader = tl.widgets.ModelLoader()
    loader.device.value = "tpu"
    assert loader.load_button.disabled and "no TPU chip visible" in loader.status.value
    loader.device.value = "cpu"
    assert not loader.load_button.disabled and loader.status.value == ""


def test_model_loader_shows_errors_and_keeps_working():
    loader = tl.widgets.ModelLoader("./not/a/model")
    assert loader.load() is None
    assert "load failed" in loader.status.value
    assert "tpu-lab-error" in loader.report_view.value and "tl.tiny_model()" in loader.report_view.value
    loader.dtype.value = "bfloat16"
    loader.model_name.value = "tiny:llama"
    loader.load_button.click()
    assert loader.loaded.report.dtype == "bfloat16" and type(loader.model).__name__ == "LlamaForCausalLM"


def test_generation_panel_runs_prompts_and_draws_table_and_chart():
    loaded = tl.load_model("tiny:qwen3")
    session = tl.GenerationSession(loaded.model, loaded.tokenizer, max_new_tokens=3)
    panel = tl.widgets.GenerationPanel(session)
    assert bytes(panel.chart.value) == b"" and "total: 0 compiles" in panel.table.value
    panel.run_button.click()
    assert (
        "<b>2 compiles</b>" in panel.status.value and "first prefill compile" not in panel.status.value
    )  # in the table
    assert "The French Bread Law states" in panel.output.value
    panel.prompt.value = "Hello world! How are you today?"
    panel.run_button.click()
    assert "prefill 1x5 cache=7" in panel.table.value and "prefill 1x8 cache=10" in panel.table.value
    assert "new prompt length 8" in panel.table.value and "bucket policies" in panel.table.value
    assert bytes(panel.chart.value).startswith(b"\x89PNG")
    panel.policy.value = "recommended"
    assert session.buckets == (5, 8) and panel.status.value == "buckets: 5, 8"
    panel.warmup_button.click()
    assert panel.status.value == "warmed up 2 shapes: 3 compiles"
    panel.run_button.click()
    assert "<b>0 compiles</b>" in panel.status.value
    panel.prompt.value = ""
    assert panel.run() is None and "The prompt is empty" in panel.output.value
    session.close()


def test_generation_panel_shows_the_limit_banner_and_policy_hints():
    loaded = tl.load_model("tiny:qwen3")
    session = tl.GenerationSession(loaded.model, loaded.tokenizer, max_new_tokens=2, recompile_limit=2)
    panel = tl.widgets.GenerationPanel(session)
    panel.policy.value = "recommended"
    assert "Run a few prompts first" in panel.output.value and session.buckets is None
    panel.warmup_button.click()
    assert "Nothing to warm up" in panel.output.value
    for text in ("one", "one two three four", "one two three four five six seven"):
        panel.prompt.value = text
        panel.run()
    assert session.limit_hit and "tpu-lab-limit-banner" in panel.table.value
    session.close()


def test_launch_panel_shows_each_rank_and_its_state():
    code = "import os, tpu_lab as tl\nfor i in range(3):\n    print('step', i, 'on', os.environ['RANK'])\ntl.report(1)"
    panel = tl.widgets.LaunchPanel(code, nproc=2)
    assert "not started" in panel.header.value and panel.stop_button.disabled
    result = panel.start().wait(120)
    assert result.ok and panel.error is None
    assert "2 ok" in panel.header.value and panel.stop_button.disabled
    for rank, view in enumerate(panel.rank_views):
        assert f"data-rank='{rank}'" in view.value and ">ok</span>" in view.value
        assert f"step 2 on {rank}" in view.value


def test_launch_panel_stop_and_failures():
    from tpu_lab.tp.launch.process import run_pids

    panel = tl.widgets.LaunchPanel("import time\nprint('sleeping', flush=True)\ntime.sleep(120)", nproc=2).start()

    assert wait_for(lambda: all("sleeping" in v.value for v in panel.rank_views), 60)  # the logs fill live
    assert not panel.stop_button.disabled
    panel.stop_button.click()
    panel.wait(60)
    assert isinstance(panel.error, tl.LaunchError) and "stopped by you (Stop button)" in str(panel.error)
    # A calm note, not an error box with torchrun's traceback; each rank keeps its last lines.
    assert "Stopped by you after" in panel.message.value and "tpu-lab-error" not in panel.message.value
    assert "SignalException" not in panel.message.value and "sleeping" in panel.rank_views[1].value
    # This run's processes only: other launches on the same host (other users, other tests) are not ours.
    assert "stopped" in panel.rank_views[0].value and run_pids(panel.result.run_id) == []
    assert "2 stopped" in panel.header.value  # killed ranks are stopped, not finished
    failing = tl.widgets.LaunchPanel("import os\nif os.environ['RANK'] == '1':\n    raise KeyError('k')", nproc=2)
    failing.start().wait(60)
    assert "failed (exit 1)" in failing.rank_views[1].value and "KeyError" in failing.message.value
    bad = tl.widgets.LaunchPanel("print(", nproc=2).start()
    assert "syntax error" in bad.message.value and bad.run is None


def test_watch_panel_follows_a_loop_and_draws_the_chart():
    import torch

    f = torch.compile(lambda x: x * 2, backend="eager")
    panel = tl.widgets.WatchPanel()
    with panel:
        for batch in (1, 2, 2, 3):
            f(torch.ones(batch))
        seen_live = wait_for(lambda: "lambda" in panel.table.value, 5)  # redrawn while the block still runs
    assert seen_live
    assert "tpu-lab-table" in panel.table.value and "lambda" in panel.table.value
    assert panel.watch.table.total_compiles >= 2 and "compiles," in panel.status.value
    assert panel.chart.value  # PNG bytes


def wait_for(condition, seconds):
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False
