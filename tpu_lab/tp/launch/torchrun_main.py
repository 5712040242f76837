"""What every launch runs in place of bare ``python -m torch.distributed.run``: torchrun's own ``main()``
(the engine stays torchrun), with three things added from outside it.

- Rendezvous backend ``tpu_lab-bound``: torchrun's c10d and static backends make TCPStores that listen
  on every interface (``*:PORT``) with no authentication, whatever host they are given. This handler
  hands TCPStore a socket already listening on node 0's address only (``master_listen_fd``): 127.0.0.1
  on one host or a simulated slice, the first host's address on a real pod. Other nodes connect to it
  as clients, and the ranks use the same store (torchrun's agent-store sharing). Node k's rank comes in
  ``--rdzv-conf=rank=k``. Registered with torchrun's handler registry before its main runs.
- This process is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a rank's child that starts its
  own session and outlives its rank is re-parented here, not to init, so it is still found through the
  process tree, and every descendant is ended when torchrun returns.
- When torchrun first stops its ranks, the local ranks that had already ended with an error (exit code
  or signal, and a lower bound of when) are written to ``torchrun.failures.json`` in the run folder, so
  the runner never parses torchrun's printed summary and never blames a rank torchrun itself stopped.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from torch.distributed import PrefixStore, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
    rendezvous_handler_registry,
)

from tpu_lab.tp.launch.process import end_descendants
from tpu_lab.tp.launch.torchrun_command import (
    BOUND_BACKEND,
    FAILURES_FILE,
    KEEPER_ENV,
    LAUNCHER_PID_ENV,
    RESULT_DIR_ENV,
)
from tpu_lab.tp.results.rank_files import write_atomic


class BoundRendezvous(RendezvousHandler):
    """A fixed set of nodes; one store on node 0, listening on the master address only."""

    def __init__(
        self, run_id: str, master: str, port: int, rank: int, nnodes: int, timeout: datetime.timedelta
    ) -> None:
        self.run_id, self.master, self.port, self.rank, self.nnodes, self.timeout = (
            run_id, master, port, rank, nnodes, timeout
        )  # fmt: skip
        self._store: TCPStore | None = None

    def get_backend(self) -> str:
        return BOUND_BACKEND

    @property
    def use_agent_store(self) -> bool:
        return True  # ranks connect to this store as clients instead of opening their own server

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None:
            if self.rank == 0:
                family = socket.AF_INET6 if ":" in self.master else socket.AF_INET
                listener = socket.socket(family, socket.SOCK_STREAM)
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind((self.master, self.port))
                listener.listen(128)
                self.port = listener.getsockname()[1]
                fd = listener.detach()  # TCPStore takes the descriptor over; the Python object must not close it
                self._store = TCPStore(
                    self.master,
                    self.port,
                    world_size=self.nnodes if self.nnodes > 1 else None,
                    is_master=True,
                    wait_for_workers=False,
                    multi_tenant=True,
                    timeout=self.timeout,
                    master_listen_fd=fd,
                )
            else:
                self._store = TCPStore(self.master, self.port, is_master=False, timeout=self.timeout)
        store = PrefixStore(self.run_id, self._store)
        return RendezvousInfo(store, self.rank, self.nnodes, RendezvousStoreInfo(self.master, self.port))

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
    nnodes, rank = params.max_nodes, int(params.config.get("rank", 0))
    if params.min_nodes != nnodes or not host or not 0 <= rank < nnodes:
        raise ValueError(f"{BOUND_BACKEND} needs a fixed node count, a host and rank < nnodes; got {params.endpoint!r}")
    if not port and nnodes > 1:
        raise ValueError(f"{BOUND_BACKEND} across nodes needs a port; got {params.endpoint!r}")
    timeout = datetime.timedelta(seconds=int(params.config.get("timeout", 600)))
    return BoundRendezvous(params.run_id, host.strip("[]"), int(port or 0), rank, nnodes, timeout)


MONITOR_S = 0.2  # --monitor-interval in tp.launch.torchrun_command


def _note_failures_before_stop() -> None:
    """Record, the first time torchrun stops its ranks (after a failure, or on a signal), which local
    ranks had already ended with an error and a lower bound of when: torchrun's own record also lists
    the ranks it then kills itself, and only has whole seconds taken when it noticed."""
    from torch.distributed.elastic.multiprocessing import api

    context = getattr(api, "SubprocessContext", None)
    close, poll = getattr(context, "close", None), getattr(context, "_poll", None)
    folder = os.environ.get(RESULT_DIR_ENV)
    if context is None or close is None or not folder:
        return

    def noting_poll(self: Any, *args: Any, **kwargs: Any) -> Any:
        looked = time.time()
        result = poll(self, *args, **kwargs)  # type: ignore[misc]
        if result is None:
            self._tpu_lab_alive_at = looked  # every rank was running when this look began
        return result

    def noting_close(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_tpu_lab_noted", False):
            self._tpu_lab_noted = True  # later closes see the ranks this one stopped
            # Each died after torchrun's last look that found every rank running (a true lower bound,
            # however loaded the machine); without that look, one monitor interval before now.
            died_by = getattr(self, "_tpu_lab_alive_at", time.time() - MONITOR_S - 0.05)
            failed = {}
            for local_rank, handler in dict(getattr(self, "subprocess_handlers", {})).items():
                code = handler.proc.poll()
                if code:
                    failed[str(local_rank)] = {"exitcode": code, "timestamp": died_by}
            with contextlib.suppress(OSError):
                write_atomic(Path(folder) / FAILURES_FILE, json.dumps(failed))
        return close(self, *args, **kwargs)

    context.close = noting_close
    if poll is not None:
        context._poll = noting_poll


def _become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6").prctl(36, 1)  # 36 = PR_SET_CHILD_SUBREAPER


def _keep() -> None:
    """Stay as a keeper whose child runs torchrun; return only in the child. Ray SIGKILLs the children of
    an actor that dies (its driver, the kernel, killed), which would kill torchrun before it can end what
    its ranks started (a daemon in its own session, say): torchrun one level down gets a parent-death
    SIGTERM instead and ends every descendant on its way out, as on one host. The keeper ignores the
    signals a stop sends (they reach torchrun through its session) and ends as its child ended."""
    import signal

    child = os.fork()
    if child == 0:
        import ctypes

        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG: the keeper's death
        return
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def main() -> None:
    if os.environ.pop(KEEPER_ENV, "") == "1" and sys.platform.startswith("linux"):
        _keep()
    _become_subreaper()
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # ranks check they still have this parent
    rendezvous_handler_registry.register(BOUND_BACKEND, create_handler)
    _note_failures_before_stop()
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main()
    finally:
        end_descendants()


if __name__ == "__main__":
    main()
