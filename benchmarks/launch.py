"""tl.launch of a trivial 2-rank worker against bare torchrun of the same worker, side by side.

    python benchmarks/launch.py [--rounds 5]

Bare: `python -m torch.distributed.run --nproc-per-node=2 --standalone worker.py`, output to a pipe.
tl.launch adds: checks, a run directory, the worker runner, per-rank status files, streaming and
collection. Shuffled rounds, medians. Target: tl.launch <= 1.10x bare torchrun.
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from _side_by_side import measure, report

import tpu_lab as tl

WORKER = "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    script = Path(tempfile.mkdtemp()) / "worker.py"
    script.write_text(WORKER)

    def bare():
        subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone", str(script)],
            check=True,
            capture_output=True,
        )

    def lab():
        assert tl.launch(script, nproc=2, on_output=lambda rank, line: None).ok

    cases = {"bare torchrun": bare, "tl.launch": lab}
    times = measure(cases, args.rounds)
    report(f"trivial 2-rank worker, median of {args.rounds} rounds", times, unit="s")


if __name__ == "__main__":
    main()
