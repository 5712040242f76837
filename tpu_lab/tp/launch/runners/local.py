"""One torchrun on this machine: ``Torchrun`` (used by the single-host runner and, on each host, by the
ssh host runner) and ``LocalRunner``, the runner behind ``tl.launch(code, nproc=N)``.

Each rank writes its own log file (``--redirects=3``); ``Torchrun.poll`` reads every rank's file and
torchrun's own output and cuts them into lines per rank, so a rank's bytes are never credited to another
(a line with no newline yet waits in its rank's buffer). A rank's state comes from its status file
(written by ``tp.launch.rank_worker``) or from torchrun's record of failed ranks (``tp.launch.torchrun_main``): a rank killed
by a signal nobody in the launch sent is a failure, with that signal.
"""

from __future__ import annotations

import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from tpu_lab.errors import LaunchError
from tpu_lab.tp.launch.job import Job, watched
from tpu_lab.tp.launch.process import interrupts_held, kill_run, spawn_launcher, terminate_then_kill
from tpu_lab.tp.launch.run_dirs import new_run_dir, remove_run_dir
from tpu_lab.tp.launch.runner import OutputCallback, Runner
from tpu_lab.tp.launch.torchrun_command import FAILURES_FILE, LaunchSpec, build_command
from tpu_lab.tp.launch.tpu_env import check_rank_memory, tpu_launch_env
from tpu_lab.tp.results.checked_files import checked_status
from tpu_lab.tp.results.launch_result import LaunchResult, rank_results
from tpu_lab.tp.results.rank_compiles import RunCompiles
from tpu_lab.tp.results.rank_files import CompileFiles, read_json
from tpu_lab.tp.results.run_state import RankState, RunState

STOP_GRACE_S = 3.0
READ_CHUNK = 1024 * 1024  # per rank per poll: a rank printing 50 MB at once never sits in memory whole
LONG_LINE = 64 * 1024  # a line longer than this is passed on in pieces (each credited to its own rank)


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


FULL_DISK_BYTES = 256 * 1024


def _free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


class _RankLog:
    """One rank's log file, read from where it was left, cut into whole lines."""

    def __init__(self, rank: int) -> None:
        self.rank, self.pending, self.more = rank, b"", False
        self.file: IO[bytes] | None = None

    def read(self, logs: Path, local: int) -> list[str]:
        if self.file is None:
            found = next(iter(sorted(logs.glob(f"*/attempt_*/{local}/stdout.log"))), None)
            if found is None:
                return []
            self.file = open(found, "rb")  # noqa: SIM115 (kept open while the rank runs)
        chunk = self.file.read(READ_CHUNK)  # the rest next poll: memory stays bounded
        self.more = len(chunk) == READ_CHUNK
        data = self.pending + chunk
        *lines, self.pending = data.split(b"\n")
        redrawn = self.pending.rstrip(b"\r").rfind(b"\r")
        if redrawn >= 0:  # a progress bar redrawing itself with \r: only its newest state is kept
            self.pending = self.pending[redrawn + 1 :]
        while len(self.pending) > LONG_LINE:
            lines.append(self.pending[:LONG_LINE])
            self.pending = self.pending[LONG_LINE:]
        return [line.decode("utf-8", "replace").rstrip("\r").rsplit("\r", 1)[-1] for line in lines]

    def close(self) -> list[str]:
        rest = [self.pending.decode("utf-8", "replace")] if self.pending else []
        self.pending = b""
        if self.file is not None:
            self.file.close()
        return rest


class Torchrun:
    """One node's torchrun: ``start``, ``poll`` until it returns True, ``stop`` from any thread.
    ``failure`` says what failed when no rank did (torchrun itself killed, or ended on its own error)."""

    def __init__(self, spec: LaunchSpec, argv: list[str], env: dict[str, str], state: RunState) -> None:
        self.spec, self.argv, self.env, self.state = spec, argv, env, state
        self.proc: subprocess.Popen[str] | None = None
        self.failure: str | None = None
        self.failed_at: float | None = None
        """Wall-clock lower bound of when ``failure`` happened (torchrun was last seen alive then)."""
        self.stopping = False
        """True once we stopped torchrun while it was still running (its end is then ours, not a failure)."""
        self._ended_at: float | None = None
        self._alive_at: float | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._logs = {spec.first_rank + i: _RankLog(spec.first_rank + i) for i in range(spec.nproc)}
        self._reader_done = False
        self._lock = threading.Lock()
        # The ranks' compile watcher files (results.rank_files.CompileFiles), read live when the launch watches them.
        self.compile_files = CompileFiles(spec.run_dir, self._logs) if watched(env) else None

    def start(self) -> None:
        with interrupts_held():  # started and known, or neither
            self.proc = spawn_launcher(self.argv, self.env)
        threading.Thread(target=self._read, name=f"tpu_lab-torchrun-{self.spec.run_id[:8]}", daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:  # drained continuously, so torchrun never blocks on a full pipe
            self._lines.put(raw.rstrip("\n"))
        self._ended_at = time.time() - 0.05  # its pipe closed as it died
        self._lines.put(None)

    def poll(self, on_output: OutputCallback, seconds: float) -> bool:
        """Pass on what arrived within ``seconds``; True once torchrun has ended and every line is out."""
        if self.proc is not None and self.proc.poll() is None:
            self._alive_at = time.time()  # a lower bound for when it dies, however late we are scheduled
        try:
            item = self._lines.get(timeout=seconds)
            while True:
                if item is None:
                    self._reader_done = True
                    break
                self.state.add_line(None, item)
                on_output(None, item)
                item = self._lines.get_nowait()
        except queue.Empty:
            pass
        self._tail(on_output)
        self._read_statuses()
        if self.compile_files is not None:
            self.compile_files.update(self.state)
        if not self._reader_done or self.proc is None or self.proc.poll() is None:
            return False
        while self._tail(on_output):
            pass  # what the ranks wrote last, a chunk at a time
        for rank, log in self._logs.items():
            for line in log.close():
                self.state.add_line(rank, line)
                on_output(rank, line)
        if self.compile_files is not None:
            self.compile_files.update(self.state)  # the final tables, written as the ranks ended
        self._settle()
        return True

    def _tail(self, on_output: OutputCallback) -> bool:
        """Each rank's new lines (a chunk at most); True when some rank has more waiting."""
        logs = self.spec.run_dir / "logs"
        for rank, log in self._logs.items():
            for line in log.read(logs, rank - self.spec.first_rank):
                self.state.add_line(rank, line)
                on_output(rank, line)
            if log.file is not None:
                self.state.set_rank(rank, RankState.RUNNING)
        return any(log.more for log in self._logs.values())

    def _read_statuses(self) -> None:
        for rank in self._logs:
            if self.state.ranks[rank].state.final:
                continue
            status = checked_status(read_json(self.spec.run_dir / f"rank{rank}.status.json"))
            if status is not None:
                code = status["exit_code"]
                if code == 0:
                    self.state.set_rank(rank, RankState.OK, exit_code=0)
                else:
                    self.state.set_rank(rank, RankState.FAILED, exit_code=code, failed_at=status.get("time"))

    def _settle(self) -> None:
        """Each rank's final state from torchrun's record of failures, and torchrun's own end."""
        self._read_statuses()
        failures = read_json(self.spec.run_dir / FAILURES_FILE) or {}
        for key, record in failures.items() if isinstance(failures, dict) else ():
            if not (str(key).isdigit() and isinstance(record, dict) and isinstance(record.get("exitcode", 1), int)):
                continue  # not the record torchrun writes (a rank may have written over it)
            rank, code = self.spec.first_rank + int(key), int(record.get("exitcode", 1))
            if rank not in self._logs or self.state.ranks[rank].state.final:
                continue
            fields = {"signal": signal_name(code)} if code < 0 else {"exit_code": code}
            self.state.set_rank(rank, RankState.FAILED, failed_at=record.get("timestamp"), **fields)
        assert self.proc is not None
        code = self.proc.returncode
        rank_failed = any(self.state.ranks[r].state is RankState.FAILED for r in self._logs)
        free = _free_bytes(self.spec.run_dir)
        if (code or rank_failed) and free is not None and free < FULL_DISK_BYTES:
            # Ranks that cannot write their output fail for no fault of their code: say so first.
            self.failure = f"the disk under {self.spec.run_dir} is full ({free // 1024} KiB free)"
            self.failed_at = 0.0
        elif code and not self.stopping and not rank_failed:
            pid = self.proc.pid
            self.failed_at = self._alive_at or self._ended_at
            self.failure = (
                f"the torchrun process (pid {pid}) was killed by {signal_name(code)}, and its ranks with it"
                if code < 0
                else f"the torchrun process (pid {pid}) ended with exit code {code} before any rank failed"
            )

    def stop(self) -> None:
        with self._lock:
            if self.proc is not None and not self.stopping:
                # A torchrun already dead when the stop came (killed from outside) still counts as a failure.
                self.stopping = self.proc.poll() is None
            if self.proc is not None:
                terminate_then_kill(self.proc, self.spec.run_id, STOP_GRACE_S)

    def end(self) -> None:
        """After the last poll: no process of this node's run is left."""
        kill_run(self.spec.run_id)

    def values(self) -> dict[int, object]:
        return {r: read_json(self.spec.run_dir / f"rank{r}.value.json") for r in self._logs}

    def errors(self) -> dict[int, str | None]:
        out: dict[int, str | None] = {}
        for rank in self._logs:
            status = checked_status(read_json(self.spec.run_dir / f"rank{rank}.status.json")) or {}
            error = status.get("error")
            if error is None and self.state.ranks[rank].state is RankState.FAILED:
                error = "\n".join(self.state.lines(rank)[-30:]) or None
            out[rank] = error
        return out


class LocalRunner(Runner):
    """``tl.launch(code, nproc=N)``: one torchrun on this machine, every socket on loopback."""

    def __init__(self, job: Job, environ: Mapping[str, str]) -> None:
        super().__init__(job, RunState(job.nproc))
        self.environ = environ
        self.torchrun: Torchrun | None = None

    def start(self) -> None:
        tpu_env = tpu_launch_env(self.job.nproc, self.environ)
        check_rank_memory(self.job.nproc, bool(tpu_env))
        run_dir = new_run_dir(self.job.run_id)
        try:
            script = self.job.path
            if script is None:
                script = run_dir / "worker.py"
                script.write_bytes(self.job.source)
            spec = LaunchSpec(
                script, self.job.nproc, run_dir, self.job.run_id, args=self.job.args, env=self.job.env, tpu_env=tpu_env
            )
            argv, env = build_command(spec, self.environ)
            self.torchrun = Torchrun(spec, argv, env, self.state)
            self.track()
            self.torchrun.start()
        except BaseException as e:
            if self.torchrun is None or self.torchrun.proc is None:
                remove_run_dir(run_dir)  # nothing started: leave nothing
            if isinstance(e, OSError):
                raise LaunchError(
                    f"Could not start the launch: {e}.", fix="Check the temp directory and this Python."
                ) from e
            raise

    def stream(self, on_output: OutputCallback, seconds: float) -> bool:
        if self.torchrun is None:
            return True
        done = self.torchrun.poll(on_output, seconds)
        if done:
            self.torchrun.end()
        return done

    def stop(self, reason: str) -> None:
        self.state.stop_reason = self.state.stop_reason or reason
        if self.torchrun is not None:
            self.torchrun.stop()

    def result(self) -> LaunchResult:
        t = self.torchrun
        assert t is not None
        self.state.end()
        ranks = rank_results(self.state, t.values(), t.errors())
        launcher = "\n".join(self.state.lines(None))
        files = t.compile_files
        return LaunchResult(
            tuple(t.argv),
            t.spec.run_dir,
            self.state.elapsed,
            ranks,
            launcher,
            self.state.stop_reason,
            failure=t.failure,
            compiles=None if files is None else RunCompiles.from_files(files.files, self.job.nproc),
        )
