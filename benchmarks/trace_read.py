"""tl.read_trace beside tlparse (PyPI) on the same TORCH_TRACE folder: by default 100 MB of real logs over 8
ranks. One real log is made here (a process compiling many shapes, with graph breaks, TORCH_TRACE set), then
copied once per rank up to the size. Each reader runs in its own process, side by side, rounds shuffled:
wall time, the ratio to tlparse, and each process's peak memory over a process that only imported the same.

    python benchmarks/trace_read.py [--mb 100] [--ranks 8] [--rounds 3]

Target (issue 29): within 3x tlparse's time on 2 cores, memory bounded (the logs are streamed: peak memory
does not grow with the folder's size; shown by a second folder of a quarter the size).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

MAKE = textwrap.dedent(
    """
    import torch
    # a training job's mix: many functions, each at up to Dynamo's default recompile limit (8) of shapes,
    # each with a graph break; distinct code objects, as distinct functions in a real job are
    for k in range({functions}):
        exec(f"def step_{{k}}(x, n):\\n    y = (x * n).relu()\\n    print('')\\n    return y.sum() + {{k}}")
        f = torch.compile(globals()[f"step_{{k}}"], backend="eager", dynamic=False)
        for i in range(9):
            f(torch.ones(1 + i, 2), 2)
    """
)
READ = (
    "import resource, sys, tpu_lab as tl; r = tl.read_trace(sys.argv[1]); "
    "print(r.total, sum(len(run.tables) for run in r.runs), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)  # compiles, ranks, and the peak of its worker processes (KiB)
BASE = "import resource, sys, tpu_lab.tp.results.trace_report; print(0, 0, 0)"


def make_folder(where: Path, mb: float, ranks: int) -> Path:
    """``ranks`` copies of one real log, ``mb`` megabytes in all."""
    src = where / "src"
    per_rank = mb * 1e6 / ranks
    functions = max(1, round(per_rank / 1_200_000))  # about 1.2 MB of log per function: 8 graphs, 8 resumes
    env = {**os.environ, "TORCH_TRACE": str(src)}
    code = MAKE.format(functions=functions)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=3600)
    (log,) = src.iterdir()
    folder = where / f"trace_{mb:g}mb"
    folder.mkdir()
    for rank in range(ranks):
        shutil.copy(log, folder / f"dedicated_log_torch_trace_rank_{rank}_bench.log")
    return folder


def run(argv: list[str]) -> tuple[float, int, list[str]]:
    """(seconds, the peak resident KiB of the process or of any worker it started, what it printed)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)  # this process's own peak, not any other case's
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed with exit code {proc.returncode}")
    printed = out.decode().split()
    workers = int(printed[2]) if len(printed) == 3 and printed[2].isdigit() else 0
    return seconds, max(usage.ru_maxrss, workers), printed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tlparse = shutil.which("tlparse") or str(Path(sys.executable).with_name("tlparse"))
    if not Path(tlparse).exists():
        raise SystemExit("tlparse is not installed: pip install tlparse (it is in tpu-lab[dev])")
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        big = make_folder(where, args.mb, args.ranks)
        (where / "q").mkdir()
        small = make_folder(where / "q", args.mb / 4, args.ranks)
        size = sum(f.stat().st_size for f in big.iterdir()) / 1e6
        out = where / "tl_out"
        cases = {
            "tlparse --all-ranks-html": [
                tlparse,
                str(big),
                "--all-ranks-html",
                "-o",
                str(out),
                "--overwrite",
                "--no-browser",
            ],
            "tl.read_trace": [sys.executable, "-c", READ, str(big)],
            f"tl.read_trace ({size / 4:.0f} MB)": [sys.executable, "-c", READ, str(small)],
            "import only (baseline)": [sys.executable, "-c", BASE],
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        peaks: dict[str, int] = {}
        said: dict[str, list[str]] = {}
        order = list(cases)
        for _ in range(args.rounds):
            random.shuffle(order)
            for name in order:
                seconds, peak, printed = run(cases[name])
                times[name].append(seconds)
                peaks[name] = max(peaks.get(name, 0), peak)
                said[name] = printed
    print(f"TORCH_TRACE folder: {size:.0f} MB, {args.ranks} ranks, {os.cpu_count()} cores, {args.rounds} rounds")
    base = statistics.median(times["tlparse --all-ranks-html"])
    floor = statistics.median(times["import only (baseline)"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:32s} {med:7.2f} s  x{med / base:5.2f} of tlparse   peak {peaks[name] / 1024:7.0f} MiB")
    compiles, ranks = said["tl.read_trace"][:2]
    print(f"read_trace found {compiles} compiles over {ranks} ranks")
    reading = statistics.median(times["tl.read_trace"])
    print(
        f"read_trace / tlparse: {reading / base:.2f}x (target <= 3x); without the imports: {(reading - floor) / base:.2f}x"
    )
    grow = (peaks["tl.read_trace"] - peaks[f"tl.read_trace ({size / 4:.0f} MB)"]) / 1024
    print(f"peak memory, 4x the logs: {grow:+.0f} MiB (streamed: it does not grow with the folder)")


if __name__ == "__main__":
    main()
