"""Exponential backoff with full jitter: ceilings, bounds, spread, Retry-After floor."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from sqs_jobs.limits import SQS_MAX_VISIBILITY_S
from sqs_jobs.worker.backoff import backoff_ceiling_s, backoff_delay_s


def test_ceilings_double_from_base_until_the_cap() -> None:
    assert [backoff_ceiling_s(n, 5, 60) for n in range(1, 7)] == [5, 10, 20, 40, 60, 60]


def test_ceiling_never_passes_sqs_visibility_limit() -> None:
    assert backoff_ceiling_s(50, 10, 10**9) == SQS_MAX_VISIBILITY_S
    assert backoff_ceiling_s(5000, 1, 10**9) == SQS_MAX_VISIBILITY_S  # no float overflow


def test_attempt_zero_or_negative_uses_the_base() -> None:
    assert backoff_ceiling_s(0, 3, 100) == 3
    assert backoff_ceiling_s(-4, 3, 100) == 3


@pytest.mark.parametrize("attempt", [1, 2, 3, 6, 12])
def test_delays_stay_within_zero_and_the_ceiling(attempt: int) -> None:
    rng = random.Random(attempt)
    ceiling = backoff_ceiling_s(attempt, 2, 300)
    delays = [backoff_delay_s(attempt, 2, 300, rng) for _ in range(500)]
    assert all(isinstance(d, int) and 0 <= d <= ceiling for d in delays)


def test_full_jitter_spreads_delays_over_the_whole_range() -> None:
    rng = random.Random(1)
    delays = [backoff_delay_s(6, 2, 300, rng) for _ in range(2000)]  # ceiling 64
    assert min(delays) <= 3
    assert max(delays) >= 61
    assert 28 <= statistics.mean(delays) <= 36  # uniform: about half the ceiling
    assert len(set(delays)) > 50


def test_mean_delay_grows_with_the_attempt() -> None:
    rng = random.Random(2)
    means = [statistics.mean(backoff_delay_s(n, 4, 10_000, rng) for _ in range(2000)) for n in range(1, 6)]
    assert all(later > 1.6 * earlier for earlier, later in itertools.pairwise(means))


def test_retry_after_is_a_floor() -> None:
    rng = random.Random(3)
    assert all(backoff_delay_s(1, 1, 10, rng, floor_s=30) >= 30 for _ in range(100))
    assert backoff_delay_s(1, 1, 10, rng, floor_s=10**9) == SQS_MAX_VISIBILITY_S
