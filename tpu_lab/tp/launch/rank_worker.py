"""What torchrun runs on each rank: ``python -m tpu_lab.tp.launch.rank_worker SCRIPT [ARGS...]``.

It ties the rank's life to torchrun's (so a killed launcher never leaves a rank behind), runs the user's
script as ``__main__``, and records this rank's exit code and, on failure, its traceback. When the launch
watches its compiles (``WATCH_ENV``, set by ``tp.launch.job.watch_env``), the compile watcher's ``arm``
runs before the script and what it returns after it, however the script ends.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback
from pathlib import Path

from tpu_lab.tp.results.rank_files import LAUNCHED_RANK, RESULT_DIR_ENV, write_atomic

WATCH_ENV = "TPU_LAB_WATCH"  # "1": this rank runs inside the compile watcher
_finish: list = []  # what the rank-side module asked to run at the end


def _die_with_parent() -> None:
    # torchrun starts each rank in its own session, so killing torchrun's process group misses the ranks.
    # PR_SET_PDEATHSIG (Linux) kills this rank when torchrun dies, however torchrun dies.
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        return
    launcher = os.environ.get(
        "TPU_LAB_LAUNCHER_PID"
    )  # tp.launch.torchrun_command.LAUNCHER_PID_ENV; this module stays light
    if os.getppid() == 1 or (launcher and os.getppid() != int(launcher)):
        os._exit(1)  # torchrun died before the line above (re-parented to init or a subreaper): nothing to wait for


def _rank_setup() -> None:
    folder = os.environ.get(RESULT_DIR_ENV)
    if os.environ.get(WATCH_ENV) == "1" and folder:
        from tpu_lab.compile.watching.rank_watch import arm  # light: torch only once the rank's code imports Dynamo

        _finish.append(arm(folder, int(LAUNCHED_RANK)))


def _status(code: int, error: str | None = None) -> None:
    while _finish:
        try:
            _finish.pop()()
        except Exception as e:  # the watcher's trouble must not change how the rank ends
            sys.stderr.write(f"tpu_lab: the compile watcher failed at the end: {type(e).__name__}: {e}\n")
    folder = os.environ.get(RESULT_DIR_ENV)
    if folder:
        import json
        import time

        text = json.dumps({"exit_code": code, "error": error, "time": time.time()})
        write_atomic(Path(folder) / f"rank{LAUNCHED_RANK}.status.json", text)


def _close_process_group() -> None:
    """Destroy the process group the script left open (transformers' tensor parallelism never closes its own):
    at interpreter exit its gloo threads are torn down unjoined and the rank aborts ("terminate called without
    an active exception", SIGABRT) when its peers exit first, failing a run whose every rank succeeded. The
    barrier first: no rank closes its connections while a peer is still in a collective."""
    dist = sys.modules.get("torch.distributed")  # only when the script used it: this runner stays light
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # a peer that died is that peer's failure, reported as such
        sys.stderr.write(f"tpu_lab: closing the process group at the end failed: {type(e).__name__}: {e}\n")


def main() -> None:
    _die_with_parent()
    # torchrun writes this rank's stdout and stderr to two files; one stream keeps their order.
    os.dup2(1, 2)
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    _rank_setup()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code == 0:
            _close_process_group()
        _status(code, None if code == 0 else f"SystemExit: {e.code}")
        raise
    except BaseException as e:
        # Show the user's frames, not this runner's and runpy's.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(e), e, tb or e.__traceback__))
        sys.stderr.write(text)
        sys.stderr.flush()
        _status(1, text)
        sys.exit(1)
    _close_process_group()
    _status(0)


if __name__ == "__main__":
    main()
