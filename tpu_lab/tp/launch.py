"""``launch()``: run a cell's code under torchrun on N processes, stream each rank's output, collect each
rank's result, and leave nothing running.

``build_command`` is pure (argv and environment from a LaunchSpec). ``RunningLaunch`` owns every
subprocess call: torchrun runs in its own session with rendezvous on 127.0.0.1, never through a shell.
torchrun starts each rank in a session of its own, so stopping a run means: SIGTERM to torchrun (it
stops its ranks), then SIGKILL to every process that still carries this run's id in its environment.
Ranks also die with torchrun (PR_SET_PDEATHSIG in the worker runner), and torchrun with this process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_lab import _render
from tpu_lab.device import LAUNCH_ENV
from tpu_lab.errors import InvalidArgument, TpuLabError
from tpu_lab.hardware import TpuChips, scan_tpu_chips
from tpu_lab.tp.results import RESULT_DIR_ENV, read_json

RUN_ID_ENV = "TPU_LAB_RUN_ID"
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
)
TAIL_LINES = 200
STOP_GRACE_SECONDS = 3.0
OutputCallback = Callable[["int | None", str], None]
_RANK_PREFIX = re.compile(r"^\[default(\d+)\]:(.*)$")


class LaunchError(TpuLabError):
    """A launch failed: names the argv, each rank's exit code or signal, and the failing rank's traceback.
    ``.result`` holds the LaunchResult."""

    def __init__(
        self, what: str, *, result: LaunchResult | None = None, cause: str | None = None, fix: str | None = None
    ) -> None:
        super().__init__(what, cause=cause, fix=fix)
        self.result = result


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
    port: int
    """Rendezvous port on 127.0.0.1."""
    args: tuple[str, ...] = ()
    """Arguments for the worker script."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the ranks (wins over everything else)."""
    tpu_env: Mapping[str, str] = field(default_factory=dict)
    """torch_tpu's launch environment (set_tpu_launch_env), computed fresh in a child process."""
    python: str = sys.executable


def build_command(spec: LaunchSpec, base_env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The torchrun argv and the ranks' environment for ``spec``. Pure."""
    argv = [
        spec.python,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={spec.nproc}",
        "--nnodes=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{spec.port}",
        f"--rdzv-id={spec.run_id}",
        "--max-restarts=0",
        "--monitor-interval=0.2",  # notice a dead rank fast, stop the others
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
    env.update(spec.tpu_env)
    env.update(spec.env)
    env.update({RUN_ID_ENV: spec.run_id, RESULT_DIR_ENV: str(spec.run_dir), "PYTHONUNBUFFERED": "1"})
    return argv, env


@dataclass(frozen=True)
class RankResult:
    """How one rank ended."""

    rank: int
    exit_code: int | None
    """0 on success; None when the rank was stopped before it could say (see ``signal``)."""
    signal: str | None
    """The signal that ended it (e.g. "SIGTERM" when the launcher stopped it), if known."""
    value: Any
    """What it passed to ``tl.report()`` (None if nothing)."""
    output: str
    """The tail of its output (stdout and stderr)."""
    error: str | None
    """Its traceback when it failed."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def state(self) -> str:
        if self.exit_code == 0:
            return "ok"
        if self.exit_code is None:
            return f"stopped ({self.signal})" if self.signal else "stopped"
        return f"failed (exit {self.exit_code})"


@dataclass(frozen=True)
class LaunchResult:
    """A finished launch: each rank's exit code, value and output."""

    argv: tuple[str, ...]
    run_dir: Path
    seconds: float
    ranks: tuple[RankResult, ...]
    launcher_output: str = ""
    """torchrun's own lines (not from a rank)."""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.ranks)

    @property
    def values(self) -> list[Any]:
        """Each rank's reported value, by rank."""
        return [r.value for r in self.ranks]

    def __str__(self) -> str:
        lines = [f"tpu_lab launch: {len(self.ranks)} rank(s), {'ok' if self.ok else 'FAILED'}, {self.seconds:.1f} s"]
        lines += [f"  rank {r.rank}: {r.state}, value={r.value!r}" for r in self.ranks]
        return "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        rows = [(r.rank, r.state, repr(r.value)) for r in self.ranks]
        html = (
            f"<div class='tpu-lab-launch-result'><b>{len(self.ranks)} rank(s), "
            f"{'ok' if self.ok else 'FAILED'}, {self.seconds:.1f} s</b>"
            f"{_render.table(rows, ['rank', 'state', 'value'])}</div>"
        )
        return {"text/plain": str(self), "text/html": html}


class RunningLaunch:
    """A torchrun run in progress. ``wait()`` streams output and returns the LaunchResult; ``stop()``
    ends every process of the run (safe from any thread)."""

    def __init__(self, spec: LaunchSpec, argv: list[str], env: dict[str, str]) -> None:
        self.spec, self.argv = spec, argv
        self.started = time.monotonic()
        self.finished: float | None = None
        self.tails: dict[int | None, deque[str]] = {}
        self.stop_reason: str | None = None
        self._lines: queue.Queue[tuple[int | None, str] | None] = queue.Queue()
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_term_with_parent,
            text=True,
            errors="replace",
            bufsize=1,
        )
        _LIVE.add(self)
        self._reader = threading.Thread(target=self._read, name=f"tpu_lab-launch-{spec.run_id[:8]}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:  # drained continuously, so a chatty rank never blocks on a full pipe
            line = raw.rstrip("\n")
            m = _RANK_PREFIX.match(line)
            rank, text = (int(m[1]), m[2]) if m else (None, line)
            self.tails.setdefault(rank, deque(maxlen=TAIL_LINES)).append(text)
            self._lines.put((rank, text))
        self._lines.put(None)

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, reason: str = "stopped") -> None:
        """SIGTERM torchrun (it stops its ranks), then SIGKILL whatever of the run is left."""
        with self._lock:
            self.stop_reason = self.stop_reason or reason
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(STOP_GRACE_SECONDS)
            kill_run(self.spec.run_id)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(STOP_GRACE_SECONDS)

    def wait(self, timeout: float | None = None, on_output: OutputCallback | None = None) -> LaunchResult:
        """Stream output until the run ends; raise LaunchError when a rank failed or time ran out.
        KeyboardInterrupt (a cell interrupt) stops every process of the run, then propagates."""
        on_output = on_output or _print_line
        deadline = None if timeout is None else self.started + timeout
        try:
            done = False
            while not done:
                try:
                    item = self._lines.get(timeout=0.1)
                    if item is None:  # the reader saw torchrun's output end
                        done = True
                    else:
                        on_output(*item)
                except queue.Empty:
                    pass
                if deadline is not None and time.monotonic() > deadline and self.running():
                    self.stop(f"timed out after {timeout:g} s")
            self.proc.wait()
        except BaseException:
            self.stop("interrupted")
            raise
        finally:
            kill_run(self.spec.run_id)
            _LIVE.discard(self)
            self.finished = time.monotonic()
        result = self._collect()
        if self.stop_reason:
            raise LaunchError(
                f"The launch {self.stop_reason}; every process of the run was stopped.\n{_describe(result)}",
                result=result,
                cause="a rank waiting forever (a hang, a deadlock, a collective another rank "
                "never joined) or a timeout shorter than loading takes",
                fix="Look at each rank's last lines above; raise timeout= if loading is just slow.",
            )
        if not result.ok:
            failing = _failing_rank(result)
            raise LaunchError(
                f"Rank {failing.rank} failed; torchrun stopped the others.\n{_describe(result)}",
                result=result,
                fix="Fix the error in the traceback above (the same code runs on every rank).",
            )
        return result

    def _collect(self) -> LaunchResult:
        launcher = "\n".join(self.tails.get(None, ()))
        torchrun_codes = {
            int(r): int(c) for r, c in re.findall(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", launcher)
        }
        ranks = []
        for rank in range(self.spec.nproc):
            status = read_json(self.spec.run_dir / f"rank{rank}.status.json") or {}
            code = status.get("exit_code", torchrun_codes.get(rank))
            sig = None
            if code is not None and code < 0:
                sig, code = signal.Signals(-code).name, None
            elif code is None and self.stop_reason:
                sig = "SIGTERM"
            error = status.get("error")
            if code not in (0, None) and not error:
                error = "\n".join(list(self.tails.get(rank, ()))[-30:])
            ranks.append(
                RankResult(
                    rank=rank,
                    exit_code=code,
                    signal=sig,
                    value=read_json(self.spec.run_dir / f"rank{rank}.value.json"),
                    output="\n".join(self.tails.get(rank, ())),
                    error=error,
                )
            )
        return LaunchResult(tuple(self.argv), self.spec.run_dir, self.elapsed, tuple(ranks), launcher)


def start(
    code_or_path: str | os.PathLike,
    *,
    nproc: int,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> RunningLaunch:
    """Check everything that can be checked, then start torchrun and return the running launch."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise InvalidArgument(
            f"nproc={nproc!r} must be a positive integer (one process per chip).", fix="Use e.g. nproc=2."
        )
    env = dict(env or {})
    bad = [k for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise InvalidArgument(f"env values must be strings; {bad} are not.", fix="Convert them with str().")
    environ = os.environ if environ is None else environ
    tpu_env = _tpu_launch_env(nproc, environ)
    run_dir = Path(tempfile.mkdtemp(prefix="tpu_lab_run_"))
    script = _worker_script(code_or_path, run_dir)
    spec = LaunchSpec(
        script=script,
        nproc=nproc,
        run_dir=run_dir,
        run_id=uuid.uuid4().hex,
        port=_free_port(),
        args=tuple(map(str, args)),
        env=env,
        tpu_env=tpu_env,
    )
    argv, full_env = build_command(spec, environ)
    return RunningLaunch(spec, argv, full_env)


def launch(
    code_or_path: str | os.PathLike,
    *,
    nproc: int,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    on_output: OutputCallback | None = None,
) -> LaunchResult:
    """Run ``code_or_path`` (Python source, or a .py file) on ``nproc`` ranks under torchrun.

    Each rank's output is streamed live, labelled by rank (``on_output(rank, line)``; rank None is
    torchrun itself). Ranks hand values back with ``tl.report(value)``. Raises LaunchError naming each
    rank's exit code and the failing traceback; on timeout or interrupt every process of the run is stopped.
    """
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise InvalidArgument(f"timeout={timeout!r} must be a positive number of seconds.", fix="Use e.g. timeout=300.")
    return start(code_or_path, nproc=nproc, env=env, args=args).wait(timeout, on_output)


def kill_run(run_id: str) -> int:
    """SIGKILL every process whose environment carries this run's id (Linux /proc); returns how many."""
    killed = 0
    for pid in run_pids(run_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def run_pids(run_id: str | None = None) -> list[int]:
    """Live processes started by tl.launch (of one run, or of any run), found by their environment marker."""
    marker = f"{RUN_ID_ENV}={run_id}".encode() if run_id else f"{RUN_ID_ENV}=".encode()
    me, pids = os.getpid(), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if int(entry.name) != me and marker in (entry / "environ").read_bytes() and not _is_zombie(entry):
                pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


def _is_zombie(entry: Path) -> bool:
    stat = (entry / "stat").read_text()
    return stat[stat.rindex(")") + 2] == "Z"


def _worker_script(code_or_path: str | os.PathLike, run_dir: Path) -> Path:
    """The script each rank runs: a .py file as it is, or the code written to the run directory."""
    looks_like_path = isinstance(code_or_path, os.PathLike) or (
        isinstance(code_or_path, str) and "\n" not in code_or_path and code_or_path.strip().endswith(".py")
    )
    if looks_like_path:
        path = Path(code_or_path).expanduser().resolve()
        if not path.is_file():
            raise InvalidArgument(f"No worker script at {path}.", fix="Pass an existing .py file, or the code itself.")
        source, name = path.read_text(), str(path)
    elif isinstance(code_or_path, str) and code_or_path.strip():
        source, name, path = code_or_path, "<tp_run cell>", run_dir / "worker.py"
    else:
        raise InvalidArgument("Nothing to run: the code is empty.", fix="Pass Python source or a .py file.")
    try:
        compile(source, name, "exec")
    except SyntaxError as e:
        raise InvalidArgument(
            f"The worker code has a syntax error at line {e.lineno}: {e.msg}\n    {(e.text or '').rstrip()}",
            fix="Fix the code; nothing was started.",
        ) from e
    if not looks_like_path:
        path.write_text(source)
    return path


def check_tpu_ranks(nproc: int, chips: TpuChips, holds_tpu: bool | None) -> None:
    """Refuse, before anything starts, a launch a TPU host cannot run. Pure."""
    if nproc > chips.count:
        raise InvalidArgument(
            f"nproc={nproc} but this host has {chips.count} TPU chip(s); torch_tpu runs one process per chip.",
            fix=f"Use nproc in {list(chips.rank_counts)}.",
        )
    if nproc not in chips.rank_counts:
        raise InvalidArgument(
            f'torch_tpu has no {chips.generation} topology for {nproc} processes ("No TPU topology found for '
            f'count: {nproc}").',
            fix=f"Use nproc in {list(chips.rank_counts)}.",
        )
    if holds_tpu:
        raise LaunchError(
            "This kernel already holds the TPU, so every rank would fail with 'Device or resource busy'.",
            cause="a tensor was put on the 'tpu' device in this kernel (loading a model there counts)",
            fix="Save what you need, restart the kernel, and launch before touching the TPU here.",
        )


def _tpu_launch_env(nproc: int, environ: Mapping[str, str]) -> dict[str, str]:
    """On a TPU host: check the rank count and compute torch_tpu's launch environment in a short-lived
    child. set_tpu_launch_env() caches its values for the life of a process and changes the environment
    even when it fails, so a long-lived kernel must never call it itself."""
    chips = scan_tpu_chips()
    if not chips.count:
        return {}
    from tpu_lab.device import _holds_tpu

    check_tpu_ranks(nproc, chips, _holds_tpu())
    clean = {k: v for k, v in environ.items() if k not in LAUNCH_ENV}
    code = (
        "import json, os, sys, torch\nbefore = dict(os.environ)\n"
        "torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=int(sys.argv[1]))\n"
        "print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(nproc)], env=clean, capture_output=True, text=True, timeout=120
    )
    if proc.returncode:
        raise LaunchError(
            "torch_tpu could not compute the launch environment:\n" + proc.stderr.strip()[-2000:],
            fix="Check the TPU with `tpu-lab probe`; the error above comes from set_tpu_launch_env().",
        )
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _term_with_parent() -> None:
    # Runs in the child before exec: torchrun gets SIGTERM when this process dies, even by SIGKILL.
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _print_line(rank: int | None, line: str) -> None:
    # torchrun's own lines (its logging and, on failure, its own traceback) stay out of the live view;
    # they are in LaunchResult.launcher_output and in a LaunchError when no rank explains the failure.
    if rank is not None and line.strip():
        print(f"[rank {rank}] {line}", flush=True)


def _failing_rank(result: LaunchResult) -> RankResult:
    failed = [r for r in result.ranks if r.exit_code not in (0, None)]
    return failed[0] if failed else next(r for r in result.ranks if not r.ok)


def _describe(result: LaunchResult) -> str:
    lines = ["argv: " + " ".join(result.argv)]
    lines += [f"rank {r.rank}: {r.state}" for r in result.ranks]
    failing = next((r for r in result.ranks if r.error), None)
    if failing is not None and failing.error:
        tail = "\n".join(failing.error.strip().splitlines()[-12:])
        lines.append(f"rank {failing.rank} traceback (tail):\n{tail}")
    elif result.launcher_output:
        lines.append("torchrun said (tail):\n" + "\n".join(result.launcher_output.splitlines()[-12:]))
    return "\n".join(lines)


_LIVE: set[RunningLaunch] = set()


@atexit.register
def _stop_all() -> None:
    """The kernel is exiting: leave no rank behind."""
    for run in list(_LIVE):
        run.stop("kernel exiting")
