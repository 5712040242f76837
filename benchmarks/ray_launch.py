"""tl.launch on a Ray cluster, trivial worker, 2 hosts x 2 ranks, against the same torchrun commands
started through Ray actors by hand, side by side; and the time from a rank's crash to the error.
The cluster is real and local: a head and two worker nodes (separate raylets) on 127.0.0.1.

    python benchmarks/ray_launch.py [--rounds 5]

By hand: a strict-spread placement group of 2 bundles, one bare actor per bundle that runs
`python -m torch.distributed.run --nnodes=2 --node-rank=K --rdzv-backend=static
--rdzv-endpoint=127.0.0.1:PORT worker.py` to the end, then the actors killed and the group removed.
tl.launch adds: the cluster and host checks (versions, chips, a free port on the first host), the run
folders, the worker runner, per-rank statuses, one labelled stream by polling, collection and cleanup.
Both attach once (the driver stays attached). Shuffled rounds, medians. Targets: tl.launch <= 1.2x
by hand; crash to error <= 5 s.
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _side_by_side import measure, report

import tpu_lab as tl
from tpu_lab.testing.ray_cluster import HOST_RESOURCE, LocalRayCluster
from tpu_lab.tp.launch.runners import ray_cluster

WORKER = "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
CRASH = (
    "import os, time\nif os.environ['RANK'] == '2':\n    time.sleep(1)\n"
    "    raise ValueError(f'boom at {time.time()!r}')\ntime.sleep(120)"
)
BUNDLE = {"CPU": 1, HOST_RESOURCE: 1}


class HandRunner:
    """A bare actor: runs one argv to the end and returns its exit code."""

    def run(self, argv: list[str]) -> int:
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT).returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    local = LocalRayCluster(workers=2)
    try:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cluster = tl.RayCluster(address=local.address, hosts=2, resources=BUNDLE)
        ray_cluster.connect(cluster)  # both cases use this one attachment (Ray would attach by itself otherwise)
        script = Path(tempfile.mkdtemp()) / "worker.py"
        script.write_text(WORKER)
        hand_actor = ray.remote(HandRunner)

        def lab():
            assert tl.launch(script, nproc=2, cluster=cluster, on_output=lambda rank, line: None).ok

        def by_hand():
            group = placement_group([BUNDLE, BUNDLE], strategy="STRICT_SPREAD")
            ray.get(group.ready())
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            actors = [
                hand_actor.options(
                    num_cpus=1,
                    resources={HOST_RESOURCE: 1},
                    scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=k),
                ).remote()
                for k in range(2)
            ]
            argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--nnodes=2"]
            argv += ["--rdzv-backend=static", f"--rdzv-endpoint=127.0.0.1:{port}", "--max-restarts=0"]
            codes = ray.get([a.run.remote([*argv, f"--node-rank={k}", str(script)]) for k, a in enumerate(actors)])
            for a in actors:
                ray.kill(a)
            remove_placement_group(group)
            assert codes == [0, 0]

        times = measure({"torchrun in Ray actors by hand": by_hand, "tl.launch(cluster=...)": lab}, args.rounds)
        report(
            f"trivial worker, 2 hosts x 2 ranks on a 3-node Ray cluster, median of {args.rounds} rounds",
            times,
            unit="s",
        )
        delays = []
        for _ in range(3):
            try:
                tl.launch(CRASH, nproc=2, cluster=cluster, timeout=120, on_output=lambda rank, line: None)
            except tl.LaunchError as e:
                delays.append(time.time() - float(re.search(r"boom at ([0-9.]+)", str(e))[1]))
        print(
            f"crash on host 2 to LaunchError: median {statistics.median(delays):.2f} s of {len(delays)} (target <= 5 s)"
        )
    finally:
        local.stop()
    os.environ.pop("RAY_ADDRESS", None)


if __name__ == "__main__":
    main()
