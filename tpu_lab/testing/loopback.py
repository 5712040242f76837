"""A simulated multi-host slice on one machine, for tests, benchmarks and notebook 06: a real OpenSSH
server (Debian's sshd) listening on loopback only (127.0.0.1, .2 and .3: all this machine, one
non-default port), with throwaway host and user keys in a folder of yours, and the ``tl.Remote`` whose
client options match (strict host key checking against its own known_hosts). ``start_sshd()`` returns
the reason instead when sshd cannot start here. Nothing listens beyond loopback."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tpu_lab.tp.launch.process import run_briefly, spawn_server, stop_session
from tpu_lab.tp.launch.runners.ssh_command import Remote

ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
SSHD = "/usr/sbin/sshd"


@dataclass(eq=False)
class Sshd:
    """A running loopback sshd: ``remote`` reaches 127.0.0.1-3 through it; ``stop()`` ends it."""

    proc: subprocess.Popen
    port: int
    folder: Path
    remote: Remote

    def children(self) -> list[int]:
        """Live session processes of this sshd (one per open connection)."""
        out = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == self.proc.pid and stat[stat.rindex(")") + 2] != "Z":
                    out.append(int(entry.name))
            except (OSError, ValueError):
                continue
        return out

    def stop(self) -> None:
        """Stop sshd (and any session still open)."""
        stop_session(self.proc)
        _RUNNING.discard(self)


def _keygen(path: Path) -> None:
    done = run_briefly(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], dict(os.environ), 60)
    if done.returncode:
        raise OSError(f"ssh-keygen failed: {done.stderr.strip()}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def start_sshd(folder: Path) -> Sshd | str:
    """Start sshd; returns it, or why it cannot run here (the tests then skip with that reason)."""
    if not Path(SSHD).exists() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "needs Debian's openssh-server and openssh-client (apt-get install openssh-server openssh-client)"
    if os.geteuid() != 0:
        return "sshd with its own config needs root here (privilege separation)"
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    _keygen(folder / "host_key")
    _keygen(folder / "user_key")
    shutil.copy(folder / "user_key.pub", folder / "authorized_keys")
    port = _free_port()
    host_key = (folder / "host_key.pub").read_text().split()[:2]
    (folder / "known_hosts").write_text("".join(f"[{a}]:{port} {' '.join(host_key)}\n" for a in ADDRESSES))
    config = [f"ListenAddress {a}:{port}" for a in ADDRESSES] + [
        f"HostKey {folder / 'host_key'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        f"PidFile {folder / 'sshd.pid'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "MaxStartups 200",
        "MaxSessions 50",
        "LogLevel ERROR",
    ]
    (folder / "sshd_config").write_text("\n".join(config) + "\n")
    log = folder / "sshd.log"
    # -D: sshd stays this process's child, so it ends with the kernel (PR_SET_PDEATHSIG), however it ends.
    proc = spawn_server([SSHD, "-D", "-f", str(folder / "sshd_config"), "-E", str(log)], folder / "sshd.out")
    deadline = time.monotonic() + 10
    while not all(_accepts(a, port) for a in ADDRESSES):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_session(proc, 0)
            return f"sshd did not start: {log.read_text().strip() if log.exists() else 'no log'}"
        time.sleep(0.05)
    options = (
        "-F", "/dev/null",
        "-p", str(port),
        "-i", str(folder / "user_key"),
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={folder / 'known_hosts'}",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "LogLevel=ERROR",
    )  # fmt: skip
    server = Sshd(proc, port, folder, Remote(ssh_options=options))
    _RUNNING.add(server)
    return server


_RUNNING: set[Sshd] = set()


@atexit.register
def _stop_all() -> None:
    """The kernel is exiting normally: stop every sshd it started (PR_SET_PDEATHSIG covers the rest)."""
    for server in list(_RUNNING):
        server.stop()
