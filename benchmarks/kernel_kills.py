"""The kernel SIGKILLed mid-launch, N times per runner: what is left alive afterwards.

    python benchmarks/kernel_kills.py [--runners local ssh ray] [--kills 20]

Each round a fresh "kernel" process launches 2 ranks (on one host, on two loopback ssh hosts, or on two
nodes of a local Ray cluster); every rank starts a daemon that leaves its session, drops its whole
environment and ignores SIGTERM (found by nothing but the process tree). The kernel is killed at a
random moment between the launch's start and a few seconds after its ranks run. Then it counts the
processes still alive after a grace of up to 30 s: the launch's (by its run marker) and the daemons (by pid).
Target: 0 after every kill. Needs openssh-server for the ssh runner and Ray for the Ray runner.
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tpu_lab.host.processes import pids_with_env

RANK = (
    "import os, pathlib, subprocess, sys, time\n"
    "daemon = 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'\n"
    "child = subprocess.Popen([sys.executable, '-c', daemon], start_new_session=True, env={'PATH': '/usr/bin:/bin'})\n"
    "pathlib.Path(sys.argv[1], f\"daemon{os.environ['RANK']}-{child.pid}\").write_text(os.environ['TPU_LAB_RUN_ID'])\n"
    "print('started', flush=True)\n"
    "time.sleep(300)\n"
)
KERNEL = """
import sys, tpu_lab as tl
where = {where}
tl.launch({rank!r}, nproc=2, args=[sys.argv[1]], **where)
"""


def kernel_code(runner: str, target: object) -> str:
    if runner == "local":
        where = "{}"
    elif runner == "ssh":
        where = f"dict(hosts=['127.0.0.2', '127.0.0.3'], remote=tl.Remote(ssh_options={target!r}))"
    else:
        where = (
            f"dict(cluster=tl.RayCluster(address={target!r}, hosts=2, resources={{'CPU': 1, 'tpu_lab_test_host': 1}}))"
        )
    return KERNEL.format(where=where, rank=RANK)


def one_kill(code: str, rng: random.Random) -> tuple[int, int]:
    """(launch processes left, daemons left) after one kill."""
    folder = Path(tempfile.mkdtemp(prefix="kills_"))
    marker = f"KILLS_ROUND={folder.name}"
    env = {**os.environ, "KILLS_ROUND": folder.name}
    kernel = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    wait_for_start = rng.random() < 0.7  # most kills once ranks run; the rest mid-start
    start = time.monotonic()
    if wait_for_start:
        for line in kernel.stdout:  # type: ignore[union-attr]
            if "started" in line or time.monotonic() - start > 60:
                break
        time.sleep(rng.uniform(0, 2))
    else:
        time.sleep(rng.uniform(0.5, 6))
    os.kill(kernel.pid, signal.SIGKILL)
    kernel.wait()
    deadline = time.monotonic() + 30  # the grace: whatever is still alive then counts as left
    while True:
        daemons = [int(p.name.split("-")[1]) for p in folder.glob("daemon*")]
        alive = [pid for pid in daemons if Path(f"/proc/{pid}").exists()]
        # the launch's processes: the kernel's children by this round's variable, and every process of the
        # runs the ranks recorded (hosts over ssh and Ray actors do not inherit the kernel's environment)
        runs = {p.read_text() for p in folder.glob("daemon*")}
        found = set(pids_with_env(marker.encode()))
        for run in runs:
            found |= set(pids_with_env(f"TPU_LAB_RUN_ID={run}".encode()))
        launch = [pid for pid in found if pid != os.getpid()]
        if not (alive or launch) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for pid in alive + launch:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(launch), len(alive)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runners", nargs="+", default=["local", "ssh", "ray"], choices=["local", "ssh", "ray"])
    parser.add_argument("--kills", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(int(os.environ.get("KILLS_SEED", "26")))
    for runner in args.runners:
        server = cluster = None
        if runner == "ssh":
            from tpu_lab.testing.loopback import start_sshd

            server = start_sshd(Path(tempfile.mkdtemp(prefix="kills_sshd_")))
            if isinstance(server, str):
                print(f"ssh: skipped ({server})")
                continue
            target: object = tuple(server.remote.ssh_options)
        elif runner == "ray":
            from tpu_lab.testing.ray_cluster import LocalRayCluster

            cluster = LocalRayCluster(workers=2)
            target = cluster.address
        else:
            target = None
        code = kernel_code(runner, target)
        left = [one_kill(code, rng) for _ in range(args.kills)]
        print(
            f"{runner}: {args.kills} kernel kills; launch processes left after each: "
            f"{[a for a, _ in left]}; daemons left: {[b for _, b in left]}"
        )
        if server is not None:
            server.stop()
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
