"""What ``hosts=`` names (``tl.launch``, ``%%tp_run --hosts``, ``LaunchPanel``, ``tl.tp_preflight``): a
list of host names or addresses, or ``"TPU_WORKER_HOSTNAMES"`` for a TPU VM's worker list, checked the
same way wherever it is given. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from tpu_lab.errors import EnvironmentProblem, InvalidArgument

WORKER_HOSTNAMES_ENV = "TPU_WORKER_HOSTNAMES"
# user@ optional, then a DNS name or an IPv4 address; never starting with "-" (an option to the client)
_HOST = re.compile(r"(?:[A-Za-z0-9._][A-Za-z0-9._-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*")
Hosts = Sequence[str] | Literal["TPU_WORKER_HOSTNAMES"]
"""What ``hosts=`` takes: a list of host names or addresses, or "TPU_WORKER_HOSTNAMES" (the TPU VM's list)."""


def resolve_hosts(hosts: Hosts, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The launch's hosts: a list of names or addresses, or ``"TPU_WORKER_HOSTNAMES"`` for the TPU VM's
    worker list in that variable (comma-separated). Checked: non-empty, distinct, plain names."""
    if hosts == WORKER_HOSTNAMES_ENV:
        value = environ.get(WORKER_HOSTNAMES_ENV, "").strip()
        if not value:
            raise EnvironmentProblem(
                f"hosts={WORKER_HOSTNAMES_ENV!r} asks for the TPU VM's worker list, but ${WORKER_HOSTNAMES_ENV} is not set here.",
                cause="this kernel does not run on a TPU VM of a multi-host slice, or its environment lacks the variable",
                fix=f"Pass the hosts yourself (hosts=['10.0.0.2', '10.0.0.3']) or export {WORKER_HOSTNAMES_ENV}=host0,host1,...",
            )
        hosts = [h.strip() for h in value.split(",")]
    if isinstance(hosts, str) or not isinstance(hosts, Sequence) or not hosts:
        raise InvalidArgument(
            f"hosts={hosts!r} must be a non-empty list of host names or addresses, or {WORKER_HOSTNAMES_ENV!r}.",
            fix="Use e.g. hosts=['10.0.0.2', '10.0.0.3'] (the first one hosts the rendezvous).",
        )
    bad = [h for h in hosts if not isinstance(h, str) or not _HOST.fullmatch(h)]
    if bad:
        raise InvalidArgument(
            f"hosts contains {bad!r}, which is not a host name, an IPv4 address or user@host.",
            fix="Use plain names or addresses; put ssh options (ports, keys) in tl.Remote(ssh_options=...).",
        )
    seen: dict[str, str] = {}
    for h in hosts:  # user@h and h, or H and h, are one machine
        key = address(h).lower()
        if key in seen:
            raise InvalidArgument(
                f"hosts={list(hosts)!r} names one host twice ({seen[key]!r} and {h!r}).",
                cause="torchrun would start two nodes on one machine, each expecting its own chips",
                fix="List each host once.",
            )
        seen[key] = h
    return tuple(hosts)


def address(host: str) -> str:
    """The network address in a host entry (``user@10.0.0.2`` -> ``10.0.0.2``)."""
    return host.rpartition("@")[2]
