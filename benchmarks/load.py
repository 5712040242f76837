"""load_model versus the bare from_pretrained + AutoTokenizer it wraps, side by side in one run.

    python benchmarks/load.py [--rounds 25]

Both load the same tiny checkpoint on CPU in float32, in shuffled rounds so drift hits both equally;
the figure is the median per load. Target: load_model <= 1.10x bare.
"""

import argparse

from _side_by_side import measure, report

import tpu_lab as tl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=25)
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
    times = measure(cases, args.rounds)
    report(f"tiny Qwen3 on CPU, median of {args.rounds} rounds", times)


if __name__ == "__main__":
    main()
