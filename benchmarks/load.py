"""load_model versus the bare from_pretrained + AutoTokenizer it wraps, side by side in one run.

    python benchmarks/load.py [--rounds 15]

Both load the same tiny checkpoint on CPU in float32, alternating so drift hits both equally; the
figure is the median per load. Target: load_model <= 1.10x bare.
"""

import argparse
import statistics
import time

import tpu_lab as tl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()  # same for both: no terminal drawing in the timing
    path = tl.tiny_model()

    def bare():
        AutoTokenizer.from_pretrained(path)
        AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, device_map="cpu")

    cases = {
        "bare from_pretrained + AutoTokenizer": bare,
        "tl.load_model(device='cpu')": lambda: tl.load_model(path, device="cpu", dtype="float32"),
        "tl.load_model(device=None)  (+probe)": lambda: tl.load_model(path, dtype="float32"),
    }
    times = {name: [] for name in cases}
    for fn in cases.values():  # warm imports and file caches
        fn()
    for _ in range(args.rounds):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["bare from_pretrained + AutoTokenizer"])
    print(f"tiny Qwen3 on CPU, median of {args.rounds} alternating rounds")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<38} {med * 1000:8.1f} ms   {med / base:5.2f}x")


if __name__ == "__main__":
    main()
