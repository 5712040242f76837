"""How a multi-host launch reaches its hosts, as pure functions (no process, no file, no clock): the
host list, the client argv for one host (OpenSSH in batch mode, or another tool through a prefix), the
remote command (shlex-quoted: no remote shell expands anything in it), and each node's torchrun argv,
derived from the single-host one with the rendezvous on the first host.

User code and user arguments never pass through a remote shell: they travel as JSON on the client's
stdin (``tp._remote`` reads them); the command line only names the interpreter and its environment.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from tpu_lab._checks import positive_int
from tpu_lab.errors import EnvironmentProblem, InvalidArgument
from tpu_lab.tp.command import LaunchSpec, build_command

WORKER_HOSTNAMES_ENV = "TPU_WORKER_HOSTNAMES"
# What the host runner and the ranks need from this kernel's environment (sshd starts a bare one).
FORWARDED_ENV = ("PYTHONPATH", "TPU_LAB_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
CONNECT_TIMEOUT_S = 10
# No prompt ever (a notebook has no terminal to type a password into); notice a dead peer in ~15 s.
BATCH_OPTIONS = (
    "-o", "BatchMode=yes",
    "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
    "-o", "ServerAliveInterval=5",
    "-o", "ServerAliveCountMax=3",
    "-T",
)  # fmt: skip
# user@ optional, then a DNS name or an IPv4 address; never starting with "-" (an option to the client)
_HOST = re.compile(r"^(?:[A-Za-z0-9._][A-Za-z0-9._-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*$")
# the rendezvous flags of a single-host torchrun argv, replaced by the node's own
_RDZV_FLAGS = ("--nnodes", "--node-rank", "--node_rank", "--rdzv", "--standalone", "--master", "--log-line-prefix")


@dataclass(frozen=True)
class Remote:
    """How a multi-host launch reaches and uses its hosts (every field has a working default)."""

    ssh_options: tuple[str, ...] = ()
    """Extra OpenSSH client options, e.g. ``("-p", "2222", "-i", "~/.ssh/tpu_key")``. Batch mode
    (``-o BatchMode=yes``: never a password prompt) and a connect timeout are always added to ``ssh``."""
    prefix: tuple[str, ...] = ("ssh",)
    """The command that runs something on a host. ``{host}``, ``{worker}`` (the host's index) and
    ``{command}`` in an item are replaced; the host is appended when no item names ``{host}`` or
    ``{worker}``, the command when no item names ``{command}``. For example
    ``("gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-tpu", "--zone=us-east5-b", "--worker={worker}",
    "--command={command}")``."""
    python: str | Mapping[str, str] | None = None
    """The Python on the hosts: None means this kernel's interpreter at the same path; a path; or a
    ``{host: path}`` mapping (hosts not in it use this kernel's path)."""
    rdzv_port: int | None = None
    """The rendezvous port on the first host (None: a free one, chosen there at each launch)."""


def check_remote(remote: Any) -> Remote:
    """``remote`` as a Remote (None: the defaults), or a clear InvalidArgument."""
    if remote is None:
        return Remote()
    if not isinstance(remote, Remote):
        raise InvalidArgument(
            f"remote={remote!r} is not a tl.Remote.", fix="Pass tl.Remote(ssh_options=(...), prefix=(...), python=...)."
        )
    for name in ("ssh_options", "prefix"):
        value = getattr(remote, name)
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise InvalidArgument(
                f"Remote.{name}={value!r} must be a tuple of strings, one per argument.",
                fix=f'Split it, e.g. {name}=("-p", "2222") rather than "-p 2222".',
            )
    if not remote.prefix:
        raise InvalidArgument("Remote.prefix is empty.", fix='Leave the default ("ssh",) or name your tool.')
    if remote.rdzv_port is not None:
        positive_int(remote.rdzv_port, "Remote.rdzv_port", example=29500)
    return remote


def resolve_hosts(hosts: Any, environ: Mapping[str, str]) -> tuple[str, ...]:
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
    bad = [h for h in hosts if not isinstance(h, str) or not _HOST.match(h)]
    if bad:
        raise InvalidArgument(
            f"hosts contains {bad!r}, which is not a host name, an IPv4 address or user@host.",
            fix="Use plain names or addresses; put ssh options (ports, keys) in tl.Remote(ssh_options=...).",
        )
    if len(set(hosts)) != len(hosts):
        raise InvalidArgument(f"hosts={list(hosts)!r} names a host twice.", fix="List each host once.")
    return tuple(hosts)


def address(host: str) -> str:
    """The network address in a host entry (``user@10.0.0.2`` -> ``10.0.0.2``)."""
    return host.rpartition("@")[2]


def host_python(remote: Remote, host: str, default: str = sys.executable) -> str:
    """The interpreter path to run on ``host``."""
    if isinstance(remote.python, Mapping):
        return remote.python.get(host, default)
    return remote.python or default


def remote_argv(python: str, forwarded: Mapping[str, str], marker: str) -> list[str]:
    """What runs on a host: the host runner under ``env`` with the forwarded variables and the run's marker."""
    assignments = [f"{k}={v}" for k, v in forwarded.items()]
    return ["env", *assignments, marker, python, "-m", "tpu_lab.tp._remote"]


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of this kernel the hosts get (FORWARDED_ENV, where set)."""
    return {k: environ[k] for k in FORWARDED_ENV if environ.get(k)}


def client_argv(remote: Remote, host: str, worker: int, command: Sequence[str]) -> list[str]:
    """The local argv that runs ``command`` (an argv, quoted here with shlex) on ``host``."""
    text = shlex.join(command)
    names_host = any("{host}" in p or "{worker}" in p for p in remote.prefix)
    names_command = any("{command}" in p for p in remote.prefix)
    argv = [
        p.replace("{host}", host).replace("{worker}", str(worker)).replace("{command}", text) for p in remote.prefix
    ]
    if PurePosixPath(argv[0]).name == "ssh":
        argv[1:1] = [*BATCH_OPTIONS, *remote.ssh_options]
    if not names_host:
        argv.append(host)
    if not names_command:
        argv.append(text)
    return argv


def node_argv(argv: Sequence[str], *, nnodes: int, node_rank: int, master: str, port: int, rdzv_id: str) -> list[str]:
    """A node's torchrun argv from the single-host one: static rendezvous on ``master:port`` (node ranks
    as given, so global rank = node_rank * nproc + local rank), lines labelled with the global rank."""
    kept = [a for a in argv if not a.startswith(_RDZV_FLAGS)]
    at = next(i for i, a in enumerate(kept) if a.startswith("--nproc-per-node")) + 1
    kept[at:at] = [
        f"--nnodes={nnodes}",
        f"--node-rank={node_rank}",
        "--rdzv-backend=static",
        f"--rdzv-endpoint={master}:{port}",
        f"--rdzv-id={rdzv_id}",
        "--log-line-prefix-template=[default${rank}]:",
    ]
    return kept


def go_message(
    spec: LaunchSpec, *, nnodes: int, node_rank: int, master: str, port: int, rdzv_id: str
) -> dict[str, Any]:
    """What a host runner gets to start its torchrun: the argv, built here from ``spec``, and the spec's
    fields (torch_tpu's launch environment is added there, on the host)."""
    single, _ = build_command(spec, {})
    argv = node_argv(single, nnodes=nnodes, node_rank=node_rank, master=master, port=port, rdzv_id=rdzv_id)
    fields = {k: v for k, v in dataclasses.asdict(spec).items() if k != "tpu_env"}
    fields.update(script=str(spec.script), run_dir=str(spec.run_dir))
    return {"kind": "go", "argv": argv, "spec": fields}
