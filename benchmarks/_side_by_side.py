"""Timing cases side by side in one run: rounds in shuffled order, GC paused while a case runs (as
timeit does), medians and ratios against the first case."""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable


def measure(cases: dict[str, Callable[[], object]], rounds: int, *, seed: int = 0) -> dict[str, list[float]]:
    """Run every case once to warm up, then ``rounds`` rounds; each round runs every case once, in a
    shuffled order, so no case always runs first or right after another."""
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    order, rng = list(cases), random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            gc.collect()
            gc.disable()  # a collection landing in one case is noise, not that case's cost
            try:
                start = time.perf_counter()
                cases[name]()
                times[name].append(time.perf_counter() - start)
            finally:
                gc.enable()
    return times


def report(title: str, times: dict[str, list[float]], *, unit: str = "ms") -> None:
    """Print each case's median and its ratio to the first case."""
    scale = {"ms": 1000, "s": 1}[unit]
    base = statistics.median(next(iter(times.values())))
    print(title)
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<38} {med * scale:8.2f} {unit}   {med / base:5.3f}x")
