"""The torchrun command line and the ranks' environment for a launch, as a pure function (no process,
no file, no clock): ``build_command(spec, base_env) -> (argv, env)``."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tpu_lab.host.findings import LAUNCH_ENV

RUN_ID_ENV = "TPU_LAB_RUN_ID"
RESULT_DIR_ENV = "TPU_LAB_RESULT_DIR"
LAUNCHER_PID_ENV = "TPU_LAB_LAUNCHER_PID"
# tp._torchrun registers it: one store, listening on 127.0.0.1 only (torchrun's c10d listens on every interface).
LOOPBACK_BACKEND = "tpu_lab-loopback"
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
    """Everything that decides a launch's command line and environment."""

    script: Path
    """The worker script each rank runs as __main__."""
    nproc: int
    """Ranks (processes) on this host."""
    run_dir: Path
    """Where results, statuses and per-rank logs go."""
    run_id: str
    """Marks every process of the run (in its environment) so all of them can be found and stopped."""
    port: int = 0
    """Rendezvous port on 127.0.0.1; 0 lets the rendezvous handler take a free one itself (no race)."""
    args: tuple[str, ...] = ()
    """Arguments for the worker script."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the ranks (wins over everything else)."""
    tpu_env: Mapping[str, str] = field(default_factory=dict)
    """torch_tpu's launch environment (set_tpu_launch_env), computed fresh in a child process."""
    python: str = sys.executable
    first_rank: int = 0
    """Global rank of this host's first process (multi-host: node rank x nproc)."""
    nnodes: int = 1
    """Hosts in the launch; with one, every socket (rendezvous, gloo) stays on loopback."""


def build_command(spec: LaunchSpec, base_env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The torchrun argv and the ranks' environment for ``spec``. Pure.

    torchrun runs through ``tp._torchrun`` (its own main, with a loopback-only rendezvous), so the
    arguments after the module name are torchrun's own."""
    argv = [
        spec.python,
        "-m",
        "tpu_lab.tp._torchrun",
        f"--nproc-per-node={spec.nproc}",
        "--nnodes=1",
        f"--rdzv-backend={LOOPBACK_BACKEND}",
        f"--rdzv-endpoint=127.0.0.1:{spec.port}",
        f"--rdzv-id={spec.run_id}",
        "--max-restarts=0",
        "--monitor-interval=0.2",  # notice a dead rank fast, stop the others
        f"--shutdown-timeout={SHUTDOWN_SECONDS}",  # ranks that ignore SIGTERM are killed 2 s later, not 30
        "--tee=3",
        f"--log-dir={spec.run_dir / 'logs'}",  # labelled live output, and a file per rank
        "-m",
        "tpu_lab.tp._worker",
        str(spec.script),
        *spec.args,
    ]
    env = {
        k: v
        for k, v in base_env.items()
        if k not in STALE_ENV and k not in LAUNCH_ENV and not k.startswith("TORCHELASTIC_")
    }
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, without its warning
    if spec.nnodes == 1:
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's pair sockets listen on loopback too (across hosts they can't)
    env.update(spec.tpu_env)
    env.update(spec.env)
    env.update({RUN_ID_ENV: spec.run_id, RESULT_DIR_ENV: str(spec.run_dir), "PYTHONUNBUFFERED": "1"})
    return argv, env
