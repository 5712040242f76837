"""How long `import tpu_lab` takes in a fresh interpreter, and that it imports no torch.

    python benchmarks/import_time.py

Prints the best of N fresh-process imports next to the bare interpreter start-up it sits on.
"""

import subprocess
import sys
import time

RUNS = 7


def best(code: str) -> float:
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    bare = best("pass")
    with_lab = best("import tpu_lab")
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import sys, tpu_lab; assert 'torch' not in sys.modules"],
        capture_output=True,
        text=True,
        check=True,
    )
    own = [line for line in probe.stderr.splitlines() if line.rstrip().endswith("| tpu_lab")]
    print(f"python start-up          {bare * 1000:7.1f} ms (best of {RUNS})")
    print(f"python + import tpu_lab  {with_lab * 1000:7.1f} ms")
    print(f"import tpu_lab alone     {(with_lab - bare) * 1000:7.1f} ms  (target < 300 ms)")
    print(f"-X importtime            {own[-1].strip() if own else 'n/a'}")
    print("torch imported: no")


if __name__ == "__main__":
    main()
