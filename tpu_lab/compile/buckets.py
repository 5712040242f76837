"""Shape buckets: pad prompts up to a few fixed lengths so a TPU compiles a few graphs, not one per length.

``recommend_buckets`` finds, exactly, the bucket set with at most ``max_buckets`` lengths that minimises
the total padded tokens for the lengths seen (dynamic programming over the sorted distinct lengths).
``compare_policies`` puts it next to power-of-two and fixed-list buckets, each with its waste and
compile count.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tpu_lab._checks import positive_int, token_counts
from tpu_lab._report import Report, table
from tpu_lab.errors import InvalidArgument

DEFAULT_FIXED = (32, 64, 128, 256, 512, 1024)


def validate_buckets(buckets: Iterable[int]) -> tuple[int, ...]:
    """Buckets must be positive integers in strictly increasing order."""
    out = tuple(buckets)
    if not out or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in out):
        raise InvalidArgument(f"buckets={out!r} must be positive integers.", fix="Pass e.g. buckets=(32, 64, 128).")
    if any(a >= b for a, b in itertools.pairwise(out)):
        raise InvalidArgument(
            f"buckets={out!r} are not strictly increasing.",
            fix=f"Sort them and drop duplicates: buckets={tuple(sorted(set(out)))!r}.",
        )
    return out


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that fits ``length`` tokens."""
    for b in buckets:
        if length <= b:
            return b
    raise InvalidArgument(
        f"A prompt of {length} tokens is longer than the largest bucket ({buckets[-1]}).",
        fix=f"Shorten the prompt, or add a bucket of at least {length} (tl.recommend_buckets picks a set).",
    )


def recommend_buckets(lengths: Iterable[int], *, max_buckets: int) -> list[int]:
    """The at most ``max_buckets`` bucket lengths that minimise total padded tokens for ``lengths``. Exact."""
    positive_int(max_buckets, "max_buckets", example=4)
    counts = Counter(token_counts(lengths))
    values = sorted(counts)
    m, k = len(values), min(max_buckets, len(counts))
    if k == m:
        return values
    # prefix sums make the cost of serving values[i..j] with one bucket at values[j] O(1)
    n_pre, s_pre = [0], [0]
    for v in values:
        n_pre.append(n_pre[-1] + counts[v])
        s_pre.append(s_pre[-1] + counts[v] * v)

    def cost(i: int, j: int) -> int:
        return (n_pre[j + 1] - n_pre[i]) * values[j] - (s_pre[j + 1] - s_pre[i])

    inf = float("inf")
    # best[b][j]: least padding for values[0..j] with b buckets, the last one at values[j]
    best = [[inf] * m for _ in range(k + 1)]
    choice = [[0] * m for _ in range(k + 1)]
    for j in range(m):
        best[1][j] = cost(0, j)
    for b in range(2, k + 1):
        for j in range(b - 1, m):
            for i in range(b - 1, j + 1):  # values[i..j] share the bucket at values[j]
                c = best[b - 1][i - 1] + cost(i, j)
                if c < best[b][j]:
                    best[b][j], choice[b][j] = c, i
    out, j = [], m - 1
    for b in range(k, 0, -1):
        out.append(values[j])
        j = choice[b][j] - 1 if b > 1 else -1
    return sorted(out)


def power_of_two_buckets(lengths: Iterable[int], *, minimum: int = 16) -> list[int]:
    """The powers of two (at least ``minimum``) that the lengths round up to."""
    return sorted({max(minimum, 1 << (n - 1).bit_length()) for n in token_counts(lengths)})


@dataclass(frozen=True)
class BucketPlan:
    """One bucket policy applied to a set of prompt lengths."""

    policy: str
    """``"optimal"``, ``"power-of-two"``, ``"fixed"`` or ``"none"`` (every length its own shape)."""
    buckets: tuple[int, ...]
    """The bucket lengths the prompts actually use."""
    real_tokens: int
    padded_tokens: int
    """Tokens after padding every prompt to its bucket."""
    prefill_graphs: int
    """Distinct prefill shapes, i.e. prefill compilations (decode adds one more with a fixed cache)."""

    @property
    def waste(self) -> float:
        """Fraction of the padded tokens that are padding."""
        return 1 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0


def plan(policy: str, lengths: Sequence[int], buckets: Sequence[int] | None) -> BucketPlan:
    """Apply ``buckets`` (None: no buckets) to ``lengths``."""
    used = [bucket_for(n, buckets) for n in lengths] if buckets else list(lengths)
    return BucketPlan(policy, tuple(sorted(set(used))), sum(lengths), sum(used), len(set(used)))


@dataclass(frozen=True)
class PolicyComparison(Report):
    """Bucket policies side by side for one workload; renders as a table."""

    plans: tuple[BucketPlan, ...]

    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        return [
            (
                p.policy,
                ", ".join(map(str, p.buckets)) if p.policy != "none" else "-",
                str(p.prefill_graphs + 1),
                f"{p.padded_tokens:,}",
                f"{p.waste:.0%}",
            )
            for p in self.plans
        ]

    def to_text(self) -> str:
        head = f"{'policy':<13} {'compiles':>8} {'padded':>9} {'waste':>6}  buckets"
        lines = [head] + [f"{r[0]:<13} {r[2]:>8} {r[3]:>9} {r[4]:>6}  {r[1]}" for r in self._rows()]
        return "\n".join(lines)

    def to_html(self) -> str:
        return table(self._rows(), ["policy", "buckets", "compiles (prefill + 1 decode)", "padded tokens", "waste"])


def compare_policies(
    lengths: Iterable[int], *, max_buckets: int = 4, fixed: Sequence[int] = DEFAULT_FIXED
) -> PolicyComparison:
    """No buckets, the optimal set, powers of two and a fixed list, each with its waste and compile count."""
    lengths = token_counts(lengths)
    fixed = validate_buckets(fixed)
    if max(lengths) > fixed[-1]:
        fixed = (*fixed, max(lengths))
    return PolicyComparison(
        (
            plan("none", lengths, None),
            plan("optimal", lengths, recommend_buckets(lengths, max_buckets=max_buckets)),
            plan("power-of-two", lengths, power_of_two_buckets(lengths)),
            plan("fixed", lengths, fixed),
        )
    )


# The bucket policies a user can pick (e.g. in the GenerationPanel), with what each means.
POLICIES = {
    "session": "as the session was created",
    "none": "none (every length compiles)",
    "recommended": "fitted to the prompts seen",
    "power-of-two": "powers of two",
    "fixed": "fixed list",
}


def buckets_for_policy(
    policy: str, lengths: Sequence[int], *, created: Sequence[int] | None = None, max_buckets: int = 4
) -> tuple[int, ...] | None:
    """The buckets a policy gives for the prompt lengths seen (None: no buckets). ``created``: the
    session's own buckets, for ``"session"``."""
    if policy not in POLICIES:
        raise InvalidArgument(f"Unknown bucket policy {policy!r}.", fix=f"Use one of: {', '.join(POLICIES)}.")
    if policy in ("recommended", "power-of-two") and not lengths:
        raise InvalidArgument(
            f"The {policy!r} policy fits buckets to the prompt lengths seen, and none were seen yet.",
            fix="Run a few prompts first, or pick the 'fixed' policy.",
        )
    if policy == "session":
        return tuple(created) if created else None
    if policy == "recommended":
        return tuple(recommend_buckets(lengths, max_buckets=max_buckets))
    if policy == "power-of-two":
        return tuple(power_of_two_buckets(lengths))
    if policy == "fixed":
        return DEFAULT_FIXED
    return None
