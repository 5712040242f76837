"""tl.launch across hosts with real parts: a real sshd on loopback (127.0.0.2 and 127.0.0.3 are two
"hosts" of this machine), the real OpenSSH client, real torchrun processes with gloo on CPU."""

import _thread
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from IPython.core.error import UsageError

import tpu_lab as tl

HOSTS = ["127.0.0.2", "127.0.0.3"]
pytestmark = pytest.mark.slow

GLOO = """
import os, torch, torch.distributed as dist, tpu_lab as tl
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


def multihost_pids(sshd) -> list[int]:
    """Every process of this test session's multi-host launches on this machine (every "host"): ssh
    clients, host runners, torchruns and ranks, found by their run marker (``<run>-local-`` or
    ``<run>-node<k>-``). The machine may be shared with other sessions that use the same markers (a Ray
    runner's nodes, say), so a process counts when it is a client carrying this session's marker or was
    started through this session's sshd (``SSH_CONNECTION`` ends with its port)."""
    session = f"TPU_LAB_TEST_SESSION={os.environ['TPU_LAB_TEST_SESSION']}".encode()
    through = f" {sshd.port}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        marks = [e for e in env if e.startswith(b"TPU_LAB_RUN_ID=")]
        ssh = [e for e in env if e.startswith(b"SSH_CONNECTION=")]
        ours = session in env if marks and marks[0].endswith(b"-local-") else bool(ssh) and ssh[0].endswith(through)
        if marks and re.search(rb"-(local|node\d+)-$", marks[0]) and ours and stat[stat.rindex(")") + 2] != "Z":
            found.append(int(entry.name))
    return found


def run_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("tpu_lab_host_*_node*")}


def no_process_left(sshd, within: float = 0.0) -> None:
    deadline = time.monotonic() + within
    while (multihost_pids(sshd) or sshd.children()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert multihost_pids(sshd) == [], "processes of the launch left on a host"
    assert sshd.children() == [], "ssh sessions left open"


def test_two_hosts_by_two_ranks_equal_four_ranks_on_one_host(sshd, capsys):
    folders = run_folders()
    one = tl.launch(GLOO, nproc=4, timeout=240)
    two = tl.launch(GLOO, nproc=2, hosts=HOSTS, remote=sshd.remote, timeout=240)
    assert two.ok and two.values == one.values  # the same collectives, the same numbers, rank by rank
    assert [v["world"] for v in two.values] == [4] * 4
    assert [(r.rank, r.host) for r in two.ranks] == [(0, HOSTS[0]), (1, HOSTS[0]), (2, HOSTS[1]), (3, HOSTS[1])]
    assert [(h.host, h.node_rank, h.ranks, h.state) for h in two.hosts] == [
        (HOSTS[0], 0, (0, 1), "ok"),
        (HOSTS[1], 1, (2, 3), "ok"),
    ]
    assert "--rdzv-conf=rank=1" in two.hosts[1].argv and f"--rdzv-endpoint={HOSTS[0]}:" in " ".join(two.hosts[1].argv)
    out = capsys.readouterr().out
    total = round(sum(one.values[0]["sum"]), 4)
    for rank, host in ((0, HOSTS[0]), (3, HOSTS[1])):
        assert f"[{host} rank {rank}] sum {total}" in out  # one stream, each line labelled host and rank
    assert "on 2 host(s), ok" in str(two) and "127.0.0.3" in two.to_html()
    assert run_folders() == folders  # each host's run folder is gone
    no_process_left(sshd, within=5)


def test_a_crash_on_host_1_is_reported_fast_naming_host_and_rank(sshd):
    code = (
        "import os, time\nif os.environ['RANK'] == '2':\n"
        "    raise ValueError(f'boom at {time.time()!r}')\ntime.sleep(120)"
    )
    with pytest.raises(tl.LaunchError) as e:
        tl.launch(code, nproc=2, hosts=HOSTS, remote=sshd.remote, timeout=120)
    reported = time.time()
    message = str(e.value)
    crashed = float(re.search(r"boom at ([0-9.]+)", message)[1])
    assert reported - crashed < 5, f"reported {reported - crashed:.1f} s after the crash"
    assert message.startswith(
        "Rank 2 on host 127.0.0.3 (node 1) failed (exit 1); every process on every host was stopped"
    )
    assert "rank 2 on 127.0.0.3: failed (exit 1)" in message and "ValueError: boom" in message
    result = e.value.result
    assert [h.state for h in result.hosts] == ["stopped", "failed"]
    assert result.ranks[0].state == "stopped" and result.ranks[2].exit_code == 1
    no_process_left(sshd, within=5)


def test_a_timeout_stops_every_host(sshd):
    with pytest.raises(tl.LaunchError, match="timed out after 8 s; every process on every host was stopped"):
        tl.launch(SLEEP, nproc=2, hosts=HOSTS, remote=sshd.remote, timeout=8)
    no_process_left(sshd, within=5)


def test_an_unreachable_host_is_named_before_any_rank_starts(sshd, capsys):
    start = time.monotonic()
    with pytest.raises(tl.LaunchError) as e:  # nothing listens on 127.0.0.4: the connection is refused
        tl.launch(SLEEP, nproc=2, hosts=[HOSTS[0], "127.0.0.4"], remote=sshd.remote)
    assert time.monotonic() - start < 15
    assert "cannot reach host 127.0.0.4 (node 1)" in str(e.value) and "Nothing was started" in str(e.value)
    assert "BatchMode" in e.value.fix or "ssh -o BatchMode=yes" in e.value.fix
    assert "started" not in capsys.readouterr().out
    no_process_left(sshd, within=5)


def test_a_silent_host_is_named_within_15_s(sshd):
    # A host that accepts the connection and never answers (a hung machine): ssh's connect timeout and
    # the launcher's own deadline both bound the wait.
    with socket.socket() as silent:
        silent.bind(("127.0.0.5", 0))
        silent.listen(8)
        options = list(sshd.remote.ssh_options)
        options[options.index("-p") + 1] = str(silent.getsockname()[1])
        start = time.monotonic()
        with pytest.raises(tl.LaunchError, match=r"127\.0\.0\.5") as e:
            tl.launch(SLEEP, nproc=1, hosts=["127.0.0.5"], remote=tl.Remote(ssh_options=tuple(options)))
        assert time.monotonic() - start < 15
    assert "Nothing was started on any host" in str(e.value)
    no_process_left(sshd, within=5)


def test_a_host_without_tpu_lab_is_named(sshd, tmp_path):
    # A bare interpreter (the same Python, nothing installed, no PYTHONPATH) reached as host 127.0.0.3's python.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    python = tmp_path / "bare-python"
    python.write_text(f'#!/bin/sh\nunset PYTHONPATH\nexec {tmp_path / "bare/bin/python"} "$@"\n')
    python.chmod(0o755)
    remote = tl.Remote(ssh_options=sshd.remote.ssh_options, python={HOSTS[1]: str(python)})
    with pytest.raises(tl.LaunchError) as e:
        tl.launch(SLEEP, nproc=2, hosts=HOSTS, remote=remote)
    message = str(e.value)
    assert f"Python {python} on host 127.0.0.3 (node 1) cannot import tpu_lab" in message
    assert "127.0.0.2" not in message.split("Nothing was started")[0]  # only the failing host is named
    assert "tl.Remote(python=...)" in e.value.fix
    missing = tl.Remote(ssh_options=sshd.remote.ssh_options, python=str(tmp_path / "nowhere/python"))
    with pytest.raises(tl.LaunchError, match=r"host 127\.0\.0\.2 \(node 0\) has no Python at"):
        tl.launch(SLEEP, nproc=1, hosts=HOSTS[:1], remote=missing)
    no_process_left(sshd, within=5)


def test_fifty_interrupts_leave_no_process_on_any_host(sshd):
    rng = random.Random(12)
    for i in range(50):
        timer = threading.Timer(rng.uniform(0.05, 4.0), _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                tl.launch(SLEEP, nproc=2, hosts=HOSTS, remote=sshd.remote, on_output=lambda rank, line: None)
        finally:
            timer.cancel()
        assert multihost_pids(sshd) == [], f"processes left on a host after interrupt {i}"
    no_process_left(sshd, within=5)


KERNEL = """
import sys, tpu_lab as tl
remote = tl.Remote(ssh_options=tuple(sys.argv[1:]))
tl.launch("import time\\nprint('started', flush=True)\\ntime.sleep(120)", nproc=2, hosts={hosts!r}, remote=remote)
"""


def test_a_killed_kernel_leaves_no_process_on_any_host(sshd):
    code = KERNEL.format(hosts=HOSTS)
    kernel = subprocess.Popen(
        [sys.executable, "-c", code, *sshd.remote.ssh_options],
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
        os.kill(kernel.pid, signal.SIGKILL)  # no atexit, no cleanup code: the kernel just vanishes
        kernel.wait()
    finally:
        if kernel.poll() is None:
            kernel.kill()
    no_process_left(sshd, within=15)


def test_tp_run_and_the_launch_panel_across_hosts(sshd, capsys, ipython_shell):
    ip = ipython_shell
    ip.user_ns["lab_remote"] = sshd.remote
    code = "import os, socket, tpu_lab as tl\nprint('on', os.environ['RANK'])\ntl.report(int(os.environ['GROUP_RANK']))"
    result = ip.run_cell_magic("tp_run", "-n 1 --hosts 127.0.0.2,127.0.0.3 --remote lab_remote --timeout 120", code)
    assert result.values == [0, 1] and ip.user_ns["_tp_result"] is result  # node ranks as given
    assert "[127.0.0.3 rank 1] on 1" in capsys.readouterr().out
    with pytest.raises(UsageError, match="no such variable"):
        ip.run_cell_magic("tp_run", "-n 1 --hosts 127.0.0.2 --remote nope", code)
    panel = tl.widgets.LaunchPanel(code, nproc=1, hosts=HOSTS, remote=sshd.remote)
    assert len(panel.rank_views) == 2
    assert panel.start().wait(120).ok and "2 ok" in panel.header.value
    assert "rank 1 on 127.0.0.3" in panel.rank_views[1].value and "on 1" in panel.rank_views[1].value
    no_process_left(sshd, within=5)
