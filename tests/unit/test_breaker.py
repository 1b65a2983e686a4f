"""The circuit breaker's state machine, on a clock the test moves."""

from __future__ import annotations

import random
import threading

import pytest

from sqs_jobs.specs import CircuitBreakerSpec
from sqs_jobs.worker.breaker import (
    MAX_BREAKERS,
    PROBE_EXPIRY_S,
    Breakers,
    CircuitBreaker,
    Snapshot,
    State,
    hold_delay_s,
)
from sqs_jobs.worker.errors import CircuitOpenError, TransientError

SPEC = CircuitBreakerSpec(failure_threshold=3, open_s=5.0, max_open_s=20.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def breaker(spec: CircuitBreakerSpec = SPEC) -> tuple[CircuitBreaker, Clock, list[Snapshot]]:
    clock = Clock()
    opened: list[Snapshot] = []
    return CircuitBreaker("api.example.com", spec, clock, opened.append), clock, opened


def fail(b: CircuitBreaker, times: int, error: str = "HttpTransientError: 503") -> None:
    for _ in range(times):
        b.admit().failed(error)


def test_it_opens_after_the_threshold_of_consecutive_failures_and_refuses_without_calling() -> None:
    b, _, opened = breaker()
    fail(b, 2)
    assert b.snapshot().state is State.CLOSED

    fail(b, 1)

    assert b.snapshot().state is State.OPEN
    assert [s.downstream for s in opened] == ["api.example.com"]
    with pytest.raises(CircuitOpenError) as refused:
        b.admit()
    assert isinstance(refused.value, TransientError)
    assert refused.value.downstream == "api.example.com"
    assert refused.value.retry_after_s == pytest.approx(5.0)
    assert "503" in str(refused.value)


def test_a_success_between_failures_resets_the_count() -> None:
    b, _, opened = breaker()
    fail(b, 2)
    b.admit().succeeded()
    fail(b, 2)
    assert b.snapshot().state is State.CLOSED
    assert opened == []


def test_after_open_s_one_probe_at_a_time_and_a_success_closes_it() -> None:
    b, clock, _ = breaker()
    fail(b, 3)
    clock.now += 4.9
    with pytest.raises(CircuitOpenError):
        b.admit()
    clock.now += 0.1

    probe = b.admit()

    assert probe.probe
    with pytest.raises(CircuitOpenError) as second:
        b.admit()  # the probe is out
    assert second.value.retry_after_s == 0.0
    probe.succeeded()
    assert b.snapshot().state is State.CLOSED
    assert not b.admit().probe


def test_a_failed_probe_reopens_for_twice_as_long_up_to_the_cap() -> None:
    b, clock, opened = breaker()
    fail(b, 3)
    waits = []
    for _ in range(4):
        clock.now += b.snapshot().open_for_s
        b.admit().failed("timeout")
        waits.append(b.snapshot().open_for_s)
    assert waits == [10.0, 20.0, 20.0, 20.0]
    assert len(opened) == 1  # one outage, one opening: probes failing again are not new openings
    # Closing resets the open period.
    clock.now += 20.0
    b.admit().succeeded()
    fail(b, 3)
    assert b.snapshot().open_for_s == 5.0
    assert len(opened) == 2


def test_calls_admitted_before_it_opened_say_nothing_when_they_end_after() -> None:
    b, clock, _ = breaker()
    late = b.admit()
    fail(b, 3)
    late.succeeded()  # started while closed, answered after it opened
    assert b.snapshot().state is State.OPEN
    clock.now += 5.0
    probe = b.admit()
    late.failed("timeout")
    assert b.snapshot().state is State.HALF_OPEN
    probe.succeeded()
    assert b.snapshot().state is State.CLOSED


def test_an_abandoned_probe_frees_its_slot_and_a_lost_one_expires() -> None:
    b, clock, _ = breaker()
    fail(b, 3)
    clock.now += 5.0
    b.admit().abandoned()
    assert b.admit().probe  # the next call may probe at once
    clock.now += PROBE_EXPIRY_S - 1
    with pytest.raises(CircuitOpenError):
        b.admit()
    clock.now += 1
    assert b.admit().probe


def test_disabled_breakers_admit_everything_without_a_ticket() -> None:
    breakers = Breakers(CircuitBreakerSpec(enabled=False, failure_threshold=1))
    assert breakers.admit("ses") is None
    assert breakers.snapshots() == []


def test_breakers_are_per_downstream() -> None:
    clock = Clock()
    breakers = Breakers(SPEC, clock)
    for _ in range(3):
        ticket = breakers.admit("ses")
        assert ticket is not None
        ticket.failed("Throttling")
    with pytest.raises(CircuitOpenError):
        breakers.admit("ses")
    assert breakers.admit("s3") is not None
    assert {s.downstream: s.state for s in breakers.snapshots()} == {"ses": State.OPEN, "s3": State.CLOSED}


def test_under_threads_exactly_one_probe_is_admitted() -> None:
    b, clock, _ = breaker()
    fail(b, 3)
    clock.now += 5.0
    admitted: list[bool] = []
    barrier = threading.Barrier(16)

    def call() -> None:
        barrier.wait()
        try:
            admitted.append(b.admit().probe)
        except CircuitOpenError:
            admitted.append(False)

    threads = [threading.Thread(target=call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(admitted) == [False] * 15 + [True]


def test_hold_delay_waits_for_the_probe_plus_jitter_over_one_open_period() -> None:
    rng = random.Random(7)
    refusal = CircuitOpenError("open", downstream="ses", retry_after_s=3.2, open_for_s=10.0)
    delays = [hold_delay_s(refusal, rng) for _ in range(2000)]
    assert min(delays) >= 4 and max(delays) <= 14
    assert len(set(delays)) > 5  # spread, not one wave
    assert hold_delay_s(CircuitOpenError("open", "ses", 0.0, 0.0), rng) == 1
    assert hold_delay_s(CircuitOpenError("open", "ses", 5000.0, 10.0), rng) == 900


def test_refused_credentials_trip_it_at_once_and_a_probe_refused_again_waits_twice_as_long() -> None:
    b, clock, opened = breaker()

    assert b.admit().tripped("HttpCredentialsRefusedError: 401") == SPEC.open_s

    assert b.snapshot().state is State.OPEN and len(opened) == 1
    assert opened[0].last_error == "HttpCredentialsRefusedError: 401"
    clock.now += SPEC.open_s
    assert b.admit().tripped("HttpCredentialsRefusedError: 401") == 2 * SPEC.open_s
    assert len(opened) == 2


def test_a_trip_from_a_call_admitted_before_it_opened_changes_nothing() -> None:
    b, _, opened = breaker()
    early = b.admit()
    fail(b, SPEC.failure_threshold)

    early.tripped("HttpCredentialsRefusedError: 403")

    assert len(opened) == 1 and b.snapshot().opened == 1


def _raised(make: object) -> BaseException:
    try:
        make()  # type: ignore[operator]
    except BaseException as error:
        return error
    raise AssertionError("nothing raised")


def test_a_refusal_wrapped_by_a_job_is_still_found_unless_the_job_says_from_none() -> None:
    from sqs_jobs.worker.settlement import _held_back

    refusal = CircuitOpenError("open", downstream="https://api.example.com", retry_after_s=1.0, open_for_s=1.0)

    def wrapped(explicit: bool, suppress: bool) -> None:
        try:
            raise refusal
        except CircuitOpenError as error:
            if suppress:
                raise ValueError("not this entity") from None
            if explicit:
                raise ValueError("wrapped") from error
            raise ValueError("raised while handling")  # noqa: B904 - the implicit context is the point

    assert _held_back(_raised(lambda: wrapped(explicit=True, suppress=False))) is refusal
    assert _held_back(_raised(lambda: wrapped(explicit=False, suppress=False))) is refusal
    assert _held_back(_raised(lambda: wrapped(explicit=False, suppress=True))) is None


def test_a_workers_breakers_stay_bounded_and_the_ones_that_know_something_are_kept() -> None:
    clock = Clock()
    breakers = Breakers(SPEC, clock)
    # A downstream down now (open), one failing (not open yet), then 100,000 hosts a job called once each (a host
    # may be a producer's: a tenant's webhook), all answering
    down, failing = breakers.breaker("https://down.example.com"), breakers.breaker("https://flaky.example.com")
    fail(down, 3)
    fail(failing, 2)
    for n in range(100_000):
        ticket = breakers.admit(f"https://tenant-{n}.example.com")
        assert ticket is not None
        ticket.succeeded()
    snapshots = breakers.snapshots()
    assert len(snapshots) == MAX_BREAKERS
    # Evicted first is what a new breaker would know as much as: the open and the failing ones are kept, as is
    # the most recent host
    assert breakers.breaker("https://down.example.com") is down and down.snapshot().state is State.OPEN
    assert breakers.breaker("https://flaky.example.com") is failing
    assert "https://tenant-99999.example.com" in {snapshot.downstream for snapshot in snapshots}
    with pytest.raises(CircuitOpenError):
        breakers.admit("https://down.example.com")


def test_when_every_breaker_knows_something_the_least_recently_used_goes() -> None:
    clock = Clock()
    breakers = Breakers(SPEC, clock)
    open_ones = [breakers.breaker(f"https://down-{n}.example.com") for n in range(MAX_BREAKERS)]
    for each in open_ones:
        fail(each, 3)
    # A new downstream is kept (it may fail too), and the open breaker used longest ago is forgotten
    fresh = breakers.breaker("https://new.example.com")
    fail(fresh, 3)
    assert breakers.breaker("https://new.example.com") is fresh
    kept = {snapshot.downstream for snapshot in breakers.snapshots()}
    assert "https://down-0.example.com" not in kept and "https://down-1.example.com" in kept
    assert len(kept) == MAX_BREAKERS
