"""What finding every failed guard costs, per compile: the time tl.watch() spends re-checking Dynamo's
guard tree (``dynamo_guards.every_failure``) against the time Dynamo spent compiling, in the same run.

    python benchmarks/guard_recheck.py [--prompts 6]

Two workloads, each inside one watch:
- a plain function of a batch dict, a float and a tensor, called with several inputs changed at once;
- transformers' text-generation pipeline on tiny:qwen3 with its forward compiled (eager backend, a
  DynamicCache: prefill and decode graphs, prompts of different lengths), the largest guard trees here.
The re-check runs once per compile (never per call); target: <= 5% of compile time.
"""

import argparse
import time

import torch

import tpu_lab as tl
from tpu_lab.compile.sources import dynamo_guards, dynamo_source


def timed_recheck(spent: list[float]):
    real = dynamo_guards.every_failure

    def every_failure(frame, first):
        start = time.perf_counter()
        try:
            return real(frame, first)
        finally:
            spent.append(time.perf_counter() - start)

    dynamo_source.every_failure = every_failure  # the name the compile callback calls
    return real


def batch_function() -> tl.Watch:
    def step(batch, scale, bias):
        return (batch["input_ids"].float() * batch["attention_mask"]).sum() * scale + bias

    f = torch.compile(step, backend="eager")
    with tl.watch() as w:
        for n, scale, dtype in ((5, 1.0, torch.float32), (9, 0.5, torch.float64), (13, 0.25, torch.float32)):
            ids = torch.ones(2, n, dtype=torch.long)
            f({"input_ids": ids, "attention_mask": torch.ones(2, n)}, scale, torch.ones(1, dtype=dtype))
    return w


def pipeline(prompts: int) -> tl.Watch:
    from transformers import pipeline as make

    model, tok = tl.load_model("tiny:qwen3")
    pipe = make("text-generation", model=model, tokenizer=tok)
    model.forward = torch.compile(model.forward, backend="eager")
    texts = ["Hello", "Hello world, how are you", "a b c d e f g h i j k", "one two", "x " * 20, "fine"]
    with tl.watch() as w:
        for text in texts[:prompts]:
            pipe(text, max_new_tokens=3, do_sample=False)
    return w


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=6)
    args = parser.parse_args()
    for name, run in (("batch dict, float, tensor", batch_function), ("pipeline on tiny:qwen3", None)):
        torch._dynamo.reset()
        spent: list[float] = []
        real = timed_recheck(spent)
        try:
            w = run() if run else pipeline(args.prompts)
        finally:
            dynamo_source.every_failure = real
        compile_s = sum(r.compile_seconds for r in w.table)
        recompiles = len(spent)
        print(f"{name}: {w.table.total_compiles} compiles ({recompiles} recompiles re-checked)")
        print(f"  Dynamo compiling          {compile_s * 1000:9.1f} ms")
        print(
            f"  guard re-check (all)      {sum(spent) * 1000:9.1f} ms   {sum(spent) / compile_s:6.2%} of compile time"
        )
        print(
            f"  per recompile: median     {sorted(spent)[len(spent) // 2] * 1000:9.2f} ms, max {max(spent) * 1000:.2f} ms"
        )


if __name__ == "__main__":
    main()
