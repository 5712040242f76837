"""Bucket advice with the least padding, computed exactly: 1-D (prompt lengths) and 2-D (batch, length).

1-D. Sort the distinct lengths ``v[0] < ... < v[m-1]`` with weights ``w`` (how often each occurs, or
what each costs per token). An optimal bucket set ends at ``v[m-1]`` and pads each contiguous run
``v[i..j]`` up to ``v[j]``: ``cost(i, j) = (W[j+1] - W[i]) * v[j] - (S[j+1] - S[i])`` with prefix sums
``W`` (weights) and ``S`` (weight x length). The layered DP ``best_b(j) = min_i best_{b-1}(i-1) +
cost(i, j)`` is therefore ``W[j+1] v[j] - S[j+1] + min_i (best_{b-1}(i-1) + S[i] - W[i] v[j])``: a
minimum over straight lines of slope ``-W[i]`` read at ``x = v[j]``. Lines arrive with falling slopes
and queries with rising ``x``, so a lower envelope in a deque (the convex hull trick) answers each
layer in O(m): O(k m) in all instead of the textbook O(k m^2), in exact integer arithmetic, with the
same optimum (the tests check it against that DP and brute force).

2-D. A batch of ``b`` prompts whose longest has ``n`` tokens costs ``B(b) * L(n)`` padded tokens,
``B``/``L`` rounding up to the batch / length buckets. With the batch buckets fixed, choosing length
buckets is the weighted 1-D problem above (weights ``B(b)``), and vice versa. More buckets never cost
more, so exactly ``min(k, distinct values)`` buckets on each axis, the largest value always among them.
When the bucket sets of one axis are few enough to try every one (``EXACT_WORK`` bounds the work), each
is tried with the exact 1-D answer on the other axis: the global optimum. Otherwise the advice
alternates exact 1-D answers between the axes from several starts until the cost stops falling (each
result is then optimal on either axis with the other held), and reports a certified lower bound
(the better 1-D optimum with the other axis unpadded), so ``padded <= lower_bound * (1 + gap)``.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tpu_lab._checks import positive_int, token_counts
from tpu_lab._report import Report, table
from tpu_lab.errors import InvalidArgument

# Trying every bucket set of one axis costs sets x (1-D work on the other axis + pairs), about a
# microsecond a unit; above this (~1 s), alternate instead.
EXACT_WORK = 1_000_000


def partition(values: Sequence[int], weights: Sequence[int], k: int) -> tuple[int, list[int]]:
    """The at most ``k`` buckets minimising ``sum(w * (bucket(v) - v))`` over sorted distinct ``values``
    with positive integer ``weights``; returns (that padding, the buckets). Exact, O(k m)."""
    m = len(values)
    k = min(k, m)
    if k == m:
        return 0, list(values)
    big_w, big_s = [0], [0]
    for v, w in zip(values, weights, strict=True):
        big_w.append(big_w[-1] + w)
        big_s.append(big_s[-1] + w * v)
    prev = [big_w[j + 1] * values[j] - big_s[j + 1] for j in range(m)]  # one bucket: values[0..j] -> values[j]
    choices: list[list[int]] = [[0] * m]
    for b in range(2, k + 1):
        cur, choice = [0] * m, [0] * m
        hull: deque[tuple[int, int, int]] = deque()  # lines (slope, intercept, i) of the lower envelope
        for j in range(b - 1, m):
            line = (-big_w[j], prev[j - 1] + big_s[j], j)  # the last run starts at values[j]
            while len(hull) >= 2 and _useless(hull[-2], hull[-1], line):
                hull.pop()
            hull.append(line)
            x = values[j]
            while len(hull) >= 2 and hull[1][0] * x + hull[1][1] <= hull[0][0] * x + hull[0][1]:
                hull.popleft()
            slope, intercept, i = hull[0]
            cur[j] = slope * x + intercept + big_w[j + 1] * x - big_s[j + 1]
            choice[j] = i
        prev = cur
        choices.append(choice)
    out, j = [], m - 1
    for b in range(k, 0, -1):
        out.append(values[j])
        j = choices[b - 1][j] - 1
    return prev[m - 1], sorted(out)


def _useless(l1: tuple[int, int, int], l2: tuple[int, int, int], l3: tuple[int, int, int]) -> bool:
    # Slopes fall l1 > l2 > l3: l2 is never the lowest when l1 and l3 cross at or before l1 and l2 do.
    return (l3[1] - l1[1]) * (l1[0] - l2[0]) <= (l2[1] - l1[1]) * (l1[0] - l3[0])


def batches_of(lengths: Iterable[int], max_batch: int) -> list[tuple[int, int]]:
    """Requests in arrival order, served ``max_batch`` at a time: (prompts, longest prompt) per batch."""
    lengths = token_counts(lengths)
    positive_int(max_batch, "max_batch", example=8)
    chunks = [lengths[i : i + max_batch] for i in range(0, len(lengths), max_batch)]
    return [(len(c), max(c)) for c in chunks]


def batch_pairs(batches: Any) -> list[tuple[int, int]]:
    """A non-empty list of (prompts, longest prompt tokens) pairs of positive ints."""
    try:
        out = [tuple(p) for p in batches]
    except TypeError:
        out = []
    if not out or any(
        len(p) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in p) for p in out
    ):
        raise InvalidArgument(
            f"batches must be a non-empty list of (prompts, longest prompt tokens) pairs, got {batches!r}.",
            fix="Pass what the traffic looked like, e.g. batches=[(1, 40), (4, 120), (8, 33)], or "
            "session.observed_batches.",
        )
    return out  # type: ignore[return-value]


def round_up(value: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= value (the buckets must reach it)."""
    return next(b for b in buckets if value <= b)


@dataclass(frozen=True)
class BucketAdvice(Report):
    """Length and batch buckets for (batch size, longest prompt) traffic, with what they cost."""

    length_buckets: tuple[int, ...]
    batch_buckets: tuple[int, ...]
    padded_tokens: int
    """Sum over batches of batch bucket x length bucket: the prefill compute padding leads to."""
    unpadded_tokens: int
    """Sum over batches of prompts x longest prompt: the same with no bucket padding."""
    prefill_graphs: int
    """Distinct (batch bucket, length bucket) pairs the traffic uses: one prefill graph each."""
    decode_graphs: int
    """Distinct batch buckets used: one decode graph each (with a fixed max_cache_len)."""
    exact: bool
    """True: no bucket sets within the limits pad less. False: see ``lower_bound``."""
    lower_bound: int
    """No bucket sets within the limits pad less than this (equals padded_tokens when exact)."""
    method: str

    @property
    def waste(self) -> float:
        """Fraction of the padded compute that is bucket padding."""
        return 1 - self.unpadded_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def gap(self) -> float:
        """At most this fraction above the optimum (0 when exact)."""
        return self.padded_tokens / self.lower_bound - 1 if self.lower_bound else 0.0

    def _rows(self) -> list[tuple[str, str]]:
        return [
            ("length buckets", ", ".join(map(str, self.length_buckets))),
            ("batch buckets", ", ".join(map(str, self.batch_buckets))),
            ("compiles", f"{self.prefill_graphs} prefill + {self.decode_graphs} decode"),
            ("padded tokens", f"{self.padded_tokens:,} (waste {self.waste:.0%})"),
            ("optimum", "exact" if self.exact else f"within {self.gap:.1%} of the optimum"),
            ("method", self.method),
        ]

    def to_text(self) -> str:
        return "\n".join(f"{k:<15} {v}" for k, v in self._rows())

    def to_html(self) -> str:
        return table(self._rows())


def advise(batches: Sequence[tuple[int, int]], *, max_length_buckets: int, max_batch_buckets: int) -> BucketAdvice:
    """Length and batch buckets minimising ``sum(B(b) * L(n))`` over ``batches`` of (prompts, longest
    prompt) pairs, with at most ``max_length_buckets`` and ``max_batch_buckets`` of each."""
    pairs = Counter(batches)
    sizes, lengths = sorted({b for b, _ in pairs}), sorted({n for _, n in pairs})
    kb, kl = min(max_batch_buckets, len(sizes)), min(max_length_buckets, len(lengths))
    # Try every set on the axis with fewer sets; the largest value is always a bucket.
    sets_b, sets_l = math.comb(len(sizes) - 1, kb - 1), math.comb(len(lengths) - 1, kl - 1)
    work_b, work_l = sets_b * (kl * len(lengths) + len(pairs)), sets_l * (kb * len(sizes) + len(pairs))
    enum_batch = work_b <= work_l
    work = min(work_b, work_l)
    if work <= EXACT_WORK:
        outer, outer_k, solve = (sizes, kb, _lengths_for) if enum_batch else (lengths, kl, _sizes_for)
        best: tuple[int, list[int], list[int]] | None = None
        for rest in itertools.combinations(outer[:-1], outer_k - 1):
            fixed = [*rest, outer[-1]]
            cost, other = solve(pairs, fixed, kl if enum_batch else kb)
            if best is None or cost < best[0]:
                best = (cost, fixed, other)
        assert best is not None
        batch_b, length_b = (best[1], best[2]) if enum_batch else (best[2], best[1])
        tried = sets_b if enum_batch else sets_l
        method = f"exact: each of the {tried:,} {'batch' if enum_batch else 'length'} bucket sets tried"
        return _advice(pairs, batch_b, length_b, exact=True, lower_bound=best[0], method=method)
    starts = {tuple(_spread(sizes, kb)), tuple(partition(sizes, _weights(pairs, sizes, 0), kb)[1])}
    results = [_alternate(pairs, list(s), kl, kb) for s in starts]
    cost, batch_b, length_b = min(results)
    bound = max(_lengths_for(pairs, sizes, kl)[0], _sizes_for(pairs, lengths, kb)[0])
    method = "alternating exact 1-D answers per axis from 2 starts (each axis optimal with the other held)"
    return _advice(pairs, batch_b, length_b, exact=cost == bound, lower_bound=bound, method=method)


def _weights(pairs: Counter[tuple[int, int]], axis_values: Sequence[int], axis: int) -> list[int]:
    # weight per value of one axis (0: batch sizes, 1: lengths) with the other axis unpadded
    w: dict[int, int] = defaultdict(int)
    for pair, count in pairs.items():
        w[pair[axis]] += count * pair[1 - axis]
    return [w[v] for v in axis_values]


def _lengths_for(pairs: Counter[tuple[int, int]], batch_b: Sequence[int], k: int) -> tuple[int, list[int]]:
    """Exact length buckets for fixed batch buckets; returns (padded tokens, buckets)."""
    w: dict[int, int] = defaultdict(int)
    for (b, n), count in pairs.items():
        w[n] += count * round_up(b, batch_b)
    values = sorted(w)
    pad, buckets = partition(values, [w[v] for v in values], k)
    return pad + sum(w[v] * v for v in values), buckets


def _sizes_for(pairs: Counter[tuple[int, int]], length_b: Sequence[int], k: int) -> tuple[int, list[int]]:
    """Exact batch buckets for fixed length buckets; returns (padded tokens, buckets)."""
    w: dict[int, int] = defaultdict(int)
    for (b, n), count in pairs.items():
        w[b] += count * round_up(n, length_b)
    values = sorted(w)
    pad, buckets = partition(values, [w[v] for v in values], k)
    return pad + sum(w[v] * v for v in values), buckets


def _alternate(
    pairs: Counter[tuple[int, int]], batch_b: list[int], kl: int, kb: int
) -> tuple[int, list[int], list[int]]:
    cost, length_b = _lengths_for(pairs, batch_b, kl)
    while True:
        new_cost, new_batch = _sizes_for(pairs, length_b, kb)
        new_cost, new_length = _lengths_for(pairs, new_batch, kl)
        if new_cost >= cost:
            return cost, batch_b, length_b
        cost, batch_b, length_b = new_cost, new_batch, new_length


def _spread(values: Sequence[int], k: int) -> list[int]:
    # k values spread evenly over the sorted list, the largest included
    return sorted({values[round((len(values) - 1) * (i + 1) / k)] for i in range(k)})


def _advice(
    pairs: Counter[tuple[int, int]],
    batch_b: Sequence[int],
    length_b: Sequence[int],
    *,
    exact: bool,
    lower_bound: int,
    method: str,
) -> BucketAdvice:
    used = {(round_up(b, batch_b), round_up(n, length_b)) for b, n in pairs}
    return BucketAdvice(
        length_buckets=tuple(sorted({n for _, n in used})),
        batch_buckets=tuple(sorted({b for b, _ in used})),
        padded_tokens=sum(c * round_up(b, batch_b) * round_up(n, length_b) for (b, n), c in pairs.items()),
        unpadded_tokens=sum(c * b * n for (b, n), c in pairs.items()),
        prefill_graphs=len(used),
        decode_graphs=len({b for b, _ in used}),
        exact=exact,
        lower_bound=lower_bound,
        method=method,
    )
