"""tl.launch of a trivial worker on 2 hosts x 2 ranks against the same torchrun commands started over
ssh by hand, side by side (a simulated slice: a real sshd on 127.0.0.2 and 127.0.0.3, this machine).

    python benchmarks/multihost_launch.py [--rounds 5]

By hand: one `ssh HOST env PYTHONPATH=... python -m torch.distributed.run --nnodes=2 --node-rank=K
--rdzv-backend=static --rdzv-endpoint=127.0.0.2:PORT worker.py` per host, started together, output to
pipes. tl.launch adds: the host checks (versions, chips, a free port on the first host), the host runner,
the worker runner, per-rank statuses, one labelled stream, collection and cleanup on every host.
Shuffled rounds, medians. Target: tl.launch <= 1.2x by hand.
"""

import argparse
import os
import shlex
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from _side_by_side import measure, report

import tpu_lab as tl
from tpu_lab.testing.loopback import start_sshd
from tpu_lab.tp.launch.runners.ssh_command import BATCH_OPTIONS

WORKER = "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
HOSTS = ["127.0.0.2", "127.0.0.3"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    sshd = start_sshd(folder)
    if isinstance(sshd, str):
        sys.exit(f"cannot simulate hosts here: {sshd}")
    script = folder / "worker.py"
    script.write_text(WORKER)
    pythonpath = [f"PYTHONPATH={os.environ['PYTHONPATH']}"] if os.environ.get("PYTHONPATH") else []

    def by_hand():
        with socket.socket() as s:
            s.bind((HOSTS[0], 0))  # loopback only
            port = s.getsockname()[1]
        procs = []
        for node, host in enumerate(HOSTS):
            command = ["env", *pythonpath, sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
            command += ["--nnodes=2", f"--node-rank={node}", "--rdzv-backend=static"]
            command += [f"--rdzv-endpoint={HOSTS[0]}:{port}", "--max-restarts=0", str(script)]
            argv = ["ssh", *BATCH_OPTIONS, *sshd.remote.ssh_options, host, shlex.join(command)]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        for p in procs:
            p.communicate()
            assert p.returncode == 0

    def lab():
        assert tl.launch(script, nproc=2, hosts=HOSTS, remote=sshd.remote, on_output=lambda rank, line: None).ok

    try:
        times = measure({"torchrun over ssh by hand": by_hand, "tl.launch(hosts=...)": lab}, args.rounds)
    finally:
        sshd.stop()
    report(f"trivial worker, 2 hosts x 2 ranks, median of {args.rounds} rounds", times, unit="s")


if __name__ == "__main__":
    main()
