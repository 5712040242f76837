"""``tp_size`` against the TPU chips: on this host (the chips visible and the rank counts the generation
allows), or spread over several hosts of a slice (an even split, chips per host x hosts, tensor
parallelism that crosses hosts; every host of a slice has the same chips: this host's, or the ``chips``
given). Pure."""

from __future__ import annotations

import os
from collections.abc import Sequence

from tpu_lab._report import Finding
from tpu_lab.errors import InvalidArgument
from tpu_lab.host.chips import TpuChips, rank_count_problem
from tpu_lab.tp.launch.hosts import resolve_hosts

RANK_CODES = ("more-ranks-than-chips", "rank-count-not-allowed", "ranks-not-split-evenly")


def host_count(hosts: int | Sequence[str] | str) -> int:
    """How many hosts ``hosts`` names: a count, the list you would give tl.launch (checked the same way:
    plain names, each once), or "TPU_WORKER_HOSTNAMES"."""
    if hosts == "TPU_WORKER_HOSTNAMES" or (isinstance(hosts, (list, tuple)) and hosts):
        return len(resolve_hosts(hosts, os.environ))
    if isinstance(hosts, bool) or not isinstance(hosts, (int, list, tuple)) or (isinstance(hosts, int) and hosts < 1):
        raise InvalidArgument(
            f"hosts={hosts!r} must be a number of hosts or a list of them.",
            fix="Use e.g. hosts=2 or hosts=['h0', 'h1'].",
        )
    count = hosts if isinstance(hosts, int) else len(hosts)
    if count < 1:
        raise InvalidArgument("hosts=[] names no host.", fix="Use e.g. hosts=2 or hosts=['h0', 'h1'].")
    return count


def check_hosts(tp: int, hosts: int | Sequence[str] | str, chips: TpuChips) -> list[Finding]:
    """``tp`` ranks on ``hosts`` hosts of ``chips`` each: an even split, chips per host x hosts against
    the ranks, the generation's rank counts per host, and tensor parallelism that crosses hosts."""
    n = host_count(hosts)
    if tp % n:
        return [
            Finding(
                "ranks-not-split-evenly",
                "error",
                f"tp_size={tp} ranks cannot be split evenly over {n} hosts (torchrun runs the same number on each).",
                f"Use a multiple of {n}, e.g. tp_size={n * max(1, tp // n)}.",
            )
        ]
    per_host = tp // n
    if not chips.count:
        return [
            Finding(
                "no-tpu-here",
                "info",
                f"No TPU on this host to count chips from: {n} hosts would run {per_host} process(es) each "
                "(on CPU with gloo).",
                "On a TPU VM of the slice the chips per host are checked too.",
            )
        ]
    out = []
    if tp > chips.count * n:
        out.append(
            Finding(
                "more-ranks-than-chips",
                "error",
                f"tp_size={tp} needs {tp} chips but {n} hosts x {chips.count} chips have {chips.count * n}.",
                f"Use tp_size <= {chips.count * n}, or more hosts.",
            )
        )
    else:
        problem = rank_count_problem(per_host, chips)
        if problem is not None:
            out.append(
                Finding(problem.code, problem.severity, f"{per_host} ranks per host: {problem.message}", problem.fix)
            )
    if tp > chips.count and n > 1:
        out.append(
            Finding(
                "tp-across-hosts",
                "warning",
                f"tp_size={tp} is larger than one host's {chips.count} chips, so tensor parallelism crosses hosts: "
                "every layer's all-reduce then travels over the network between hosts (the data-centre network), "
                "much slower than the links between the chips of one host.",
                f"Keep tensor parallel within a host (tp_size <= {chips.count}) and use the other hosts for data "
                "parallel replicas (or pipeline stages).",
            )
        )
    return out


def check_ranks(tp: int, chips: TpuChips) -> list[Finding]:
    if not chips.count:
        return (
            [
                Finding(
                    "no-tpu-here",
                    "info",
                    f"No TPU on this host: tl.launch runs {tp} CPU processes with gloo, which shards for real but slowly.",
                    "Nothing to fix for lessons; on a TPU VM each rank gets one chip.",
                )
            ]
            if tp > 1
            else []
        )
    problem = rank_count_problem(tp, chips)
    if problem is None:
        return []
    return [Finding(problem.code, problem.severity, f"tp_size={tp}: {problem.message}", problem.fix)]
