"""What a single-host launch runs in place of bare ``python -m torch.distributed.run``: torchrun's own
``main()`` (the engine stays torchrun), with two things added from outside it.

- Rendezvous backend ``tpu_lab-loopback``: torchrun's c10d backend makes two TCPStores that listen on
  every interface (``*:PORT``), and TCPStore binds every interface whatever host it is given, with no
  authentication. This handler instead hands TCPStore a socket already listening on 127.0.0.1
  (``master_listen_fd``); the ranks use the same store (torchrun's agent-store sharing), so the launch
  listens on loopback only. Registered with torchrun's handler registry before its main runs, so it
  works without any installed entry point.
- This process is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a rank's child that starts its
  own session and outlives its rank is re-parented here, not to init, so it is still found through the
  process tree, and every descendant is ended when torchrun returns.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import sys

from torch.distributed import PrefixStore, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
    rendezvous_handler_registry,
)

from tpu_lab.tp.command import LAUNCHER_PID_ENV, LOOPBACK_BACKEND
from tpu_lab.tp.process import end_descendants

LOOPBACK = "127.0.0.1"


class LoopbackRendezvous(RendezvousHandler):
    """One node, one store, listening on 127.0.0.1 only."""

    def __init__(self, run_id: str, port: int, timeout: datetime.timedelta) -> None:
        self.run_id, self.port, self.timeout = run_id, port, timeout
        self._store: TCPStore | None = None

    def get_backend(self) -> str:
        return LOOPBACK_BACKEND

    @property
    def use_agent_store(self) -> bool:
        return True  # ranks connect to this store as clients instead of opening their own server

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((LOOPBACK, self.port))
            listener.listen(128)
            self.port = listener.getsockname()[1]
            # TCPStore takes the descriptor over; the Python object must not close it.
            fd = listener.detach()
            self._store = TCPStore(
                LOOPBACK,
                self.port,
                is_master=True,
                wait_for_workers=False,
                multi_tenant=True,
                timeout=self.timeout,
                master_listen_fd=fd,
            )
        return RendezvousInfo(PrefixStore(self.run_id, self._store), 0, 1, RendezvousStoreInfo(LOOPBACK, self.port))

    def is_closed(self) -> bool:
        return False

    def set_closed(self) -> None:
        pass

    def num_nodes_waiting(self) -> int:
        return 0

    def get_run_id(self) -> str:
        return self.run_id

    def shutdown(self) -> bool:
        return True


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    host, _, port = params.endpoint.rpartition(":")
    if params.max_nodes != 1 or host not in ("", LOOPBACK):
        raise ValueError(f"{LOOPBACK_BACKEND} is for one host on {LOOPBACK}; got {params.endpoint!r}")
    timeout = datetime.timedelta(seconds=int(params.config.get("timeout", 600)))
    return LoopbackRendezvous(params.run_id, int(port or 0), timeout)


def _become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6").prctl(36, 1)  # 36 = PR_SET_CHILD_SUBREAPER


def main() -> None:
    _become_subreaper()
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # ranks check they still have this parent
    rendezvous_handler_registry.register(LOOPBACK_BACKEND, create_handler)
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main()
    finally:
        end_descendants()


if __name__ == "__main__":
    main()
