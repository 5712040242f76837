"""What tl.watch() adds to warm calls of compiled code, against the same calls outside it, and whether
its memory stays flat over a long loop.

    python benchmarks/watch_overhead.py [--rounds 30] [--calls 200]

Side by side in one run, rounds in shuffled order, GC paused while timing (medians):
- "outside": a torch.compile'd MLP step (aot_eager, dynamic=False), called --calls times, warm;
- "inside tl.watch()": the same loop inside an open watch (target <= 1.01x);
- "@watch-decorated": the same loop through a decorated function, which also counts each call per
  input signature (for reference: it pays a signature per call).
Then 300 alternating blocks of 20 calls outside and inside (fastest and 10th-percentile ratio: robust
where other processes load the machine), and 10,000 warm calls inside one watch, with tracemalloc: the
memory the watch holds must not grow.
"""

import argparse
import time
import tracemalloc

import torch
from _side_by_side import measure, report

import tpu_lab as tl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    step = torch.compile(mlp, backend="aot_eager", dynamic=False)
    x = torch.randn(8, 64)
    with torch.no_grad():
        step(x)  # compiled once, before any case: every case below runs warm
        open_watch = tl.watch()
        decorated = tl.watch()(lambda t: step(t))

        def outside():
            for _ in range(args.calls):
                step(x)

        def inside():
            with open_watch:
                for _ in range(args.calls):
                    step(x)

        def through_decorator():
            for _ in range(args.calls):
                decorated(x)

        times = measure(
            {"outside": outside, "inside tl.watch()": inside, "@watch-decorated": through_decorator}, args.rounds
        )
        report(f"{args.calls} warm calls of a compiled MLP (aot_eager); median of {args.rounds} shuffled rounds", times)
        assert open_watch.table.total_compiles == 0

        # On a busy machine medians swing both ways; alternating short blocks and comparing the fastest
        # (and the 10th percentile) of each side shows what the watch itself adds.
        out, inn = [], []
        for _ in range(300):
            start = time.perf_counter()
            for _ in range(20):
                step(x)
            out.append(time.perf_counter() - start)
            with open_watch:
                start = time.perf_counter()
                for _ in range(20):
                    step(x)
                inn.append(time.perf_counter() - start)
        out.sort()
        inn.sort()
        print(
            f"interleaved, 300 rounds of 20 calls: inside/outside {inn[0] / out[0]:.3f}x (fastest), "
            f"{inn[30] / out[30]:.3f}x (10th percentile)"
        )

        long_watch = tl.watch()
        with long_watch:
            for _ in range(1_000):
                step(x)
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            for _ in range(10_000):
                step(x)
            long_watch.poll()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before, "filename") if "tpu_lab" in str(s.traceback))
        print(f"memory held by tpu_lab after 10,000 more calls inside one watch: {grown / 1024:+.1f} KiB (target: ~0)")


if __name__ == "__main__":
    main()
