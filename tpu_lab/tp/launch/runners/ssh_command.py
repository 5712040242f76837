"""How the ssh runner reaches its hosts, as pure functions (no process, no clock): ``tl.Remote`` and its
checks, the client argv for one host (OpenSSH in batch mode, or another tool
through a prefix) and the remote command (shlex-quoted: no remote shell expands anything in it). Each
node's torchrun command is built on its host by ``tp.launch.torchrun_command.build_command``.

User code and user arguments never pass through a remote shell: they travel as JSON on the client's
stdin (``tp.launch.runners.ssh_host`` reads them); the command line only names the interpreter and its environment.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from tpu_lab._checks import positive_int
from tpu_lab.errors import InvalidArgument

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


def check_remote(remote: Remote | None, which: Callable[[str], str | None] = shutil.which) -> Remote:
    """``remote`` as a Remote (None: the defaults), or a clear InvalidArgument. ``which`` finds the
    client program here (injected for tests)."""
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
    tool = remote.prefix[0]
    if which(tool) is None:
        raise InvalidArgument(
            f"Remote.prefix[0]={tool!r} is not a program this kernel can run.",
            cause="it does not exist, is a folder, or is not executable (nor on PATH)",
            fix='Install it (e.g. apt-get install openssh-client for "ssh") or name the full path of your tool.',
        )
    if remote.rdzv_port is not None:
        positive_int(remote.rdzv_port, "Remote.rdzv_port", example=29500)
        if remote.rdzv_port > 65535:
            raise InvalidArgument(
                f"Remote.rdzv_port={remote.rdzv_port} is not a TCP port.", fix="Use 1-65535, e.g. 29500, or None."
            )
    _check_python(remote.python)
    return remote


def _check_python(python: object) -> None:
    paths = list(python.values()) if isinstance(python, Mapping) else [python]
    keys_ok = not isinstance(python, Mapping) or all(isinstance(k, str) for k in python)
    if python is None:
        return
    if not keys_ok or not all(isinstance(p, str) and p.strip() and "\0" not in p for p in paths):
        raise InvalidArgument(
            f"Remote.python={python!r} must be a path on the hosts (a non-empty string) or a {{host: path}} dict.",
            cause="an empty string would silently mean this kernel's interpreter",
            fix='Use e.g. python="/opt/venv/bin/python", or leave it out for this kernel\'s path.',
        )


def host_python(remote: Remote, host: str, default: str = sys.executable) -> str:
    """The interpreter path to run on ``host``."""
    if isinstance(remote.python, Mapping):
        return remote.python.get(host, default)
    return remote.python or default


def remote_argv(python: str, forwarded: Mapping[str, str], marker: str | None, *args: str) -> list[str]:
    """What runs on a host: the host runner under ``env`` with the forwarded variables and the run's
    marker (None: no marker, for the runner's ``--kill``), then ``args``."""
    assignments = [f"{k}={v}" for k, v in forwarded.items()] + ([marker] if marker else [])
    return ["env", *assignments, python, "-m", "tpu_lab.tp.launch.runners.ssh_host", *args]


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
