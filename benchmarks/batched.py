"""Batched generation with batch buckets against one prompt at a time, and how fast the bucket advice is.

    python benchmarks/batched.py [--backend aot_eager] [--requests 64] [--rounds 3] [--skip-old-dp]

1. Advice speed, side by side in this process: the exact 1-D advice (convex hull trick, O(k m)) against
   the O(k m^2) dynamic programme it replaced, on 4,000 distinct lengths with 16 buckets and 2,000 with 8
   (the same optimum is asserted); then the 2-D advice on the generation traffic below.
2. Generation in TPU-like mode (every forward compiled with dynamic=False, backend aot_eager, Dynamo's
   recompile limit high enough that nothing runs uncompiled), tiny Qwen3, 8 new tokens per request:
   64 requests of 16 distinct lengths between 4 and 200, arriving in batches of 1 to 8, served
   (a) one by one with the 1-D recommended length buckets, (b) batch by batch with the 2-D recommended
   length and batch buckets, each with its own model copy and session. A first pass each (compiles,
   bound: length buckets x batch buckets + batch buckets), then warm passes side by side in shuffled
   rounds (compiles: 0). Printed: compiles, wall seconds, new tokens per second, whether the greedy
   tokens are identical, and the padding waste of the advice against powers of two on both axes.
"""

import argparse
import random
import statistics
import time

from _side_by_side import measure, report

NEW_TOKENS = 8
MAX_BUCKETS, MAX_BATCH_BUCKETS = 4, 3


def traffic(requests: int) -> tuple[list[int], list[list[int]]]:
    """Request lengths in arrival order, and how they arrive: groups of 1 to 8 consecutive requests."""
    from tpu_lab.models.workload import mixed_lengths

    lengths = mixed_lengths(prompts=requests, distinct=16, low=4, high=200, seed=11)
    rng, groups, i = random.Random(5), [], 0
    while i < len(lengths):
        size = min(rng.randint(1, 8), len(lengths) - i)
        groups.append(list(range(i, i + size)))
        i += size
    return lengths, groups


def reference_dp(lengths: list[int], k: int) -> int:
    """The O(k m^2) dynamic programme recommend_buckets used before: the least padding, nothing else."""
    counts: dict[int, int] = {}
    for n in lengths:
        counts[n] = counts.get(n, 0) + 1
    values = sorted(counts)
    m, k = len(values), min(k, len(values))
    pre_n, pre_s = [0], [0]
    for v in values:
        pre_n.append(pre_n[-1] + counts[v])
        pre_s.append(pre_s[-1] + counts[v] * v)
    best = [[float("inf")] * m for _ in range(k + 1)]
    for j in range(m):
        best[1][j] = pre_n[j + 1] * values[j] - pre_s[j + 1]
    for b in range(2, k + 1):
        for j in range(b - 1, m):
            for i in range(b - 1, j + 1):
                c = best[b - 1][i - 1] + (pre_n[j + 1] - pre_n[i]) * values[j] - (pre_s[j + 1] - pre_s[i])
                if c < best[b][j]:
                    best[b][j] = c
    return int(best[k][m - 1])


def advice_speed(requests: int, skip_old: bool) -> None:
    import tpu_lab as tl
    from tpu_lab.compile.buckets.buckets import bucket_for

    rng = random.Random(0)
    for distinct, k in ((4000, 16), (2000, 8)):
        lengths = rng.sample(range(1, 32_769), distinct) * 2  # every length seen twice
        out: dict[str, object] = {}

        def fast(lengths: list[int] = lengths, k: int = k, out: dict = out) -> None:
            out["fast"] = tl.recommend_buckets(lengths, max_buckets=k)

        def old(lengths: list[int] = lengths, k: int = k, out: dict = out) -> None:
            out["old"] = reference_dp(lengths, k)

        cases = {"exact O(k m), convex hull trick": fast} | ({} if skip_old else {"O(k m^2) DP it replaced": old})
        report(f"1-D advice, {distinct:,} distinct lengths, {k} buckets", measure(cases, 1), unit="ms")
        if not skip_old:
            padding = sum(bucket_for(n, out["fast"]) - n for n in lengths)  # type: ignore[arg-type]
            assert padding == out["old"], (padding, out["old"])
            print(f"  same optimum: {padding:,} padded tokens")
    lengths, groups = traffic(requests)
    pairs = [(len(g), max(lengths[i] for i in g)) for g in groups]
    times = measure(
        {
            "2-D advice": lambda: tl.recommend_buckets(
                batches=pairs, max_buckets=MAX_BUCKETS, max_batch_buckets=MAX_BATCH_BUCKETS
            )
        },
        5,
    )
    report(f"2-D advice on the generation traffic ({len(pairs)} batches)", times, unit="ms")


class Mode:
    """One way to serve the traffic: its own model copy and session, and the calls it makes."""

    def __init__(self, name: str, backend: str, lengths: list[int], groups: list[list[int]]) -> None:
        import tpu_lab as tl
        from tpu_lab.models.workload import mixed_workload

        loaded = tl.load_model("tiny:qwen3")
        self.name, self.prompts = name, mixed_workload(loaded.tokenizer, lengths)
        if name == "one-by-one":
            options = {"buckets": tl.recommend_buckets(lengths, max_buckets=MAX_BUCKETS)}
            self.calls = [[i] for i in range(len(lengths))]
        else:
            pairs = [(len(g), max(lengths[i] for i in g)) for g in groups]
            advice = tl.recommend_buckets(batches=pairs, max_buckets=MAX_BUCKETS, max_batch_buckets=MAX_BATCH_BUCKETS)
            options = {"buckets": advice.length_buckets, "batch_buckets": advice.batch_buckets}
            self.calls = groups
        self.session = tl.GenerationSession(
            loaded.model,
            loaded.tokenizer,
            backend=backend,
            compile="all",
            max_new_tokens=NEW_TOKENS,
            max_cache_len=options["buckets"][-1] + NEW_TOKENS,
            **options,
        )
        self.tokens: list[tuple[int, ...]] = [()] * len(lengths)
        self.new_tokens = 0

    def serve(self) -> None:
        """Every call once; keeps each request's tokens and counts the new ones."""
        self.new_tokens = 0
        for call in self.calls:
            records = self.session.generate([self.prompts[i] for i in call], min_new_tokens=NEW_TOKENS)
            for i, r in zip(call, records, strict=True):
                self.tokens[i] = r.token_ids
                self.new_tokens += r.new_tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--skip-old-dp", action="store_true", help="skip timing the O(k m^2) DP (~20 s)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    advice_speed(args.requests, args.skip_old_dp)
    lengths, groups = traffic(args.requests)
    modes = [Mode(name, args.backend, lengths, groups) for name in ("one-by-one", "batched")]
    print(
        f"\n{args.requests} requests, {len(set(lengths))} distinct lengths 4-200, in {len(groups)} batches of 1-8; "
        f"{NEW_TOKENS} new tokens each, tiny Qwen3, backend {args.backend}, TPU-like mode"
    )
    print(f"first pass (compiles included):\n  {'mode':<11} {'compiles':>8} {'wall s':>7} {'new tok/s':>9}  buckets")
    for m in modes:
        start = time.perf_counter()
        m.serve()
        seconds = time.perf_counter() - start
        s = m.session
        axes = f"length {'/'.join(map(str, s.buckets))} | batch {'/'.join(map(str, s.batch_buckets or [1]))}"
        print(f"  {m.name:<11} {s.total_compiles:>8} {seconds:>7.2f} {m.new_tokens / seconds:>9.1f}  {axes}")
    first = [m.session.total_compiles for m in modes]
    times = measure({m.name: m.serve for m in modes}, args.rounds)
    report(f"warm passes (median of {args.rounds} shuffled rounds), wall s", times, unit="s")
    for m in modes:
        rate = m.new_tokens / statistics.median(times[m.name])
        again = m.session.total_compiles - first[modes.index(m)]
        print(f"  {m.name:<11} {rate:8.1f} new tokens/s, {again} compiles after the first pass")
    b = modes[1].session
    bound = len(b.buckets or ()) * len(b.batch_buckets or ()) + len(b.batch_buckets or ())
    print(f"batched first pass: {first[1]} compiles (bound: length x batch buckets + batch buckets = {bound})")
    print(
        f"limit hit: {any(m.session.limit_hit for m in modes)}; greedy tokens identical: {modes[0].tokens == modes[1].tokens}"
    )
    import tpu_lab as tl

    pairs = [(len(g), max(lengths[i] for i in g)) for g in groups]
    print("\npadding, both axes (prefill compute = batch bucket x length bucket, summed over batches):")
    print(tl.compare_policies(batches=pairs, max_buckets=MAX_BUCKETS, max_batch_buckets=MAX_BATCH_BUCKETS))
    for m in modes:
        m.session.close()


if __name__ == "__main__":
    main()
