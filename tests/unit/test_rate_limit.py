"""The shared rate limit's promise, on moto's DynamoDB and a virtual clock: however many workers lease from one
bucket and whenever they spend their leased tokens, at most per_second x W + burst tokens are spent in any W
seconds; with demand enough, the bucket is kept busy (at least 90 % of the rate); a lease costs one write."""

from __future__ import annotations

import random
from typing import Any

import pytest

from example.standins.invoicing import most_in_any_window
from sqs_jobs.flow_control import KeyConcurrency, RateLimit
from sqs_jobs.worker.errors import RateLimitedError
from sqs_jobs.worker.rate_limit import MAX_KEYS_HELD, RateLimiter, TokenBucketStore
from tests.unit.conftest import FLOW_TABLE


@pytest.mark.parametrize(
    ("per_second", "burst", "tokens", "valid_s", "capacity_s"),
    [
        (10, 20, 10, 1.0, 1.0),  # a second's worth leased, half the burst kept back for it
        (10, 10, 5, 0.5, 0.5),  # the burst caps the lease at half of it
        (10, 1, 1, 0.0, 0.1),  # a burst of one: a token at a time, spent at once
        (0.5, 4, 1, 0.0, 8.0),  # under a token a second: a token at a time
    ],
)
def test_a_lease_is_sized_by_the_rate_and_kept_within_half_the_burst(
    per_second: float, burst: int, tokens: int, valid_s: float, capacity_s: float
) -> None:
    limit = RateLimit(per_second=per_second, burst=burst)
    assert limit.lease_tokens == tokens
    assert limit.lease_valid_s == pytest.approx(valid_s)
    assert limit.store_capacity_s == pytest.approx(capacity_s)


def test_limits_that_cant_be_served_are_refused_with_what_is_accepted() -> None:
    problems = RateLimit(per_second=0, burst=0, per="Bad-Field", max_hold_s=-1).problems("job 'x'")
    assert problems == [
        "job 'x': rate_limit.per_second 0 must be above 0 and at most 10000",
        "job 'x': rate_limit.burst 0 must be between 1 and 100000",
        "job 'x': rate_limit.per 'Bad-Field' must name an envelope field (tenant, id, key, or an extra field's name, "
        "matching ^[a-z][a-z0-9_]{0,39}$)",
        "job 'x': rate_limit.max_hold_s -1 is outside 0..43200",
    ]
    assert KeyConcurrency(limit=0).problems("job 'x'") == ["job 'x': concurrency.limit 0 must be between 1 and 100"]


class _Worker:
    """One execution environment's limiter on the shared store, on the test's virtual clock."""

    def __init__(self, store: TokenBucketStore, clock: list[float], rng: random.Random) -> None:
        self.limiter = RateLimiter(store, clock=lambda: clock[0], sleep=self._no_sleep, rng=rng)
        self.due = 0.0

    @staticmethod
    def _no_sleep(seconds: float) -> None:
        raise AssertionError("the simulation never waits inside acquire")


def _simulate(
    dynamodb: Any, limit: RateLimit, workers: int, seconds: float, gap_s: float, seed: int
) -> tuple[list[float], int]:
    """Workers that each want a token every `gap_s` (jittered) for `seconds`: the times tokens were spent, and the
    store's writes."""
    rng = random.Random(seed)
    clock = [1_000.0]
    store = TokenBucketStore(lambda: dynamodb, FLOW_TABLE)
    pool = [_Worker(store, clock, random.Random(rng.random())) for _ in range(workers)]
    spent: list[float] = []
    end = clock[0] + seconds
    while True:
        worker = min(pool, key=lambda candidate: candidate.due)
        if worker.due > end:
            return spent, store.writes
        clock[0] = max(clock[0], worker.due)
        try:
            worker.limiter.acquire("job:x", "", limit, wait_until=clock[0])
        except RateLimitedError as refused:
            worker.due = clock[0] + refused.retry_after_s
            continue
        spent.append(clock[0])
        worker.due = clock[0] + rng.uniform(0.0, 2 * gap_s)


@pytest.mark.parametrize(
    ("per_second", "burst", "workers", "demand", "seed"),
    [
        (10, 20, 5, 2.0, 1),
        (10, 10, 3, 2.0, 2),
        (10, 1, 4, 2.0, 3),
        (2, 6, 8, 2.0, 4),
        (50, 100, 10, 2.0, 5),
        # Each worker wants a third of the rate, five of them together more than all of it: leases left part
        # unspent, and the next ones ask for less.
        (10, 20, 5, 0.35, 6),
    ],
)
@pytest.mark.slow
def test_any_number_of_workers_stay_within_the_rate_plus_burst_in_every_window_and_keep_it_busy(
    dynamodb: Any, per_second: float, burst: int, workers: int, demand: float, seed: int
) -> None:
    limit = RateLimit(per_second=per_second, burst=burst)
    seconds = 15.0
    # Each worker alone wants `demand` x the whole rate; together always more than it.
    spent, writes = _simulate(dynamodb, limit, workers, seconds, gap_s=1 / (demand * per_second), seed=seed)

    for window_s in (0.5, 1.0, 3.0):
        assert most_in_any_window(spent, window_s) <= per_second * window_s + burst
    # Workers that each want less than a lease's worth leave some of each lease unspent (docs/flow-control.md):
    # the promise kept to the downstream is the bound; the rate is kept up where each worker can spend a lease.
    if demand >= 1:
        assert len(spent) >= 0.9 * per_second * seconds
        # Writes, granted or refused, per token: a lease's worth of tokens per write, give or take the races.
        assert writes / len(spent) <= 2.5 / limit.lease_tokens
    else:
        assert len(spent) >= 0.5 * per_second * seconds


def test_a_token_further_away_than_the_wait_allowed_is_refused_with_when_it_comes(dynamodb: Any) -> None:
    clock = [1_000.0]
    limiter = RateLimiter(TokenBucketStore(lambda: dynamodb, FLOW_TABLE), clock=lambda: clock[0], rng=random.Random(1))
    limit = RateLimit(per_second=0.1, burst=1)
    assert limiter.acquire("job:x", "", limit, wait_until=clock[0]) == 0.0

    with pytest.raises(RateLimitedError) as refused:
        limiter.acquire("job:x", "", limit, wait_until=clock[0] + 5)

    assert 10.0 <= refused.value.retry_after_s <= 10.0 + 0.2 * 10
    assert refused.value.holder == "job:x" and refused.value.max_hold_s == limit.max_hold_s
    # Another key of the same limit has its own bucket.
    assert limiter.acquire("job:x", "tenant-b", limit, wait_until=clock[0]) == 0.0


def test_a_limit_of_the_wrong_type_is_a_catalog_error_naming_it() -> None:
    from sqs_jobs.specs import Catalog, CatalogError, JobSpec, QueueSpec

    def catalog_with(**limits: Any) -> None:
        Catalog(queues=(QueueSpec(name="q", jobs=(JobSpec(name="j", handler="a.b", **limits),)),))

    with pytest.raises(CatalogError, match=r"rate_limit must be a RateLimit\(\.\.\.\), not dict"):
        catalog_with(rate_limit={"per_second": 2})
    with pytest.raises(CatalogError, match="burst and max_hold_s whole numbers, not 2, '2', 900"):
        catalog_with(rate_limit=RateLimit(per_second=2, burst="2"))  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match="concurrency needs limit and max_hold_s whole numbers"):
        catalog_with(concurrency=KeyConcurrency(limit=1.5))  # type: ignore[arg-type]


def test_a_workers_state_stays_bounded_however_many_keys_it_meets() -> None:
    import tracemalloc

    # The store is never called: what grows with the keys is each key's view, which every acquire makes first
    # (100,000 leases through moto would take about ten minutes).
    limiter = RateLimiter(TokenBucketStore(lambda: None, FLOW_TABLE))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(100_000):
            limiter._bucket("job:x", f"tenant-{n:06d}")
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(limiter._buckets) == MAX_KEYS_HELD
    # About 481 bytes a key were kept for good before: 46 MiB for these 100,000 tenants.
    assert grown < 1024 * 1024, grown
    # The most recent keys are the ones kept; one met again is kept over older ones.
    assert ("job:x", "tenant-099999") in limiter._buckets and ("job:x", "tenant-000000") not in limiter._buckets
    oldest = next(iter(limiter._buckets))
    limiter._bucket(*oldest)
    limiter._bucket("job:x", "tenant-100000")
    assert oldest in limiter._buckets and len(limiter._buckets) == MAX_KEYS_HELD


@pytest.mark.parametrize(("per_second", "burst", "demand"), [(10, 20, 3.0), (5, 5, 4.0)])
def test_a_keys_state_evicted_and_met_again_never_lets_its_limit_be_exceeded(
    dynamodb: Any, per_second: float, burst: int, demand: float
) -> None:
    # Three workers that each keep the state of two keys: half their takes are a hot tenant's, wanted at `demand` x
    # its rate, the rest forty others'. Each key's view (its leased tokens, when its next lease fits) is evicted
    # and made again all the time, holding tokens of a lease it had not spent.
    limit = RateLimit(per_second=per_second, burst=burst)
    rng = random.Random(8)
    clock = [1_000.0]
    store = TokenBucketStore(lambda: dynamodb, FLOW_TABLE)
    pool = [
        RateLimiter(store, clock=lambda: clock[0], sleep=_Worker._no_sleep, rng=random.Random(rng.random()), max_keys=2)
        for _ in range(3)
    ]
    due = [clock[0]] * len(pool)
    spent: dict[str, list[float]] = {}
    gap_s = len(pool) * 0.5 / (demand * per_second)
    end = clock[0] + 6.0
    while min(due) <= end:
        worker = min(range(len(pool)), key=lambda n: due[n])
        clock[0] = max(clock[0], due[worker])
        key = "hot" if rng.random() < 0.5 else f"tenant-{rng.randrange(40)}"
        try:
            pool[worker].acquire("job:x", key, limit, wait_until=clock[0])
        except RateLimitedError:
            pass
        else:
            spent.setdefault(key, []).append(clock[0])
        assert len(pool[worker]._buckets) <= 2
        due[worker] = clock[0] + rng.uniform(0.0, 2 * gap_s)

    # Each key within its limit in every window: what an evicted view held was taken from its own bucket (a view
    # handed on to another key with its tokens lets the hot key spend past its limit here).
    for key, moments in spent.items():
        for window_s in (0.5, 1.0, 3.0):
            assert most_in_any_window(moments, window_s) <= per_second * window_s + burst, key
    assert len(spent["hot"]) >= per_second  # it was served, at a cost in writes (a lease per view made again)
