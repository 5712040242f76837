import itertools
import random

import pytest

import tpu_lab as tl
from tpu_lab.compile.buckets import bucket_for, compare_policies, power_of_two_buckets, validate_buckets
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


@pytest.mark.parametrize("seed", range(25))
def test_recommend_buckets_is_optimal(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 14))]
    k = rng.randint(1, 5)
    buckets = tl.recommend_buckets(lengths, max_buckets=k)
    assert len(buckets) <= k and buckets == sorted(set(buckets)) and buckets[-1] == max(lengths)
    assert padded(lengths, buckets) == brute_force(lengths, k)[0]


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
