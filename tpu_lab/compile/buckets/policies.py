"""The bucket policies a user can pick (the GenerationPanel's menu): what each gives for the traffic seen."""

from __future__ import annotations

from collections.abc import Sequence

from tpu_lab.compile.buckets.buckets import (
    DEFAULT_FIXED,
    DEFAULT_FIXED_BATCHES,
    power_of_two_buckets,
    recommend_buckets,
)
from tpu_lab.errors import InvalidArgument

# The bucket policies a user can pick (e.g. in the GenerationPanel), with what each means.
POLICIES = {
    "session": "as the session was created",
    "none": "none (every length compiles)",
    "recommended": "fitted to the prompts seen",
    "power-of-two": "powers of two",
    "fixed": "fixed lists",
}
Buckets = tuple[int, ...] | None


def buckets_for_policy(
    policy: str,
    batches: Sequence[tuple[int, int]],
    *,
    created: tuple[Buckets, Buckets] = (None, None),
    max_buckets: int = 4,
    max_batch_buckets: int = 3,
) -> tuple[Buckets, Buckets]:
    """The (length buckets, batch buckets) a policy gives for the batches seen, as (prompts, longest
    prompt) pairs; None: no padding on that axis. Batches are padded only once a call had several
    prompts. ``created``: the session's own buckets, for ``"session"``."""
    if policy not in POLICIES:
        raise InvalidArgument(f"Unknown bucket policy {policy!r}.", fix=f"Use one of: {', '.join(POLICIES)}.")
    if policy in ("recommended", "power-of-two") and not batches:
        raise InvalidArgument(
            f"The {policy!r} policy fits buckets to the prompt lengths seen, and none were seen yet.",
            fix="Run a few prompts first, or pick the 'fixed' policy.",
        )
    batched = any(b > 1 for b, _ in batches)
    if policy == "session":
        return created
    if policy == "recommended" and batched:
        advice = recommend_buckets(batches=batches, max_buckets=max_buckets, max_batch_buckets=max_batch_buckets)
        return advice.length_buckets, advice.batch_buckets
    if policy == "recommended":
        return tuple(recommend_buckets([n for _, n in batches], max_buckets=max_buckets)), None
    if policy == "power-of-two":
        sizes = tuple(power_of_two_buckets([b for b, _ in batches], minimum=1)) if batched else None
        return tuple(power_of_two_buckets([n for _, n in batches])), sizes
    if policy == "fixed":
        return DEFAULT_FIXED, DEFAULT_FIXED_BATCHES if batched else None
    return None, None
