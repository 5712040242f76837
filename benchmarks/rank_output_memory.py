"""The kernel's memory while a rank prints a lot: a rank writes 50 MB of output (500,000 lines) at once;
the kernel's peak resident memory is measured before and after, each line still reaching on_output.

    python benchmarks/rank_output_memory.py

Target: the kernel's peak grows by a bounded amount (the runner reads each rank's log a chunk at a time
and keeps a tail of lines), not by the size of the output.
"""

import resource

import tpu_lab as tl

LINES = 500_000
CODE = f"import sys\nline = 'x' * 99 + '\\n'\nfor _ in range({LINES}): sys.stdout.write(line)\nsys.stdout.flush()\n"


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    tl.launch("print(1)", nproc=1, on_output=lambda rank, line: None)  # imports and first-launch costs
    before, seen = peak_mib(), [0]
    tl.launch(CODE, nproc=1, on_output=lambda rank, line: seen.__setitem__(0, seen[0] + (rank == 0)))
    after = peak_mib()
    print(f"rank output: {LINES * 100 / 1e6:.0f} MB in {LINES} lines; lines delivered: {seen[0]}")
    print(f"kernel peak RSS: {before:.0f} -> {after:.0f} MiB (+{after - before:.0f} MiB)")


if __name__ == "__main__":
    main()
