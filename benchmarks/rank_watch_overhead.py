"""A launch with every rank inside the compile watcher (``watch=True``, the default) against the same
launch with it off, side by side in shuffled rounds, for two 2-rank workers:

* trivial: prints a line, never imports torch (the watcher only hooks ``torch._dynamo``'s import);
* compiled step: imports torch, compiles a small step with ``aot_eager`` for 3 input shapes and calls it
  200 times (the watcher writes the rank's table at each compile start and end; nothing per call).

    python benchmarks/rank_watch_overhead.py [--rounds 5]

Target: watched <= 1.02x unwatched, both workers. Two figures per worker: the launch's wall time (on a
shared, loaded machine its noise is far above 2%), and each rank's own CPU time (``time.process_time()``
at the end of its code, reported with ``tl.report``: everything the rank ran, the watcher's import hook,
its watch and its writer thread included; much less sensitive to other load).
"""

import argparse

from _side_by_side import measure, report

import tpu_lab as tl

CPU = "import time, tpu_lab as tl\ntl.report(time.process_time())\n"
TRIVIAL = "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n" + CPU
COMPILED = (
    """
import torch
def step(x, w):
    return torch.relu(x @ w).sum()
f = torch.compile(step, backend="aot_eager", dynamic=False)
w = torch.randn(32, 32)
for i in range(200):
    f(torch.randn(4 + 4 * (i % 3), 32), w)
"""
    + CPU
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=("trivial", "compiled"), default=None)
    args = parser.parse_args()
    quiet = lambda rank, line: None  # noqa: E731

    cpu: dict[str, list[float]] = {}

    def run(code: str, watch: bool) -> tl.LaunchResult:
        result = tl.launch(code, nproc=2, on_output=quiet, watch=watch, timeout=600)
        assert result.ok and (result.compiles is not None) == watch
        cpu.setdefault(f"watch={watch}", []).extend(result.values)
        return result

    for name, code in (("trivial worker", TRIVIAL), ("compiled-step worker", COMPILED)):
        if args.only and not name.startswith(args.only):
            continue
        cpu.clear()
        cases = {"watch=False": lambda c=code: run(c, False), "watch=True": lambda c=code: run(c, True)}
        times = measure(cases, args.rounds)
        report(f"{name}, 2 ranks, launch wall time, median of {args.rounds} rounds", times, unit="s")
        report(f"{name}, each rank's CPU time (all runs, both ranks)", cpu, unit="ms")
    compiles = run(COMPILED, True).compiles
    assert compiles is not None
    print(f"compiled-step worker: {compiles.total} compiles over 2 ranks, findings: {len(compiles.findings)}")


if __name__ == "__main__":
    main()
