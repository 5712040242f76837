"""Every launched rank inside the compile watcher, with real torchrun ranks and real Dynamo compiles
(aot_eager, tiny tensors): the tables come back in LaunchResult.compiles, live in the run state while the
ranks run, and in words where ranks diverge; ranks that crash, never compile or disable Dynamo (by its
config or torch.compiler.disable); 1, 2 and 4 ranks; ssh hosts."""

import time

import pytest

import tpu_lab as tl
from tpu_lab.errors import LaunchError
from tpu_lab.tp.launch.api import start
from tpu_lab.tp.results.live_compiles import compile_words

pytestmark = pytest.mark.slow

STEP = """
import os, torch
rank = int(os.environ["RANK"])
def step(x):
    return (x * 2).sum()
"""

MIXED = (
    STEP
    + """
if rank == 2:
    torch._dynamo.config.disable = True
f = torch.compile(step, backend="aot_eager", dynamic=False)
if rank == 3:
    f = torch.compiler.disable(f)
f(torch.ones(1, 96 if rank == 1 else 64))
f(torch.ones(1, 96 if rank == 1 else 64))
"""
)


def test_four_ranks_each_diverging_their_own_way():
    result = tl.launch(MIXED, nproc=4, timeout=300)
    c = result.compiles
    assert c is not None and [t.compiles for t in c.tables] == [1, 1, 0, 0]
    assert [t.seen for t in c.tables] == [True, True, True, True]
    assert c[2].dynamo_disabled and c[0].rows[0]["signature"] == "x: f32[1, 64]"
    words = [f.message for f in c.findings]
    assert any(m.startswith("rank 1: step x f32[1, 96] where rank 0 had f32[1, 64]") for m in words)
    assert any(m.startswith("rank 2 compiled nothing") and "disable = True" in m for m in words)
    assert any(m.startswith("rank 3 compiled nothing") and "torch.compiler.disable" in m for m in words)
    assert "compiles per rank: 4 rank(s), 2 compile(s)" in str(result)  # shown with the result
    assert "tpu-lab-rank-compiles" in result.to_html()


def test_one_rank_and_watch_off_and_a_torch_free_rank_stays_torch_free():
    code = STEP + 'torch.compile(step, backend="aot_eager")(torch.ones(3))\n'
    one = tl.launch(code, nproc=1, timeout=120)
    assert one.compiles is not None and one.compiles.total == 1 and one.compiles.findings == ()
    assert one.compiles[0].live.done and one.compiles[0].live.count == 1
    off = tl.launch(code, nproc=1, timeout=120, watch=False)
    assert off.compiles is None and "compiles per rank" not in str(off)
    light = tl.launch("import sys, tpu_lab as tl\ntl.report('torch' in sys.modules)", nproc=2, timeout=60)
    assert light.values == [False, False]  # watching costs a torch-free rank no torch import
    assert light.compiles is not None and light.compiles.total == 0 and light.compiles.findings == ()


SLOW_ON_RANK_1 = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
def slow(gm, example_inputs):
    if os.environ.get("DIE"):
        os._exit(3)  # dies mid-compile
    time.sleep(8)
    return gm.forward
def step(x):
    return (x + 1).sum()
torch.compile(step, backend="aot_eager")(torch.ones(2))
if dist.get_rank() == 1:
    torch.compile(step, backend=slow)(torch.ones(5, 5))
dist.barrier()
"""


def test_live_compile_state_names_who_compiles_and_who_waits():
    run = start(SLOW_ON_RANK_1, nproc=2)
    seen, deadline = [], time.monotonic() + 120
    while not run.stream(lambda rank, line: None, 0.3) and time.monotonic() < deadline:
        words = compile_words(run.state)
        if words:
            seen.append(words)
        if len(seen) > 3:
            break
    live = run.state.ranks[1].compiles
    result = run.wait(120)
    assert any(w.startswith("rank 1 compiling step for ") and w.endswith("s, rank 0 waiting") for w in seen), seen
    assert live is not None and live.compiling and live.inputs == "x: f32[5, 5]"
    assert run.state.ranks[0].compiles is not None and run.state.ranks[0].compiles.count == 1
    assert [t.compiles for t in result.compiles.tables] == [1, 2]


def test_a_rank_that_dies_mid_compile_leaves_its_table():
    with pytest.raises(LaunchError) as e:
        tl.launch(SLOW_ON_RANK_1, nproc=2, timeout=120, env={"DIE": "1"})
    c = e.value.result.compiles
    assert c is not None and c[1].compiles == 1  # the compile before the one it died in
    assert c[1].live.function is not None and c[1].live.function.startswith("step") and not c[1].live.done
    assert any(f.message.startswith("rank 1 ended while compiling step") for f in c.findings)


DIVERGE_2 = (
    STEP
    + """
f = torch.compile(step, backend="aot_eager", dynamic=False)
f(torch.ones(1, 64 + 32 * rank))
print("done", flush=True)
"""
)


def test_launch_panel_and_tp_run_show_compiles_per_rank(ipython_shell):
    panel = tl.widgets.LaunchPanel(DIVERGE_2, nproc=2)
    assert panel.start().wait(180).ok
    for view in panel.rank_views:
        assert "<span class='tpu-lab-rank-compiles'>1 compile</span>" in view.value
    assert "rank 1: step x f32[1, 96] where rank 0 had f32[1, 64]" in panel.compiles.value
    off = ipython_shell.run_cell_magic("tp_run", "-n 1 --no-watch --timeout 60", "print('hi')")
    assert off.ok and off.compiles is None and ipython_shell.user_ns["_tp_result"] is off


def test_across_ssh_hosts_live_and_in_the_result(sshd):
    run = start(DIVERGE_2, nproc=1, hosts=["127.0.0.2", "127.0.0.3"], remote=sshd.remote)
    result = run.wait(240)
    assert [r.compiles.count for r in run.state.ranks] == [1, 1]  # forwarded live by each host runner
    assert [t.rows[0]["signature"] for t in result.compiles.tables] == ["x: f32[1, 64]", "x: f32[1, 96]"]
    assert result.compiles.findings[0].message.startswith("rank 1: step x f32[1, 96] where rank 0 had f32[1, 64]")
