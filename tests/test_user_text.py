"""What a reader sees reads as prose: no Python values where words belong, no internal codes, no advice
that contradicts the numbers beside it. The checker (tests/_user_text.py) is tested on the defects once
seen, then applied to real reports (text and HTML), the CLI's help, and (in notebooks/conftest.py) to
the outputs of the notebooks nbmake runs; test_bad_inputs.py applies it to every error of its sweep."""

import argparse
from pathlib import Path

import pytest
from _user_text import CODES, defects, html_text, notebook_defects

import tpu_lab as tl
from tpu_lab.host.chips import TpuChips
from tpu_lab.host.probe import AcceleratorInfo
from tpu_lab.testing import write_fake_tpu_host


@pytest.mark.parametrize(
    "text",
    [
        "generate with  {}: Nothing is compiled by default on CPU.",
        "Use a count in [1, 4].",
        "Replicate the attention projections, or use a tp_size that divides 1.",
        "device: cpu; probe findings: auto-device-map-cpu",
        "batch (3, 'prompts') padded",
        "generate with {'cache_implementation': 'static'}: keep inputs on CPU",
        "intermediate / vocab   None / 1024",
        "new batch size 3 at length 32; batch buckets bound these; new batch size 3 at length 32",
        "loaded from PosixPath('/tmp/x')",
        "took 0.30000000000000004 s",
    ],
)
def test_the_checker_catches_each_class_of_defect_once_seen(text):
    assert defects(text), text


@pytest.mark.parametrize(
    "text",
    [
        'device_map="auto" would load the model on CPU here: accelerate has no TPU branch.',
        "Use 1 or 4 processes on this host, or a larger host / several hosts.",
        'Use e.g. tp_plan={"model.layers.*.self_attn.q_proj": "replicated_with_grad_allreduce"}.',
        "nproc=None must be a positive integer.",
        "lengths must be a non-empty list of positive token counts, got [].",
        "Pass `device=None` for the probe's pick.",
        "DistributedConfig(\n    tp_size=4,\n    tp_plan={\n        'model.layers.*.self_attn.q_proj': 'replicated_with_grad_allreduce',\n    },\n)",
    ],
)
def test_the_checker_passes_prose_and_code_meant_to_be_pasted(text):
    assert defects(text) == []


def test_codes_are_collected_from_the_package():
    assert {"auto-device-map-cpu", "heads-not-divisible", "more-ranks-than-chips", "weights-misplaced"} <= CODES


def _readable(report):
    bundle = report._repr_mimebundle_()
    found = defects(bundle["text/plain"]) + defects(html_text(bundle["text/html"]))
    assert found == [], "\n".join(found)


def _tpu_vm(tmp_path, **kw):
    sysfs, dev = write_fake_tpu_host(tmp_path, "v6e", chips=4)
    args = {
        "sysfs_root": sysfs,
        "dev_root": dev,
        "versions": {"torch_tpu": "0.2.0", "libtpu": "0.0.52"},
        "accelerator": AcceleratorInfo(type="tpu", available=True, count=4),
        "environ": {},
    }
    return tl.probe(**{**args, **kw})


def test_probe_reports_read_as_prose(tmp_path):
    _readable(tl.probe())
    _readable(_tpu_vm(tmp_path / "a", holds_tpu=True))
    _readable(_tpu_vm(tmp_path / "b", versions={"torch_tpu": None, "libtpu": None}))
    bad_env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "yes", "TPU_VISIBLE_CHIPS": "a,b", "TORCH_TPU_TOPOLOGY": "2x2"}
    _readable(_tpu_vm(tmp_path / "c", environ=bad_env))
    gpu = AcceleratorInfo(type="cuda", available=False, count=0, torch_cuda="13.0", cuda_devices=0)
    _readable(tl.probe(accelerator=gpu, versions={"kernels": "0.17.2", "transformers": "5.24.0"}))


def test_load_reports_read_as_prose():
    import warnings

    _readable(tl.load_model("tiny:qwen3", device="cpu").report)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _readable(tl.load_model("tiny:qwen3-tied", device="auto").report)


def test_preflight_reports_read_as_prose():
    v6e = TpuChips(4, "TPU v6e", 32, (1, 4, 8), ("a", "b", "c", "d"))
    _readable(tl.tp_preflight("tiny:qwen3-kv1", 2))  # 1 KV head: no tp_size above 1 divides it
    _readable(tl.tp_preflight("tiny:qwen3-kv2", 4, chips=v6e))
    _readable(tl.tp_preflight("tiny:qwen3-kv2", 8, chips=v6e))
    _readable(tl.tp_preflight("tiny:qwen3-kv2", 2, chips=v6e))  # 2 ranks: no v6e topology
    _readable(tl.tp_preflight("tiny:qwen3-tied", 2, tp_plan={"layers.*.self_attn.q_proj": "colwise"}))
    _readable(tl.tp_preflight("tiny:llama", 3, hosts=2))


def test_the_preflight_names_tp_sizes_that_work():
    kv1 = tl.tp_preflight("tiny:qwen3-kv1", 2)
    fix = next(p.fix for p in kv1.problems if p.code == "heads-not-divisible")
    assert "divides" not in fix and "replicated_with_grad_allreduce" in fix  # no tp_size above 1 divides 1
    kv2 = tl.tp_preflight("tiny:qwen3-kv2", 4)
    assert next(p.fix for p in kv2.problems if p.code == "heads-not-divisible").endswith("or use tp_size 2.")


def _actions(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from ((f"{name} {flag}", text) for flag, text in _actions(sub))
                yield name, sub.description or ""
        elif not isinstance(action, argparse._HelpAction):
            yield "/".join(action.option_strings) or action.dest, action.help or ""


def test_every_command_and_flag_has_help_in_words():
    from tpu_lab.cli import build_parser

    for name, text in _actions(build_parser()):
        assert text.strip(), f"{name} has no help"
        assert defects(text) == [], (name, defects(text))
    backend = next(t for n, t in _actions(build_parser()) if n == "demo --backend")
    assert "openxla" not in backend and "tvm" not in backend


def test_notebook_outputs_and_markdown_are_checked_but_a_cells_own_value_is_not():
    import nbformat.v4 as nbf

    nb = nbf.new_notebook()
    nb.cells = [
        nbf.new_markdown_cell("Use a count in [1, 4].\n\n```python\nsession.warmup([16, 48])\n```"),
        nbf.new_code_cell(
            "print(...)", outputs=[nbf.new_output("stream", name="stdout", text="hit the limit: True\n")]
        ),
        nbf.new_code_cell("buckets", outputs=[nbf.new_output("execute_result", data={"text/plain": "{}"})]),
        nbf.new_code_cell("report", outputs=[nbf.new_output("display_data", data={"text/html": "<p>vocab: None</p>"})]),
    ]
    found = notebook_defects(nb)
    assert [f.split(":")[0] for f in found] == ["cell 1", "cell 2", "cell 4"], found


def test_a_tpu_lab_error_renders_in_a_notebook_message_and_fix_first():
    # IPython shows an exception's _render_traceback_() instead of the traceback through library source.
    try:
        tl.tp_preflight("tiny:qwen3", 0)
    except tl.TpuLabError as e:
        shown = e._render_traceback_()
    assert shown[0].startswith("\x1b[1;31mInvalidArgument\x1b[0m: ") and "tp_size" in shown[0]
    assert any(line.startswith("Fix: ") for line in shown)
    assert any("test_user_text.py, line" in line and 'tl.tp_preflight("tiny:qwen3", 0)' in line for line in shown)
    package = str(Path(tl.__file__).parent) + "/"  # tpu_lab's own frames are folded (any clone folder name)
    assert not any(package in line for line in shown)
    assert "traceback.print_exception(sys.last_value)" in shown[-1]
