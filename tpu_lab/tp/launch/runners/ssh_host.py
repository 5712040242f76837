"""What a multi-host launch runs on each host: ``python -m tpu_lab.tp.launch.runners.ssh_host``, started over ssh.

It says ``hi`` as soon as it runs (the host is reachable and its Python imports tpu_lab), reads the
job, checks this host (versions, chips against nproc) and prepares it (its own run folder, the code,
torch_tpu's launch environment, a free rendezvous port on the first host), says ``hello`` and waits for
``go``. Then it builds this node's torchrun command with the same builder as one host
(``tp.launch.torchrun_command.build_command``), runs it (``runners.local.Torchrun``), passes each line on labelled with
its global rank, each rank's state as it changes, a heartbeat every second, and at the end each rank's
result. ``stop``, or the end of stdin (the kernel's ssh client or the kernel itself is gone), stops every
process of the run on this host. The run folder is removed at the end, whatever happens; folders left
by a runner that was killed are pruned by the next one.

``python -m tpu_lab.tp.launch.runners.ssh_host --kill MARKER`` ends every process of one host's run (the kernel
runs it through a second connection when a host runner did not stop, e.g. because it was frozen).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from tpu_lab.tp.launch.process import kill_run
from tpu_lab.tp.launch.run_dirs import HOST_PREFIX, prune_run_dirs
from tpu_lab.tp.launch.runners import ssh_wire as wire
from tpu_lab.tp.launch.runners.host_prep import HostProblem, prepare
from tpu_lab.tp.launch.runners.local import Torchrun
from tpu_lab.tp.launch.torchrun_command import LaunchSpec, build_command
from tpu_lab.tp.results.run_state import RankState, RunState

BEAT_S = 1.0


class _Out:
    """stdout (ssh's channel to the kernel), one whole line at a time from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.broken = False

    def write(self, line: str) -> None:
        with self._lock:
            if self.broken:
                return
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True  # the kernel is gone; stdin's end will stop the run


def _read_message() -> dict[str, Any] | None:
    line = sys.stdin.readline()
    if not line:
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _watch_stdin(run: Torchrun) -> None:
    while True:
        message = _read_message()
        if message is None or message.get("kind") == "stop":
            run.stop()
            return


def _beat(out: _Out, done: threading.Event) -> None:
    while not done.wait(BEAT_S):
        out.write(wire.control("beat"))


def _run(job: dict[str, Any], go: dict[str, Any], hello: dict[str, Any], out: _Out) -> dict[str, Any]:
    nproc, node, nnodes = job["nproc"], job["node"], len(job["addresses"])
    spec = LaunchSpec(
        script=Path(hello["script"]),
        nproc=nproc,
        run_dir=Path(hello["run_dir"]),
        run_id=os.environ.get("TPU_LAB_RUN_ID", job["run_id"]),  # this host's marker
        port=int(go["port"]),
        args=tuple(job["args"]),
        env=dict(job["env"]),
        tpu_env=hello["tpu_env"],
        nnodes=nnodes,
        node_rank=node,
        master=go["master"],
        rdzv_id=job["run_id"],
    )
    argv, env = build_command(spec, os.environ)
    out.write(wire.control("started", argv=argv))
    state = RunState(nnodes * nproc)
    run = Torchrun(spec, argv, env, state)
    done = threading.Event()
    threading.Thread(target=_beat, args=(out, done), name="tpu_lab-remote-beat", daemon=True).start()
    run.start()
    threading.Thread(target=_watch_stdin, args=(run,), name="tpu_lab-remote-stdin", daemon=True).start()
    mine = range(spec.first_rank, spec.first_rank + nproc)
    sent: dict[int, RankState] = {}
    sent_compiles: dict[int, object] = {}
    try:
        finished = False
        while not finished:
            finished = run.poll(lambda rank, text: out.write(wire.output_line(rank, text)), 0.1)
            for r in mine:
                status = state.ranks[r]
                if sent.get(r) is not status.state:
                    sent[r] = status.state
                    fields = {"exit_code": status.exit_code, "signal": status.signal, "failed_at": status.failed_at}
                    out.write(wire.control("rank", rank=r, state=status.state.value, **fields))
                if status.compiles is not sent_compiles.get(r) and status.compiles is not None:
                    sent_compiles[r] = (
                        status.compiles
                    )  # the rank's live compiles (tp.results.live_compiles), as they change
                    out.write(wire.control("compiles", rank=r, **status.compiles.to_marker()))
    finally:
        if finished:
            run.end()
        else:
            run.stop()
        done.set()
    state.end()
    values, errors = run.values(), run.errors()
    ranks = [
        {
            "rank": r,
            "state": state.ranks[r].state.value,
            "exit_code": state.ranks[r].exit_code,
            "signal": state.ranks[r].signal,
            "failed_at": state.ranks[r].failed_at,
            "value": values[r],
            "error": errors[r],
            "compiles": run.compile_files.files.get(r) if run.compile_files is not None else None,
        }
        for r in mine
    ]
    return {"ranks": ranks, "failure": run.failure, "failed_at": run.failed_at, "stopped": run.stopping}


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through _run, which stops the run, and the cleanup


def main() -> None:
    if sys.argv[1:2] == ["--kill"] and len(sys.argv) == 3:
        print(kill_run(sys.argv[2]), flush=True)
        return
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    out = _Out()
    out.write(wire.control("hi"))
    job = _read_message()
    if job is None or job.get("kind") != "job":
        return  # the kernel gave up before sending the job: nothing was started here
    marker = os.environ.get("TPU_LAB_RUN_ID", f"{job['run_id']}-node{job['node']}-")
    try:
        root = tempfile.gettempdir()
        prune_run_dirs(root, keep=0, prefix=HOST_PREFIX)  # folders of host runners that were killed
        run_dir = Path(tempfile.mkdtemp(prefix=f"{HOST_PREFIX}{marker}.", dir=root))
    except OSError as e:
        where = getattr(e, "filename", None) or tempfile.gettempdir()
        out.write(wire.control("error", message=f"cannot create a run folder under {where}: {e.strerror or e}"))
        return
    try:
        try:
            hello = prepare(job, run_dir)
        except (HostProblem, OSError) as e:
            out.write(wire.control("error", message=str(e)))
            return
        out.write(wire.control("hello", **hello))
        go = _read_message()
        if go is None or go.get("kind") != "go":
            return  # another host failed its check, or the launch was stopped: nothing starts here
        out.write(wire.control("result", **_run(job, go, hello, out)))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
