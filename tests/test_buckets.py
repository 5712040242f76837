import itertools
import random

import pytest

import tpu_lab as tl
from tpu_lab.compile.buckets import advice
from tpu_lab.compile.buckets.advice import BucketAdvice, advise, partition
from tpu_lab.compile.buckets.buckets import (
    batch_bucket_for,
    bucket_for,
    compare_policies,
    graphs_for,
    power_of_two_buckets,
    validate_buckets,
    warmup_shapes,
)
from tpu_lab.compile.buckets.policies import buckets_for_policy
from tpu_lab.errors import InvalidArgument


def padded(lengths, buckets):
    return sum(bucket_for(n, buckets) for n in lengths)


def brute_force(lengths, k):
    values = sorted(set(lengths))
    best = None
    for r in range(1, min(k, len(values)) + 1):
        for combo in itertools.combinations(values[:-1], r - 1):
            buckets = [*combo, values[-1]]
            cost = padded(lengths, buckets)
            if best is None or cost < best[0]:
                best = (cost, buckets)
    return best


def reference_dp(values, weights, k):
    """The O(k m^2) dynamic programme recommend_buckets used before (kept as the oracle): least padding."""
    m, k = len(values), min(k, len(values))
    pre_w, pre_s = [0], [0]
    for v, w in zip(values, weights, strict=True):
        pre_w.append(pre_w[-1] + w)
        pre_s.append(pre_s[-1] + w * v)

    def cost(i, j):
        return (pre_w[j + 1] - pre_w[i]) * values[j] - (pre_s[j + 1] - pre_s[i])

    best = [[float("inf")] * m for _ in range(k + 1)]
    for j in range(m):
        best[1][j] = cost(0, j)
    for b in range(2, k + 1):
        for j in range(b - 1, m):
            best[b][j] = min(best[b - 1][i - 1] + cost(i, j) for i in range(b - 1, j + 1))
    return best[k][m - 1]


@pytest.mark.parametrize("seed", range(25))
def test_recommend_buckets_is_optimal(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 14))]
    k = rng.randint(1, 5)
    buckets = tl.recommend_buckets(lengths, max_buckets=k)
    assert len(buckets) <= k and buckets == sorted(set(buckets)) and buckets[-1] == max(lengths)
    assert padded(lengths, buckets) == brute_force(lengths, k)[0]


def test_partition_equals_the_reference_dp_on_random_cases():
    rng = random.Random(7)
    for _ in range(400):
        values = sorted(rng.sample(range(1, 3000), rng.randint(1, 60)))
        weights = [rng.choice([1, 1, 2, 3, 17, 250]) for _ in values]
        k = rng.randint(1, 12)
        pad, buckets = partition(values, weights, k)
        assert pad == reference_dp(values, weights, k)
        assert len(buckets) <= k and buckets[-1] == values[-1] and buckets == sorted(set(buckets))
        assert pad == sum(w * (bucket_for(v, buckets) - v) for v, w in zip(values, weights, strict=True))


def test_partition_on_large_inputs_matches_the_reference_dp():
    # collinear and tied costs stress the hull's tie handling; ints stay exact at any size
    rng = random.Random(3)
    for values, weights in (
        (list(range(1, 401)), [1] * 400),
        (sorted(rng.sample(range(1, 10**9), 300)), [rng.randint(1, 10**6) for _ in range(300)]),
    ):
        assert partition(values, weights, 9)[0] == reference_dp(values, weights, 9)


def test_recommend_buckets_known_case():
    # 40 prompts of 20 lengths 4..200, as in the benchmark
    lengths = [4, 9, 14, 20, 26, 33, 41, 50, 60, 71, 83, 96, 110, 125, 141, 150, 160, 175, 188, 200] * 2
    buckets = tl.recommend_buckets(lengths, max_buckets=4)
    assert len(buckets) == 4 and buckets[-1] == 200
    assert padded(lengths, buckets) == brute_force(lengths, 4)[0]


def test_fewer_lengths_than_buckets():
    assert tl.recommend_buckets([7, 3, 7], max_buckets=4) == [3, 7]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_max_buckets(bad):
    with pytest.raises(InvalidArgument, match="max_buckets"):
        tl.recommend_buckets([3, 4], max_buckets=bad)


def test_bad_lengths():
    with pytest.raises(InvalidArgument, match="positive token counts"):
        tl.recommend_buckets([], max_buckets=2)
    with pytest.raises(InvalidArgument):
        tl.recommend_buckets([3, 0], max_buckets=2)


@pytest.mark.parametrize("bad", [(32, 16), (16, 16, 32), (0, 8), ()])
def test_buckets_must_increase(bad):
    with pytest.raises(InvalidArgument) as e:
        validate_buckets(bad)
    assert "buckets" in e.value.fix


def test_bucket_for():
    assert [bucket_for(n, (16, 32)) for n in (1, 16, 17, 32)] == [16, 16, 32, 32]
    with pytest.raises(InvalidArgument, match="longer than the largest bucket"):
        bucket_for(33, (16, 32))


def test_power_of_two():
    assert power_of_two_buckets([3, 16, 17, 100]) == [16, 32, 128]


def test_compare_policies():
    lengths = [5, 7, 9, 13, 17, 40, 41, 90]
    comparison = compare_policies(lengths, max_buckets=3)
    plans = {p.policy: p for p in comparison.plans}
    assert plans["none"].prefill_graphs == 8 and plans["none"].waste == 0
    assert plans["optimal"].prefill_graphs == 3
    assert plans["optimal"].padded_tokens <= plans["power-of-two"].padded_tokens
    assert plans["fixed"].buckets == (32, 64, 128)
    assert all(p.real_tokens == sum(lengths) for p in comparison.plans)
    text = str(comparison)
    assert "optimal" in text and "waste" in text
    assert "<table" in comparison._repr_mimebundle_()["text/html"]


def brute_force_2d(pairs, kl, kb):
    sizes, lengths = sorted({b for b, _ in pairs}), sorted({n for _, n in pairs})
    best = None
    for rb in range(1, min(kb, len(sizes)) + 1):
        for cb in itertools.combinations(sizes[:-1], rb - 1):
            for rl in range(1, min(kl, len(lengths)) + 1):
                for cl in itertools.combinations(lengths[:-1], rl - 1):
                    batch_b, length_b = [*cb, sizes[-1]], [*cl, lengths[-1]]
                    cost = sum(bucket_for(b, batch_b) * bucket_for(n, length_b) for b, n in pairs)
                    best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_2d_advice_is_exact_against_brute_force(seed):
    rng = random.Random(seed)
    pairs = [(rng.randint(1, 8), rng.randint(1, 80)) for _ in range(rng.randint(1, 16))]
    kl, kb = rng.randint(1, 4), rng.randint(1, 3)
    a = tl.recommend_buckets(batches=pairs, max_buckets=kl, max_batch_buckets=kb)
    assert isinstance(a, BucketAdvice) and a.exact and a.gap == 0
    assert a.padded_tokens == a.lower_bound == brute_force_2d(pairs, kl, kb)
    assert len(a.length_buckets) <= kl and len(a.batch_buckets) <= kb
    assert a.padded_tokens == sum(bucket_for(b, a.batch_buckets) * bucket_for(n, a.length_buckets) for b, n in pairs)
    assert a.unpadded_tokens == sum(b * n for b, n in pairs)
    assert a.prefill_graphs <= len(a.length_buckets) * len(a.batch_buckets)
    assert a.decode_graphs == len(a.batch_buckets)


@pytest.mark.parametrize("seed", range(15))
def test_2d_advice_when_the_search_is_too_big_is_bounded_and_near_exact(seed, monkeypatch):
    rng = random.Random(100 + seed)
    pairs = [(rng.randint(1, 12), rng.randint(1, 200)) for _ in range(rng.randint(8, 30))]
    exact = advise(pairs, max_length_buckets=3, max_batch_buckets=3)
    monkeypatch.setattr(advice, "EXACT_WORK", 0)  # force the alternating search
    approx = advise(pairs, max_length_buckets=3, max_batch_buckets=3)
    assert "alternating" in approx.method
    assert approx.lower_bound <= exact.padded_tokens <= approx.padded_tokens
    assert approx.padded_tokens <= approx.lower_bound * (1 + approx.gap) + 1e-6
    assert approx.exact == (approx.padded_tokens == approx.lower_bound)
    # each axis is optimal with the other held: no single-axis exact answer improves it
    assert advice._lengths_for(pairs_counter(pairs), approx.batch_buckets, 3)[0] == approx.padded_tokens
    assert advice._sizes_for(pairs_counter(pairs), approx.length_buckets, 3)[0] == approx.padded_tokens


def pairs_counter(pairs):
    from collections import Counter

    return Counter(pairs)


def test_2d_advice_from_requests_and_a_maximum_batch():
    lengths = [5, 40, 7, 33, 120, 9, 64, 10, 11]
    a = tl.recommend_buckets(lengths, max_batch=4, max_buckets=2, max_batch_buckets=2)
    # served in arrival order, 4 at a time: (4, 40), (4, 120), (1, 11)
    assert a.unpadded_tokens == 4 * 40 + 4 * 120 + 1 * 11
    assert a.padded_tokens == brute_force_2d([(4, 40), (4, 120), (1, 11)], 2, 2)
    assert "batch buckets" in str(a) and "<table" in a._repr_mimebundle_()["text/html"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batches": [], "max_buckets": 2}, "non-empty list of \\(prompts"),
        ({"batches": [(2, 0)], "max_buckets": 2}, "pairs"),
        ({"batches": [(2, 5, 1)], "max_buckets": 2}, "pairs"),
        ({"batches": [(True, 5)], "max_buckets": 2}, "pairs"),
        ({"lengths": [3], "batches": [(1, 3)], "max_buckets": 2}, "not both"),
        ({"lengths": [3], "max_batch": 0, "max_buckets": 2}, "max_batch=0"),
        ({"batches": [(1, 3)], "max_buckets": 2, "max_batch_buckets": 0}, "max_batch_buckets=0"),
    ],
)
def test_bad_2d_advice_arguments(kwargs, match):
    with pytest.raises(InvalidArgument, match=match) as e:
        tl.recommend_buckets(**kwargs)
    assert e.value.fix


def test_batch_bucket_for_names_the_limit_and_the_fix():
    assert [batch_bucket_for(n, (1, 2, 4)) for n in (1, 2, 3, 4)] == [1, 2, 4, 4]
    with pytest.raises(InvalidArgument, match=r"5 prompts in one call, more than the largest batch bucket \(4\)") as e:
        batch_bucket_for(5, (1, 2, 4))
    assert "at most 4 prompts per call" in e.value.fix and "batch_buckets=(1, 2, 4, 8)" in e.value.fix


def test_graphs_for_and_warmup_shapes():
    assert graphs_for(None, (1, 2)) is None
    assert graphs_for((16, 32, 64), None) == 4
    assert graphs_for((16, 32, 64), (1, 4, 8)) == 3 * 3 + 3
    assert warmup_shapes(None, None, (16, 32), (2, 4), []) == [(2, 16), (2, 32), (4, 16), (4, 32)]
    assert warmup_shapes([5], [3], (16, 32), (2, 4), []) == [(4, 16)]
    # nothing given, no buckets: what the session has seen (every length seen with every size seen)
    assert warmup_shapes(None, None, None, None, [(1, 7), (3, 9)]) == [(1, 7), (1, 9), (3, 7), (3, 9)]
    assert warmup_shapes(None, None, (16,), None, []) == [(1, 16)]
    with pytest.raises(InvalidArgument, match="Nothing to warm up"):
        warmup_shapes(None, None, None, (2,), [])
    with pytest.raises(InvalidArgument, match="more than the largest batch bucket"):
        warmup_shapes([4], [8], (16,), (2, 4), [])


def test_compare_policies_on_both_axes():
    batches = [(1, 40), (3, 120), (8, 33), (5, 64), (2, 17), (8, 100), (1, 9), (6, 77)]
    comparison = compare_policies(batches=batches, max_buckets=3, max_batch_buckets=2)
    plans = {p.policy: p for p in comparison.plans}
    none, optimal, p2, fixed = plans["none"], plans["optimal"], plans["power-of-two"], plans["fixed"]
    assert none.waste == 0 and none.prefill_graphs == 8 and none.decode_graphs == 6
    assert none.padded_tokens == none.real_tokens == sum(b * n for b, n in batches)
    assert optimal.padded_tokens == brute_force_2d(batches, 3, 2)
    assert optimal.padded_tokens <= p2.padded_tokens and optimal.padded_tokens <= fixed.padded_tokens
    assert len(optimal.batch_buckets) <= 2 and optimal.compiles <= 3 * 2 + 2
    assert p2.batch_buckets == (1, 2, 4, 8) and p2.buckets == (16, 32, 64, 128)
    assert fixed.batch_buckets == (8,) and fixed.buckets == (32, 64, 128)
    text = str(comparison)
    assert "length buckets" in text and "batch buckets" in text
    html = comparison._repr_mimebundle_()["text/html"]
    assert "batch buckets" in html and "compiles (prefill + decode)" in html
    requests = compare_policies([5, 40, 7, 33, 120], max_batch=2, max_buckets=2)
    assert {p.policy: p for p in requests.plans}["none"].real_tokens == 2 * 40 + 2 * 33 + 120


def test_policies_give_both_axes_once_a_batch_was_seen():
    singles = [(1, 5), (1, 8)]
    assert buckets_for_policy("recommended", singles) == ((5, 8), None)
    assert buckets_for_policy("power-of-two", singles) == ((16,), None)
    batched = [(1, 5), (3, 8), (4, 30)]
    lengths, sizes = buckets_for_policy("recommended", batched, max_buckets=2, max_batch_buckets=2)
    assert sizes[-1] == 4 and lengths[-1] == 30
    assert buckets_for_policy("power-of-two", batched) == ((16, 32), (1, 4))
    assert buckets_for_policy("fixed", batched)[1] == (8, 16, 32, 64, 128)
    assert buckets_for_policy("session", batched, created=((8,), (2,))) == ((8,), (2,))
    assert buckets_for_policy("none", batched) == (None, None)
    with pytest.raises(InvalidArgument, match="none were seen yet"):
        buckets_for_policy("recommended", [])
