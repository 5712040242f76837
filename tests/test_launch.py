"""The torchrun launcher: argv/env as a pure function, and real torchrun processes on CPU (gloo)."""

import _thread
import sys
import threading
import time
from pathlib import Path

import pytest
from _processes import leftovers

import tpu_lab as tl
from tpu_lab.errors import InvalidArgument
from tpu_lab.tp.launch.torchrun_command import RUN_ID_ENV, LaunchSpec, build_command


def spec(**kw):
    base = dict(script=Path("/r/worker.py"), nproc=2, run_dir=Path("/r"), run_id="abc", port=29555)
    return LaunchSpec(**{**base, **kw})


def test_build_command_argv():
    argv, _ = build_command(spec(args=("--x", "1")), {})
    assert argv[:3] == [sys.executable, "-m", "tpu_lab.tp.launch.torchrun_main"]  # torchrun's main, loopback rendezvous
    assert "--nproc-per-node=2" in argv and "--rdzv-endpoint=127.0.0.1:29555" in argv
    assert "--rdzv-backend=tpu_lab-bound" in argv and "--shutdown-timeout=2" in argv and "--nnodes=1" in argv
    assert "--rdzv-id=abc" in argv and "--max-restarts=0" in argv and "--redirects=3" in argv
    assert argv[-5:] == ["-m", "tpu_lab.tp.launch.rank_worker", "/r/worker.py", "--x", "1"]


def test_build_command_env_drops_stale_and_marks_the_run():
    stale = {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "1",
        "TORCHELASTIC_RUN_ID": "old",
        "TORCH_TPU_TOPOLOGY": "2,2,1",
        "HOME": "/root",
    }
    _, env = build_command(spec(env={"FOO": "bar"}, tpu_env={"TORCH_TPU_TOPOLOGY": "1,1,1"}), stale)
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"} & set(env)
    assert env["TORCH_TPU_TOPOLOGY"] == "1,1,1"  # fresh from the child, never the stale one
    assert env["HOME"] == "/root" and env["FOO"] == "bar"
    assert env[RUN_ID_ENV] == "abc" and env["TPU_LAB_RESULT_DIR"] == "/r" and env["PYTHONUNBUFFERED"] == "1"
    assert env["GLOO_SOCKET_IFNAME"] == "lo"  # the ranks' own gloo sockets stay on loopback too
    _, across = build_command(spec(nnodes=2, master="10.0.0.2"), {"HOME": "/root"})
    assert "GLOO_SOCKET_IFNAME" not in across  # across hosts gloo must listen where the others reach it


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"code_or_path": "print(1)", "nproc": 0}, "nproc=0"),
        ({"code_or_path": "print(1)", "nproc": 1.5}, "nproc=1.5"),
        ({"code_or_path": "def f(:\n  pass", "nproc": 2}, "syntax error at line 1"),
        ({"code_or_path": "", "nproc": 2}, "code is empty"),
        ({"code_or_path": "missing_worker.py", "nproc": 2}, "No worker script"),
        ({"code_or_path": "print(1)", "nproc": 2, "timeout": -1}, "timeout=-1"),
        ({"code_or_path": "print(1)", "nproc": 2, "env": {"A": 1}}, r"env\['A'\] must be a string"),
    ],
)
def test_bad_inputs_start_nothing(kwargs, match):
    with pytest.raises(InvalidArgument, match=match) as e:
        tl.launch(**kwargs)
    assert e.value.fix
    assert leftovers() == []


GENERATE = """
import os, tpu_lab as tl
from transformers import AutoModelForCausalLM, AutoTokenizer, DistributedConfig
path = tl.tiny_model(arch="{arch}", kv_heads={kv})
tok = AutoTokenizer.from_pretrained(path)
world = int(os.environ["WORLD_SIZE"])
config = DistributedConfig(tp_size=world, tp_plan={plan}) if world > 1 else None
model = AutoModelForCausalLM.from_pretrained(path, distributed_config=config)
inputs = tok("The French Bread Law states", return_tensors="pt")
out = model.generate(**inputs, max_new_tokens=8, min_new_tokens=8, do_sample=False)
tl.report(out[0].tolist())
"""


def generate_code(arch="qwen3", kv=4, plan=None):
    return GENERATE.format(arch=arch, kv=kv, plan=repr(plan))


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "nproc"), [("qwen3", 2), ("llama", 4)])
def test_tensor_parallel_tokens_equal_one_process(arch, nproc, capsys):
    single = tl.launch(generate_code(arch), nproc=1)
    sharded = tl.launch(generate_code(arch), nproc=nproc)
    assert sharded.ok and len(sharded.ranks) == nproc
    assert all(v == single.values[0] for v in sharded.values)
    assert len(single.values[0]) == 5 + 8
    out = capsys.readouterr().out
    assert "[rank 0] " in out and f"[rank {nproc - 1}] " in out  # streamed, labelled by rank
    assert leftovers() == []


@pytest.mark.slow
def test_kv2_tp4_predicted_reproduced_and_fixed():
    report = tl.tp_preflight("tiny:qwen3-kv2", 4)
    assert not report.ok and report.suggestion_fixes_all
    with pytest.raises(tl.LaunchError) as e:
        tl.launch(generate_code(kv=2), nproc=4)
    result = e.value.result
    assert all(r.exit_code == 1 for r in result.ranks)  # the first forward fails on every rank
    assert all("is invalid for input of size" in r.error for r in result.ranks)
    assert "shape '[1, 5, -1, 16]' is invalid" in str(e.value)
    fixed = tl.launch(generate_code(kv=2, plan=report.suggested_tp_plan), nproc=4)
    single = tl.launch(generate_code(kv=2), nproc=1)
    assert fixed.ok and all(v == single.values[0] for v in fixed.values)


@pytest.mark.slow
def test_crashing_rank_stops_the_others_fast():
    code = "import os, time\nif os.environ['RANK'] == '1':\n    raise ValueError('boom on rank 1')\ntime.sleep(120)"
    start = time.monotonic()
    with pytest.raises(tl.LaunchError, match="Rank 1 failed") as e:
        tl.launch(code, nproc=2)
    assert time.monotonic() - start < 10
    message = str(e.value)
    assert "argv: " in message and "tpu_lab.tp.launch.torchrun_main" in message
    assert "rank 1: failed (exit 1)" in message and "rank 0: stopped" in message
    assert "ValueError: boom on rank 1" in message and "worker.py" in message
    assert leftovers() == []


def test_a_cell_interrupt_reads_as_a_stop_not_a_crash():
    # The kernel's interrupt button is a KeyboardInterrupt in the main thread once every rank runs:
    # one sentence and each rank's last line, still a KeyboardInterrupt (never swallowed by `except Exception`).
    code = "import time\nprint('started', flush=True)\ntime.sleep(120)"
    started = []

    def on_output(rank, line):
        if rank is not None and line == "started":
            started.append(rank)
            if len(started) == 2:  # once: a second interrupt would give up collecting the last lines
                threading.Thread(target=_thread.interrupt_main).start()

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt) as e:
        tl.launch(code, nproc=2, on_output=on_output)
    assert time.monotonic() - start < 60
    assert isinstance(e.value, tl.LaunchInterrupted) and not isinstance(e.value, Exception)
    shown = e.value._render_traceback_()
    assert "The launch was stopped by you (interrupted) after" in shown[0]
    assert "every process of the run was stopped" in shown[0]
    assert any("rank 0: stopped" in line and "last line: started" in line for line in shown)
    assert not any("Traceback" in line or "queue.py" in line for line in shown)
    assert e.value.result is not None and all(r.state.startswith("stopped") for r in e.value.result.ranks)
    assert leftovers() == []


@pytest.mark.slow
def test_hanging_rank_is_killed_at_the_timeout():
    code = "import os, time\nif os.environ['RANK'] == '0':\n    time.sleep(600)\nprint('rank 1 done')"
    # 10 s: rank 1 must finish first, and torchrun alone takes ~4 s to start on a loaded 2-core machine
    # with the default (CUDA) torch wheel.
    with pytest.raises(tl.LaunchError, match="timed out after 10 s") as e:
        tl.launch(code, nproc=2, timeout=10)
    assert e.value.result.ranks[1].exit_code == 0
    assert e.value.result.ranks[0].state.startswith("stopped")
    assert leftovers() == []


@pytest.mark.slow
def test_launch_after_a_failed_one_works():
    with pytest.raises(tl.LaunchError):
        tl.launch("raise SystemExit(3)", nproc=2)
    result = tl.launch("import os, tpu_lab as tl\ntl.report(os.environ['WORLD_SIZE'])", nproc=2)
    assert result.values == ["2", "2"]


@pytest.mark.slow
def test_chatty_worker_never_stalls():
    code = "import os\nfor i in range(100_000):\n    print('x' * 60, i)\nimport tpu_lab as tl\ntl.report('done')"
    lines = []
    result = tl.launch(code, nproc=2, timeout=120, on_output=lambda rank, line: lines.append(rank))
    assert result.values == ["done", "done"]
    assert lines.count(0) >= 100_000 and lines.count(1) >= 100_000


@pytest.mark.slow
def test_values_that_are_not_json_fail_clearly():
    with pytest.raises(tl.LaunchError) as e:
        tl.launch("import tpu_lab as tl\ntl.report({1, 2})", nproc=2)
    assert "JSON cannot encode" in str(e.value) and "tolist()" in str(e.value)


@pytest.mark.slow
def test_a_script_path_and_args(tmp_path):
    script = tmp_path / "w.py"
    script.write_text("import sys, tpu_lab as tl\ntl.report(sys.argv[1:])\n")
    assert tl.launch(script, nproc=2, args=["a", "b"]).values == [["a", "b"], ["a", "b"]]


def test_report_outside_a_launch_warns(monkeypatch):
    monkeypatch.delenv("TPU_LAB_RESULT_DIR", raising=False)
    with pytest.warns(tl.errors.TpuLabWarning, match="outside a tl.launch worker"):
        tl.report(1)


def test_tpu_host_rank_checks():
    from tpu_lab.host.chips import TpuChips
    from tpu_lab.tp.launch.tpu_env import check_tpu_ranks

    v6e = TpuChips(4, "TPU v6e", 32, (1, 4), ("a", "b", "c", "d"))
    with pytest.raises(InvalidArgument, match=r"nproc=8: 8 processes need 8 TPU chips .* but this host has 4") as e:
        check_tpu_ranks(8, v6e, kernel_holds_tpu=False)
    assert e.value.fix == "Use 1 or 4 processes on this host, or a larger host / several hosts."
    with pytest.raises(InvalidArgument, match="No TPU topology found for count: 2"):
        check_tpu_ranks(2, v6e, kernel_holds_tpu=False)
    with pytest.raises(tl.LaunchError, match="already holds the TPU") as e:
        check_tpu_ranks(4, v6e, kernel_holds_tpu=True)
    assert "restart the kernel" in e.value.fix
    check_tpu_ranks(4, v6e, kernel_holds_tpu=False)  # allowed


@pytest.mark.slow
def test_one_line_code_ending_in_py_is_code_and_legacy_encodings_run(tmp_path):
    # Not a file name (it has spaces and "="): run as code, which fails in the rank, not "No worker script".
    with pytest.raises(tl.LaunchError, match="NameError"):
        tl.launch("x = worker.py", nproc=1, on_output=lambda rank, line: None)
    script = tmp_path / "latin.py"  # Python runs a file in the encoding its coding declaration names
    script.write_bytes("# -*- coding: latin-1 -*-\nimport tpu_lab as tl\ntl.report('café')\n".encode("latin-1"))
    assert tl.launch(script, nproc=1, on_output=lambda rank, line: None).values == ["café"]
    assert leftovers() == []
