"""tl.launch on a real Ray cluster: a head and two worker nodes (separate raylets) started here on
127.0.0.1, CPU only, the dashboard off; real torchrun processes with gloo in one Ray actor per host.
Leftovers are asked of the cluster's own tables (placement groups, actors) and of /proc (processes)."""

import _thread
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import tpu_lab as tl
from tpu_lab.testing.ray_cluster import HOST_RESOURCE, LocalRayCluster
from tpu_lab.tp.launch.api import start
from tpu_lab.tp.launch.runners import ray_cluster
from tpu_lab.tp.results.run_state import RankState

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

GLOO = """
import torch, torch.distributed as dist, tpu_lab as tl
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.randn(8, generator=torch.Generator().manual_seed(rank))
total = x.clone()
dist.all_reduce(total)
parts = [torch.zeros(8) for _ in range(world)]
dist.all_gather(parts, x)
print("sum", round(float(total.sum()), 4), flush=True)
tl.report({"rank": rank, "world": world, "sum": total.tolist(), "gathered": [p.tolist() for p in parts]})
dist.destroy_process_group()
"""
SLEEP = "import time\nprint('started', flush=True)\ntime.sleep(120)"


@pytest.fixture(scope="module")
def cluster():
    local = LocalRayCluster(workers=2)
    yield local
    local.stop()
    assert local.pids() == [], "processes of the Ray cluster left"


@pytest.fixture
def two_hosts(cluster):
    return tl.RayCluster(address=cluster.address, hosts=2, resources={"CPU": 1, HOST_RESOURCE: 1})


def launch_pids() -> list[int]:
    """Every torchrun and rank of a Ray launch of this test session (marker ``<run>-node<k>-``) and every
    host actor's process (Ray names it ``ray::RayHost...``)."""
    found = []
    session = f"TPU_LAB_TEST_SESSION={os.environ['TPU_LAB_TEST_SESSION']}".encode()  # tests/conftest.py
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] == "Z":
            continue
        if session not in env:
            continue  # another session's (the machine may be shared)
        marks = [e for e in env if e.startswith(b"TPU_LAB_RUN_ID=")]
        if (marks and re.search(rb"-node\d+-$", marks[0])) or cmdline.startswith(b"ray::RayHost"):
            found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "(gone)"


def cluster_leftovers() -> tuple[list[str], list[str]]:
    """(placement groups not removed, actors not dead), from the cluster's own tables (GCS)."""
    import ray
    from ray._private import state
    from ray.util.placement_group import placement_group_table

    if not ray.is_initialized():
        return [], []
    groups = [g["name"] for g in placement_group_table().values() if g["state"] != "REMOVED"]
    actors = [a["Name"] for a in state.actors().values() if a["State"] != "DEAD"]
    return groups, actors


def nothing_left(within: float = 0.0) -> None:
    deadline = time.monotonic() + within
    while (launch_pids() or any(cluster_leftovers())) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: _cmdline(pid) for pid in launch_pids()}
    assert left == {}, "processes of the launch left on a node"
    assert cluster_leftovers() == ([], []), "placement groups or actors left in the cluster"


def test_two_hosts_by_two_ranks_equal_four_ranks_on_one_host(two_hosts, capsys):
    one = tl.launch(GLOO, nproc=4, timeout=240)
    two = tl.launch(GLOO, nproc=2, cluster=two_hosts, timeout=240)
    assert two.ok and two.values == one.values  # the same collectives, the same numbers, rank by rank
    assert [v["world"] for v in two.values] == [4] * 4
    names = [h.host for h in two.hosts]
    assert len(set(names)) == 2 and [(h.node_rank, h.ranks, h.state) for h in two.hosts] == [
        (0, (0, 1), "ok"),
        (1, (2, 3), "ok"),
    ]
    assert [r.host for r in two.ranks] == [names[0], names[0], names[1], names[1]]
    assert "--rdzv-conf=rank=1" in two.hosts[1].argv and "--rdzv-endpoint=127.0.0.1:" in " ".join(two.hosts[1].argv)
    out = capsys.readouterr().out
    total = round(sum(one.values[0]["sum"]), 4)
    for rank, host in ((0, names[0]), (3, names[1])):
        assert f"[{host} rank {rank}] sum {total}" in out  # one stream, each line labelled host and rank
    nothing_left(within=5)


def test_the_string_address_reaches_the_same_cluster(cluster):
    code = "import os, tpu_lab as tl\ntl.report([os.environ['GROUP_RANK'], os.environ['TPU_LAB_RUN_ID']])"
    result = tl.launch(code, nproc=1, cluster=cluster.address, timeout=120)  # hosts: every node with a CPU
    assert len(result.hosts) == 3 and [v[0] for v in result.values] == ["0", "1", "2"]
    assert len({v[1] for v in result.values}) == 3  # each host's processes carry their own marker
    nothing_left(within=5)


def test_a_crash_on_the_second_host_stops_everything_and_names_it_fast(two_hosts):
    code = (
        "import os, time\nif os.environ['RANK'] == '2':\n"
        "    time.sleep(1)\n    raise ValueError(f'boom at {time.time()!r}')\ntime.sleep(120)"
    )
    with pytest.raises(tl.LaunchError) as e:
        tl.launch(code, nproc=2, cluster=two_hosts, timeout=120)
    reported = time.time()
    message = str(e.value)
    crashed = float(re.search(r"boom at ([0-9.]+)", message)[1])
    assert reported - crashed < 5, f"reported {reported - crashed:.1f} s after the crash"
    second = e.value.result.hosts[1].host
    assert message.startswith(
        f"Rank 2 on host {second} (node 1) failed (exit 1); every process on every host was stopped"
    )
    assert "ValueError: boom" in message
    assert [h.state for h in e.value.result.hosts] == ["stopped", "failed"]
    nothing_left(within=5)


def test_tp_run_and_the_launch_panel_on_the_cluster(two_hosts, capsys, ipython_shell):
    ip = ipython_shell
    ip.user_ns["lab_cluster"] = two_hosts
    code = "import os, tpu_lab as tl\nprint('on', os.environ['RANK'])\ntl.report(int(os.environ['GROUP_RANK']))"
    result = ip.run_cell_magic("tp_run", "-n 1 --cluster lab_cluster --timeout 120", code)
    assert result.values == [0, 1] and ip.user_ns["_tp_result"] is result
    assert f"[{result.hosts[1].host} rank 1] on 1" in capsys.readouterr().out
    panel = tl.widgets.LaunchPanel(code, nproc=1, cluster=two_hosts)
    assert len(panel.rank_views) == 2
    assert panel.start().wait(120).ok and "2 ok" in panel.header.value
    nothing_left(within=5)


def test_the_panels_stop_returns_after_the_cluster_is_clean(two_hosts):
    # Stop runs in a background thread; the panel's wait() must not return while that stop is still
    # tearing down (the notebook printed the run's placement group and actors as left over).
    from tpu_lab.tp.results.run_state import RankState

    panel = tl.widgets.LaunchPanel(SLEEP, nproc=1, cluster=two_hosts).start()
    deadline = time.monotonic() + 120
    while panel.run.state.counts()[RankState.RUNNING] < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    panel.stop()
    panel.wait(120)
    assert panel.result is not None and "Stopped by you" in panel.message.value
    # At once: the stop ends with removing the placement group, so it finished before wait() returned
    # (actors and processes die asynchronously after Ray's kill: they get a few seconds).
    assert cluster_leftovers()[0] == [], "wait() returned before the stop removed the placement group"
    nothing_left(within=5)


def test_too_few_hosts_is_refused_before_anything_starts(cluster, capsys):
    three = tl.RayCluster(address=cluster.address, hosts=3, resources={"CPU": 1, HOST_RESOURCE: 1})
    with pytest.raises(tl.LaunchError) as e:
        tl.launch(SLEEP, nproc=1, cluster=three)
    message = str(e.value)
    assert f"needs 3 host(s) with {{CPU: 1, {HOST_RESOURCE}: 1}} each" in message
    assert "has 2 such node(s) of 3 alive" in message and f"{HOST_RESOURCE} 0/1" in message  # the head lacks it
    assert "started" not in capsys.readouterr().out
    nothing_left()


def test_by_default_a_host_reserves_a_cpu_per_rank_so_one_cpu_nodes_are_not_picked_for_two(cluster, capsys):
    with pytest.raises(tl.LaunchError) as e:
        tl.launch(SLEEP, nproc=2, cluster=tl.RayCluster(address=cluster.address))  # every node has 1 CPU
    assert "{CPU: 2}" in str(e.value) and "CPU 1/2" in str(e.value)
    assert "started" not in capsys.readouterr().out
    nothing_left()


def test_the_launch_says_which_nodes_it_took_and_why(cluster):
    result = tl.launch("print('hi')", nproc=1, cluster=tl.RayCluster(address=cluster.address, hosts=2))
    said = [line for line in result.launcher_output.splitlines() if line.startswith("Ray granted")]
    assert (
        said and "2 host(s), one per node, each reserving {'CPU': 1.0} (one CPU for each of its 1 rank(s))" in said[0]
    )
    nothing_left(within=10)  # actor processes take a moment to exit


def test_an_unreachable_cluster_is_refused_within_seconds():
    start = time.monotonic()
    with pytest.raises(tl.LaunchError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:9"):
        tl.launch(SLEEP, nproc=1, cluster=tl.RayCluster(address="127.0.0.1:9", connect_timeout=3))
    assert time.monotonic() - start < 10


def test_a_timeout_stops_every_host(two_hosts):
    with pytest.raises(tl.LaunchError, match="timed out after 6 s; every process on every host was stopped"):
        tl.launch(SLEEP, nproc=2, cluster=two_hosts, timeout=6)
    nothing_left(within=5)


def test_twenty_interrupts_leave_no_process_actor_or_placement_group(two_hosts):
    rng = random.Random(18)
    for i in range(20):
        timer = threading.Timer(rng.uniform(0.05, 4.0), _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                tl.launch(SLEEP, nproc=2, cluster=two_hosts, on_output=lambda rank, line: None)
        finally:
            timer.cancel()
        try:
            nothing_left(within=10)  # actor processes take a moment to exit after ray.kill
        except AssertionError as e:
            raise AssertionError(f"after interrupt {i}: {e}") from None


DAEMON = (
    "import os, pathlib, subprocess, sys, time\n"
    "daemon = 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'\n"
    "child = subprocess.Popen([sys.executable, '-c', daemon], start_new_session=True, env={'PATH': '/usr/bin:/bin'})\n"
    "pathlib.Path(sys.argv[1], 'daemon' + os.environ['RANK']).write_text(str(child.pid))\n"
    "print('started', flush=True)\n"
    "time.sleep(120)\n"
)  # a rank's child that leaves its session, drops every marker and ignores SIGTERM
KERNEL = """
import sys, tpu_lab as tl
cluster = tl.RayCluster(address=sys.argv[1], hosts=2, resources={{"CPU": 1, {resource!r}: 1}})
tl.launch({code!r}, nproc=2, cluster=cluster, args=[sys.argv[2]])
"""


def test_a_killed_kernel_leaves_no_process(cluster, tmp_path):
    code = KERNEL.format(resource=HOST_RESOURCE, code=DAEMON)
    kernel = subprocess.Popen(
        [sys.executable, "-c", code, cluster.address, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        seen = 0
        for line in kernel.stdout:
            seen += "started" in line
            if seen == 4:  # every rank on both hosts runs
                break
        assert seen == 4
        os.kill(kernel.pid, signal.SIGKILL)  # no atexit, no cleanup code: the kernel (Ray's driver) vanishes
        kernel.wait()
    finally:
        if kernel.poll() is None:
            kernel.kill()
    nothing_left(within=30)
    daemons = [int(p.read_text()) for p in tmp_path.glob("daemon*")]
    assert len(daemons) == 4
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in daemons) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in daemons if os.path.exists(f"/proc/{pid}")]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "a rank's daemon outlived the killed kernel"


def test_bad_clusters_are_refused_with_the_fix():
    with pytest.raises(tl.errors.InvalidArgument, match=r"neither a Ray address nor a tl\.RayCluster"):
        tl.launch("print(1)", nproc=1, cluster=3)
    with pytest.raises(tl.errors.InvalidArgument, match="both name where to run"):
        tl.launch("print(1)", nproc=1, cluster="auto", hosts=["127.0.0.2"])
    with pytest.raises(tl.errors.InvalidArgument, match="needs both tpu_topology and tpu_version"):
        tl.launch("print(1)", nproc=1, cluster=tl.RayCluster(tpu_topology="4x4"))
    for bad in (
        {"address": 123},
        {"connect_timeout": float("nan")},
        {"connect_timeout": -1},
        {"reserve_timeout": 0},
        {"resources": {"CPU": float("inf")}},
        {"resources": 4},
    ):
        with pytest.raises(tl.errors.InvalidArgument, match=f"RayCluster\\.{next(iter(bad))}=") as e:
            tl.launch("print(1)", nproc=1, cluster=tl.RayCluster(**bad))
        assert e.value.fix


def test_tpu_slice_bundles_and_the_host_check_without_a_tpu():
    hosts, bundle = ray_cluster.tpu_bundles("4x4", "v6e")  # ray.util.tpu's own arithmetic: 16 chips, 4 per VM
    assert hosts == 4 and bundle == {"CPU": 1.0, "TPU": 4.0}
    cpu_node = {"Alive": True, "NodeManagerAddress": "10.0.0.9", "NodeID": "ab" * 28, "Resources": {"CPU": 8.0}}
    tpu_nodes = [
        {**cpu_node, "NodeManagerAddress": f"10.0.0.{i}", "Resources": {"CPU": 8.0, "TPU": 4.0}} for i in range(4)
    ]
    assert ray_cluster.check_hosts([cpu_node, *tpu_nodes], bundle, hosts) == 4
    with pytest.raises(tl.LaunchError, match=r"needs 4 host\(s\) with \{CPU: 1, TPU: 4\} each.*has 3 such node\(s\)"):
        ray_cluster.check_hosts([cpu_node, *tpu_nodes[:3]], bundle, hosts)
    assert ray_cluster.host_names([("aa11", "10.0.0.1"), ("bb22", "10.0.0.2")]) == ["10.0.0.1", "10.0.0.2"]
    assert ray_cluster.host_names([("aa1122", "127.0.0.1"), ("bb2233", "127.0.0.1")]) == [
        "127.0.0.1/aa1122",
        "127.0.0.1/bb2233",
    ]


@pytest.mark.tpu
@pytest.mark.skip(reason="needs a Ray cluster on a TPU slice (KubeRay or TPU VMs)")
def test_a_whole_tpu_slice():
    result = tl.launch(
        "import tpu_lab as tl\ntl.report(1)", nproc=4, cluster=tl.RayCluster(tpu_topology="4x4", tpu_version="v6e")
    )
    assert result.ok and len(result.hosts) == 4


def test_a_lost_node_stops_the_launch_and_is_named(cluster, two_hosts):
    # Last in this module: it takes a worker node away for good.
    errors: list[BaseException] = []
    runner = start(SLEEP, nproc=2, cluster=two_hosts)
    waiter = threading.Thread(target=lambda: _wait_into(runner, errors), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 60
    while sum(s.state is RankState.RUNNING for s in runner.state.ranks) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    second = runner.state.ranks[2].host
    node = next(n for n in cluster.workers if second.endswith(n.node_id[:6]))
    cluster.cluster.remove_node(node, allow_graceful=False)  # its raylet and every process of it die
    waiter.join(60)
    assert not waiter.is_alive(), "the launch did not notice the lost node within 60 s"
    assert isinstance(errors[0], tl.LaunchError), errors
    assert str(errors[0]).startswith(f"Host {second} (node 1) was lost (its Ray actor or its node died)")
    nothing_left(within=15)


def _wait_into(runner, errors):
    try:
        runner.wait(120, on_output=lambda rank, line: None)
    except BaseException as e:
        errors.append(e)
