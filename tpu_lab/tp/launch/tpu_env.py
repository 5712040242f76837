"""torch_tpu's launch environment for one node of a launch, the one place it is computed (every runner,
on every host, calls ``tpu_launch_env``), and the TPU rank-count checks that come with it.

``torch.tpu.distributed.set_tpu_launch_env()`` caches its values for the life of a process and changes
the environment even when it fails, so it always runs in a short-lived child here (``process.run_briefly``),
never in a long-lived kernel or host runner. Without TPU chips there is no launch environment.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence

from tpu_lab.errors import InvalidArgument, LaunchError
from tpu_lab.host.chips import TpuChips, holds_tpu, rank_count_problem, scan_tpu_chips
from tpu_lab.host.findings import LAUNCH_ENV
from tpu_lab.host.memory import memory_gib
from tpu_lab.tp.launch.process import run_briefly

TIMEOUT_S = 120
# The least memory a rank takes before it loads anything: a Python process that imported torch (measured
# ~0.2 GiB with the CPU wheel; torch_tpu's autoload adds ~0.4 GiB).
RANK_GIB, RANK_GIB_TPU = 0.2, 0.6
_CODE = (
    "import json, os, sys, torch\nbefore = dict(os.environ)\n"
    "torch.tpu.distributed.set_tpu_launch_env(nnodes=int(sys.argv[1]), nproc_per_node=int(sys.argv[2]))\n"
    "print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
)


def check_tpu_ranks(nproc: int, chips: TpuChips, kernel_holds_tpu: bool | None) -> None:
    """Refuse, before anything starts, a launch a TPU host cannot run. Pure."""
    problem = rank_count_problem(nproc, chips)
    if problem is not None:
        raise InvalidArgument(f"nproc={nproc}: {problem.message}", fix=problem.fix)
    if kernel_holds_tpu:
        raise LaunchError(
            "This kernel already holds the TPU, so every rank would fail with 'Device or resource busy'.",
            cause="a tensor was put on the 'tpu' device in this kernel (loading a model there counts)",
            fix="Save what you need, restart the kernel, and launch before touching the TPU here.",
        )


def check_rank_memory(nproc: int, on_tpu: bool, memory: float | None = None) -> None:
    """Refuse more ranks than this machine's memory can hold (each rank is a Python process that imports
    torch). ``memory``: GiB this process may use (None: read it)."""
    memory = memory_gib() if memory is None else memory
    need = nproc * (RANK_GIB_TPU if on_tpu else RANK_GIB)
    if memory is not None and need > memory:
        raise InvalidArgument(
            f"nproc={nproc} ranks need at least {need:.1f} GiB here, more than the {memory:.1f} GiB this machine allows.",
            cause=f"each rank is a Python process that imports torch (about {RANK_GIB if not on_tpu else RANK_GIB_TPU} GiB "
            "before it loads anything)",
            fix=f"Use at most {max(1, int(memory // (RANK_GIB_TPU if on_tpu else RANK_GIB)))} ranks here, "
            "or spread them over several hosts (hosts=[...]).",
        )


def tpu_launch_env(
    nproc: int,
    environ: Mapping[str, str],
    *,
    hostnames: Sequence[str] = (),
    node: int = 0,
    python: str = sys.executable,
    this_process_holds_tpu: bool | None = None,
) -> dict[str, str]:
    """This node's torch_tpu launch variables ({} without chips), after the rank-count check.
    ``hostnames``: every host's address, in node order (multi-host); ``node``: this host's index."""
    chips = scan_tpu_chips()
    if not chips.count:
        return {}
    check_tpu_ranks(nproc, chips, holds_tpu() if this_process_holds_tpu is None else this_process_holds_tpu)
    env = {k: v for k, v in environ.items() if k not in LAUNCH_ENV}
    if len(hostnames) > 1:
        env.update({"TPU_WORKER_HOSTNAMES": ",".join(hostnames), "JOB_COMPLETION_INDEX": str(node)})
    proc = run_briefly([python, "-c", _CODE, str(max(1, len(hostnames))), str(nproc)], env, TIMEOUT_S)
    if proc.returncode:
        raise LaunchError(
            "torch_tpu could not compute the launch environment:\n" + proc.stderr.strip()[-2000:],
            fix="Check the TPU with `tpu-lab probe`; the error above comes from set_tpu_launch_env().",
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])
