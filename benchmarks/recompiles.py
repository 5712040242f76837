"""Naive versus bucketed generation in "TPU-like" mode, each in a fresh process, same backend.

    python benchmarks/recompiles.py [--backend aot_eager] [--prompts 40]

TPU-like: every forward compiled (prefill and decode) with dynamic=False, as torch_tpu compiles per
shape, and Dynamo's recompile limit raised to 256 so nothing silently falls back to eager.
(a) naive: static cache, no buckets, no fixed max_cache_len;
(b) tpu_lab: buckets from recommend_buckets(max_buckets=4) and a fixed max_cache_len;
(c) eager: nothing compiled, for reference.
40 prompts of 20 distinct lengths between 4 and 200 tokens, shuffled, 8 new tokens each, tiny Qwen3.
"""

import argparse
import json
import subprocess
import sys
import time

NEW_TOKENS = 8


def run_mode(mode: str, backend: str, prompts: int) -> dict:
    import tpu_lab as tl
    from tpu_lab.models.workload import mixed_lengths, mixed_workload

    lengths = mixed_lengths(prompts=prompts, distinct=20, low=4, high=200)
    loaded = tl.load_model("tiny:qwen3")
    options = {"compile": "all", "recompile_limit": 256}
    if mode == "bucketed":
        buckets = tl.recommend_buckets(lengths, max_buckets=4)
        options.update(buckets=buckets, max_cache_len=buckets[-1] + NEW_TOKENS)
    elif mode == "eager":
        options = {"compile": "none"}
    workload = mixed_workload(loaded.tokenizer, lengths)
    with tl.GenerationSession(
        loaded.model, loaded.tokenizer, backend=backend, max_new_tokens=NEW_TOKENS, **options
    ) as session:
        start = time.perf_counter()
        for ids in workload:
            session.generate(ids, min_new_tokens=NEW_TOKENS)
        seconds = time.perf_counter() - start
        return {
            "mode": mode,
            "compiles": session.total_compiles,
            "seconds": seconds,
            "buckets": session.buckets,
            "limit_hit": session.limit_hit,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.backend, args.prompts)))
        return
    results = {}
    for mode in ("naive", "bucketed", "eager"):
        proc = subprocess.run(
            [sys.executable, __file__, "--mode", mode, "--backend", args.backend, "--prompts", str(args.prompts)],
            capture_output=True,
            text=True,
            check=True,
        )
        results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"{args.prompts} prompts, 20 distinct lengths 4-200, {NEW_TOKENS} new tokens, tiny Qwen3, "
        f"backend {args.backend}, TPU-like mode (every forward compiled, dynamic=False)"
    )
    print(f"{'mode':<10} {'compiles':>8} {'wall s':>8}  notes")
    for mode, r in results.items():
        note = f"buckets {'/'.join(map(str, r['buckets']))}" if r["buckets"] else ""
        note += "  RECOMPILE LIMIT HIT" if r["limit_hit"] else ""
        print(f"{mode:<10} {r['compiles']:>8} {r['seconds']:>8.2f}  {note}")
    print(f"naive / bucketed wall time: {results['naive']['seconds'] / results['bucketed']['seconds']:.2f}x")


if __name__ == "__main__":
    main()
