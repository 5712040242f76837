"""A launch with every rank inside the compile watcher (``watch=True``, the default) against the same
launch with it off, side by side in shuffled rounds, for two 2-rank workers:

* trivial: prints a line, never imports torch (the watcher only hooks ``torch._dynamo``'s import);
* compiled step: imports torch, compiles a small step with ``aot_eager`` for 3 input shapes and calls it
  200 times (the watcher writes the rank's table at each compile start and end; nothing per call).

    python benchmarks/rank_watch_overhead.py [--rounds 5]

Target: watched <= 1.02x unwatched, both workers. Also prints the compiled worker's rank-0 table size.
"""

import argparse
import statistics

from _side_by_side import measure, report

import tpu_lab as tl

TRIVIAL = "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
COMPILED = """
import torch
def step(x, w):
    return torch.relu(x @ w).sum()
f = torch.compile(step, backend="aot_eager", dynamic=False)
w = torch.randn(32, 32)
for i in range(200):
    f(torch.randn(4 + 4 * (i % 3), 32), w)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    quiet = lambda rank, line: None  # noqa: E731

    def run(code: str, watch: bool) -> tl.LaunchResult:
        result = tl.launch(code, nproc=2, on_output=quiet, watch=watch, timeout=600)
        assert result.ok and (result.compiles is not None) == watch
        return result

    for name, code in (("trivial worker", TRIVIAL), ("compiled-step worker", COMPILED)):
        cases = {"watch=False": lambda c=code: run(c, False), "watch=True": lambda c=code: run(c, True)}
        times = measure(cases, args.rounds)
        report(f"{name}, 2 ranks, median of {args.rounds} rounds", times, unit="s")
        spread = {k: f"{min(v):.2f}-{max(v):.2f} s" for k, v in times.items()}
        print(
            f"  range: {spread}; ratio of medians {statistics.median(times['watch=True']) / statistics.median(times['watch=False']):.3f}"
        )
    compiles = run(COMPILED, True).compiles
    assert compiles is not None
    print(f"compiled-step worker: {compiles.total} compiles over 2 ranks, findings: {len(compiles.findings)}")


if __name__ == "__main__":
    main()
