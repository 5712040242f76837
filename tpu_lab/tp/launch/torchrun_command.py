"""The torchrun command line and the ranks' environment of one node of a launch (one host, or node k of
many), as a pure function (no process, no file, no clock): ``build_command(spec, base_env) -> (argv, env)``."""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tpu_lab.host.findings import LAUNCH_ENV

RUN_ID_ENV = "TPU_LAB_RUN_ID"
RESULT_DIR_ENV = "TPU_LAB_RESULT_DIR"
LAUNCHER_PID_ENV = "TPU_LAB_LAUNCHER_PID"
KEEPER_ENV = "TPU_LAB_KEEPER"
"""Set by a runner whose host SIGKILLs its worker's direct children (Ray, for a dead actor): torchrun
then runs one level further down, under a keeper (``torchrun_main._keep``)."""
# Written by tp.launch.torchrun_main in the run folder: torchrun's record of the ranks that failed.
FAILURES_FILE = "torchrun.failures.json"
# tp.launch.torchrun_main registers it: one store, listening on node 0's address only (torchrun's own backends
# listen on every interface).
BOUND_BACKEND = "tpu_lab-bound"
LOOPBACK = "127.0.0.1"
# How long torchrun lets ranks end after SIGTERM before SIGKILL (its own default is 30 s).
SHUTDOWN_SECONDS = 2
# Left in a kernel's environment by an earlier torchrun or a worker: they would confuse this run's ranks.
STALE_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    RUN_ID_ENV,
    RESULT_DIR_ENV,
    LAUNCHER_PID_ENV,
)


@dataclass(frozen=True)
class LaunchSpec:
    """Everything that decides one node's torchrun command line and environment."""

    script: Path
    """The worker script each rank runs as __main__."""
    nproc: int
    """Ranks (processes) on this node."""
    run_dir: Path
    """Where results, statuses and per-rank logs go."""
    run_id: str
    """Marks every process of this node's run (in its environment) so all of them can be found and stopped."""
    port: int = 0
    """Rendezvous port on ``master``; 0 (one node only) lets the store take a free one itself (no race)."""
    args: tuple[str, ...] = ()
    """Arguments for the worker script, passed on byte for byte."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the ranks (wins over everything else)."""
    tpu_env: Mapping[str, str] = field(default_factory=dict)
    """torch_tpu's launch environment (``tp.launch.tpu_env``), computed fresh in a child process."""
    python: str = sys.executable
    nnodes: int = 1
    """Nodes (hosts) in the launch."""
    node_rank: int = 0
    """This node's index: its ranks are node_rank x nproc onwards."""
    master: str = LOOPBACK
    """The address of node 0, where the rendezvous store listens (on that address only)."""
    rdzv_id: str = ""
    """The rendezvous id, the same on every node (default: ``run_id``)."""

    @property
    def first_rank(self) -> int:
        """Global rank of this node's first process."""
        return self.node_rank * self.nproc


def build_command(spec: LaunchSpec, base_env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """One node's torchrun argv and its ranks' environment, for any node count. Pure.

    torchrun runs through ``tp.launch.torchrun_main`` (its own main, with a rendezvous whose store listens on
    ``master`` only), so the arguments after the module name are torchrun's own, and the user's
    arguments come last, untouched. Each rank writes its own log file (``--redirects=3``), which the
    runner reads per rank, so no two ranks' bytes can mix."""
    argv = [
        spec.python,
        "-m",
        "tpu_lab.tp.launch.torchrun_main",
        f"--nproc-per-node={spec.nproc}",
        f"--nnodes={spec.nnodes}",
        f"--rdzv-backend={BOUND_BACKEND}",
        f"--rdzv-conf=rank={spec.node_rank}",
        f"--rdzv-endpoint={spec.master}:{spec.port}",
        f"--rdzv-id={spec.rdzv_id or spec.run_id}",
        "--max-restarts=0",
        "--monitor-interval=0.2",  # notice a dead rank fast, stop the others
        f"--shutdown-timeout={SHUTDOWN_SECONDS}",  # ranks that ignore SIGTERM are killed 2 s later, not 30
        "--redirects=3",
        f"--log-dir={spec.run_dir / 'logs'}",  # one file per rank, read live by the runner
        "-m",
        "tpu_lab.tp.launch.rank_worker",
        str(spec.script),
        *spec.args,
    ]
    env = {
        k: v
        for k, v in base_env.items()
        if k not in STALE_ENV and k not in LAUNCH_ENV and not k.startswith("TORCHELASTIC_")
    }
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, without its warning
    if is_loopback(spec.master):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's pair sockets listen on loopback too (a real pod's can't)
    env.update(spec.tpu_env)
    env.update(spec.env)
    env.update({RUN_ID_ENV: spec.run_id, RESULT_DIR_ENV: str(spec.run_dir), "PYTHONUNBUFFERED": "1"})
    return argv, env


def is_loopback(address: str) -> bool:
    """Whether ``address`` is this machine's loopback (127.0.0.0/8, ::1, localhost)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
