"""Peak memory of each notebook run, the way a container (Binder, ~2 GB) counts it.

    python benchmarks/notebook_memory.py [notebooks/*.ipynb]

Runs each notebook with nbclient and samples, every 0.1 s, the proportional set size (PSS: shared
library pages split between the processes that map them) summed over this process's children: the
kernel, torchrun and every rank. Prints the peak per notebook.
"""

import sys
import threading
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def tree_pss_mib(root: int) -> float:
    total, stack = 0, _children(root)
    while stack:
        pid = stack.pop()
        stack += _children(pid)
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def run(path: Path) -> tuple[float, float]:
    peak, done = [0.0], threading.Event()

    def sample():
        me = __import__("os").getpid()
        while not done.is_set():
            peak[0] = max(peak[0], tree_pss_mib(me))
            time.sleep(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    done.set()
    thread.join()
    return peak[0], time.perf_counter() - start


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(Path(__file__).parents[1].glob("notebooks/*.ipynb"))
    import torch

    print(f"torch {torch.__version__}; peak PSS of kernel + torchrun + ranks")
    for path in paths:
        peak, seconds = run(path)
        print(f"  {path.name:<28} {peak:7.0f} MiB  {seconds:5.0f} s")


if __name__ == "__main__":
    main()
