"""Shape buckets: pad prompts up to a few fixed lengths, and batches up to a few fixed sizes, so a TPU
compiles a few graphs instead of one per (batch size, prompt length).

``recommend_buckets`` gives, exactly, the buckets that pad least for the traffic seen: 1-D over prompt
lengths, or 2-D over (batch size, longest prompt) pairs (``advice`` holds the algorithms and their
guarantees). ``compare_policies`` puts the advice next to no buckets, powers of two and fixed lists, on
both axes, each with its padding waste and compile count.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from tpu_lab._checks import positive_int, token_counts
from tpu_lab._report import Report, table
from tpu_lab.compile.buckets.advice import BucketAdvice, advise, batch_pairs, batches_of, partition
from tpu_lab.errors import InvalidArgument

DEFAULT_FIXED = (32, 64, 128, 256, 512, 1024)
# vLLM's TPU runner pads the number of requests to powers of two from 8; the "fixed" policy does too.
DEFAULT_FIXED_BATCHES = (8, 16, 32, 64, 128)


def validate_buckets(buckets: Iterable[int], name: str = "buckets") -> tuple[int, ...]:
    """Buckets must be positive integers in strictly increasing order."""
    out = tuple(buckets)
    if not out or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in out):
        raise InvalidArgument(f"{name}={out!r} must be positive integers.", fix=f"Pass e.g. {name}=(1, 2, 4, 8).")
    if any(a >= b for a, b in itertools.pairwise(out)):
        raise InvalidArgument(
            f"{name}={out!r} are not strictly increasing.",
            fix=f"Sort them and drop duplicates: {name}={tuple(sorted(set(out)))!r}.",
        )
    return out


# Room for new tokens above the largest bucket when max_cache_len is not given.
NEW_TOKEN_ROOM = 64


def cache_len_for(buckets: Sequence[int] | None, max_cache_len: int | None, current: int | None) -> int | None:
    """The static-cache length for these buckets: ``max_cache_len`` if given, else ``current`` when it
    still fits, else the largest bucket + 64 (None without buckets: transformers sizes it per call)."""
    if max_cache_len is None:
        max_cache_len = current
        if buckets and (max_cache_len is None or max_cache_len <= buckets[-1]):
            max_cache_len = buckets[-1] + NEW_TOKEN_ROOM
    if max_cache_len is not None:
        positive_int(max_cache_len, "max_cache_len", example=256, minimum=2)
    if buckets and max_cache_len is not None and max_cache_len <= buckets[-1]:
        raise InvalidArgument(
            f"max_cache_len={max_cache_len} leaves no room to generate after the largest bucket ({buckets[-1]}).",
            fix=f"Use max_cache_len >= {buckets[-1]} + max_new_tokens.",
        )
    return max_cache_len


def graphs_for(buckets: Sequence[int] | None, batch_buckets: Sequence[int] | None) -> int | None:
    """How many graphs these buckets compile at most (a fixed cache): a prefill graph per (batch bucket,
    length bucket) and a decode graph per batch bucket. None without length buckets (unbounded)."""
    if not buckets:
        return None
    sizes = len(batch_buckets) if batch_buckets else 1
    return len(buckets) * sizes + sizes


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that fits ``length`` tokens."""
    for b in buckets:
        if length <= b:
            return b
    raise InvalidArgument(
        f"A prompt of {length} tokens is longer than the largest bucket ({buckets[-1]}).",
        fix=f"Shorten the prompt, or add a bucket of at least {length} (tl.recommend_buckets picks a set).",
    )


def batch_bucket_for(prompts: int, batch_buckets: Sequence[int]) -> int:
    """The smallest batch bucket that fits ``prompts`` rows."""
    if prompts > batch_buckets[-1]:
        bigger = (*batch_buckets, 1 << (prompts - 1).bit_length())
        raise InvalidArgument(
            f"{prompts} prompts in one call, more than the largest batch bucket ({batch_buckets[-1]}).",
            fix=f"Pass at most {batch_buckets[-1]} prompts per call, or create the session with a larger batch "
            f"bucket, e.g. batch_buckets={bigger!r}.",
        )
    return bucket_for(prompts, batch_buckets)


def warmup_shapes(
    lengths: Iterable[int] | None,
    batches: Iterable[int] | None,
    buckets: Sequence[int] | None,
    batch_buckets: Sequence[int] | None,
    observed: Sequence[tuple[int, int]],
) -> list[tuple[int, int]]:
    """The (rows, length) shapes a warm-up compiles: every length target with every batch target.

    Length targets: ``lengths`` rounded up to ``buckets``; without them every bucket, or without buckets
    every longest prompt ``observed``. Batch targets likewise from ``batches``, ``batch_buckets`` and the
    observed batch sizes (1 before any)."""
    if lengths is None:
        lengths = buckets or sorted({n for _, n in observed})
        if not lengths:
            raise InvalidArgument(
                "Nothing to warm up: the session has no buckets and has seen no prompt yet.",
                fix="Pass the lengths (session.warmup([16, 32])), set buckets, or run a prompt first.",
            )
    if batches is None:
        batches = batch_buckets or sorted({b for b, _ in observed}) or [1]
    targets = sorted({bucket_for(n, buckets) if buckets else n for n in token_counts(lengths)})
    counts = token_counts(batches, "batches")
    rows = sorted({batch_bucket_for(b, batch_buckets) if batch_buckets else b for b in counts})
    return [(b, n) for b in rows for n in targets]


@overload
def recommend_buckets(lengths: Iterable[int], *, max_buckets: int) -> list[int]: ...
@overload
def recommend_buckets(
    lengths: None = None, *, max_buckets: int, batches: Iterable[tuple[int, int]], max_batch_buckets: int = 3
) -> BucketAdvice: ...
@overload
def recommend_buckets(
    lengths: Iterable[int], *, max_buckets: int, max_batch: int, max_batch_buckets: int = 3
) -> BucketAdvice: ...
def recommend_buckets(
    lengths: Iterable[int] | None = None,
    *,
    max_buckets: int,
    batches: Iterable[tuple[int, int]] | None = None,
    max_batch: int | None = None,
    max_batch_buckets: int = 3,
) -> list[int] | BucketAdvice:
    """The buckets that pad least, exactly (``advice`` says how).

    ``recommend_buckets(lengths, max_buckets=4)``: at most 4 length buckets for these prompt lengths.
    ``recommend_buckets(batches=[(prompts, longest), ...], max_buckets=4, max_batch_buckets=3)`` or
    ``recommend_buckets(lengths, max_batch=8, ...)`` (requests served in arrival order, 8 at a time):
    length and batch buckets minimising batch bucket x length bucket summed over batches (a
    ``BucketAdvice``)."""
    positive_int(max_buckets, "max_buckets", example=4)
    if batches is None and max_batch is None:
        counts: dict[int, int] = {}
        for n in token_counts(lengths):
            counts[n] = counts.get(n, 0) + 1
        values = sorted(counts)
        return partition(values, [counts[v] for v in values], max_buckets)[1]
    positive_int(max_batch_buckets, "max_batch_buckets", example=3)
    if (batches is None) == (lengths is None):
        raise InvalidArgument(
            "Pass either batches=[(prompts, longest), ...] or request lengths with max_batch, not both.",
            fix="recommend_buckets(batches=session.observed_batches, max_buckets=4) or "
            "recommend_buckets(lengths, max_batch=8, max_buckets=4).",
        )
    pairs = batch_pairs(batches) if batches is not None else batches_of(lengths or (), max_batch or 0)
    return advise(pairs, max_length_buckets=max_buckets, max_batch_buckets=max_batch_buckets)


def power_of_two_buckets(lengths: Iterable[int], *, minimum: int = 16) -> list[int]:
    """The powers of two (at least ``minimum``) that the lengths (or batch sizes) round up to."""
    return sorted({max(minimum, 1 << (n - 1).bit_length()) for n in token_counts(lengths)})


@dataclass(frozen=True)
class BucketPlan:
    """One bucket policy applied to traffic: (prompts, longest prompt) per batch (1-D: one prompt each)."""

    policy: str
    """``"optimal"``, ``"power-of-two"``, ``"fixed"`` or ``"none"`` (every shape its own graph)."""
    buckets: tuple[int, ...]
    """The length buckets the batches actually use."""
    batch_buckets: tuple[int, ...]
    """The batch sizes the batches actually run with (filler rows included)."""
    real_tokens: int
    """Prompts x longest prompt, summed over batches: the tokens with no bucket padding."""
    padded_tokens: int
    """Batch bucket x length bucket, summed over batches."""
    prefill_graphs: int
    """Distinct (batch, length) prefill shapes, i.e. prefill compilations."""
    decode_graphs: int = 1
    """Distinct batch sizes, i.e. decode compilations (with a fixed max_cache_len)."""

    @property
    def waste(self) -> float:
        """Fraction of the padded tokens that are padding."""
        return 1 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def compiles(self) -> int:
        return self.prefill_graphs + self.decode_graphs


def plan(
    policy: str, batches: Sequence[tuple[int, int]], buckets: Sequence[int] | None, batch_buckets: Sequence[int] | None
) -> BucketPlan:
    """Apply length ``buckets`` and ``batch_buckets`` (None: no padding on that axis) to ``batches``."""
    shapes = [
        (batch_bucket_for(b, batch_buckets) if batch_buckets else b, bucket_for(n, buckets) if buckets else n)
        for b, n in batches
    ]
    return BucketPlan(
        policy,
        tuple(sorted({n for _, n in shapes})),
        tuple(sorted({b for b, _ in shapes})),
        sum(b * n for b, n in batches),
        sum(b * n for b, n in shapes),
        len(set(shapes)),
        len({b for b, _ in shapes}),
    )


@dataclass(frozen=True)
class PolicyComparison(Report):
    """Bucket policies side by side for one workload, on both axes; renders as a table."""

    plans: tuple[BucketPlan, ...]

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (
                p.policy,
                f"{p.prefill_graphs} + {p.decode_graphs}",
                f"{p.padded_tokens:,}",
                f"{p.waste:.0%}",
                ", ".join(map(str, p.buckets)) if p.policy != "none" else "-",
                ", ".join(map(str, p.batch_buckets)) if p.policy != "none" else "-",
            )
            for p in self.plans
        ]

    def to_text(self) -> str:
        head = f"{'policy':<13} {'compiles':>9} {'padded':>9} {'waste':>6}  {'length buckets':<24} batch buckets"
        lines = [head] + [f"{r[0]:<13} {r[1]:>9} {r[2]:>9} {r[3]:>6}  {r[4]:<24} {r[5]}" for r in self._rows()]
        return "\n".join(lines)

    def to_html(self) -> str:
        header = ["policy", "compiles (prefill + decode)", "padded tokens", "waste", "length buckets", "batch buckets"]
        return table(self._rows(), header)


def compare_policies(
    lengths: Iterable[int] | None = None,
    *,
    batches: Iterable[tuple[int, int]] | None = None,
    max_batch: int | None = None,
    max_buckets: int = 4,
    max_batch_buckets: int = 3,
    fixed: Sequence[int] = DEFAULT_FIXED,
    fixed_batches: Sequence[int] = DEFAULT_FIXED_BATCHES,
) -> PolicyComparison:
    """No buckets, the optimal sets, powers of two and fixed lists, each with its waste and compile count.

    Prompt ``lengths`` alone: one prompt per call, batches are not padded. ``batches`` of (prompts, longest
    prompt) pairs, or ``lengths`` with ``max_batch``: both axes (as in ``recommend_buckets``)."""
    fixed = validate_buckets(fixed, "fixed")
    if batches is None and max_batch is None:
        pairs = [(1, n) for n in token_counts(lengths)]
        optimal: tuple[Any, Any] = (recommend_buckets([n for _, n in pairs], max_buckets=max_buckets), None)
        batch_axes: tuple[Any, Any] = (None, None)
    else:
        advice = (
            recommend_buckets(batches=batches, max_buckets=max_buckets, max_batch_buckets=max_batch_buckets)
            if batches is not None and lengths is None
            else recommend_buckets(lengths or (), max_batch=max_batch or 0, max_buckets=max_buckets)
        )
        pairs = batch_pairs(batches) if batches is not None else batches_of(lengths or (), max_batch or 0)
        optimal = (advice.length_buckets, advice.batch_buckets)
        fixed_batches = validate_buckets(fixed_batches, "fixed_batches")
        top = max(b for b, _ in pairs)
        fixed_batches = fixed_batches if top <= fixed_batches[-1] else (*fixed_batches, top)
        batch_axes = (power_of_two_buckets([b for b, _ in pairs], minimum=1), fixed_batches)
    longest = max(n for _, n in pairs)
    fixed = fixed if longest <= fixed[-1] else (*fixed, longest)
    return PolicyComparison(
        (
            plan("none", pairs, None, None),
            plan("optimal", pairs, *optimal),
            plan("power-of-two", pairs, power_of_two_buckets([n for _, n in pairs]), batch_axes[0]),
            plan("fixed", pairs, fixed, batch_axes[1]),
        )
    )
