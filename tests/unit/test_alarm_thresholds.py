"""The catalog refuses alarm thresholds that could never fire or would page for a healthy queue: the retrying
alarm against the queue's max_attempts, the heartbeat window against the canary's interval and the metrics' lag."""

from __future__ import annotations

import pytest

from sqs_jobs.limits import MINUTE
from sqs_jobs.specs import AlarmThresholds, Catalog, CatalogError, JobSpec, QueueSpec

JOBS = (JobSpec(name="send_mail", handler="functions.jobs.x"),)


def queue(**changes: object) -> QueueSpec:
    return QueueSpec(name="mail", jobs=JOBS, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("max_attempts", "retry_attempts", "problem"),
    [
        # RetryAttempt goes up to max_attempts - 1: the run after that is dead-lettered, not retried.
        (3, 3, "alarms.retry_attempts 3 can never fire: with max_attempts 3 a job is retried after at most 2"),
        (2, 5, "set alarms.retry_attempts to at most 1"),
        (10, 0, "alarms.retry_attempts 0 must be at least 1"),
    ],
)
def test_a_retrying_alarm_that_can_never_fire_is_refused(max_attempts: int, retry_attempts: int, problem: str) -> None:
    spec = queue(max_attempts=max_attempts, alarms=AlarmThresholds(retry_attempts=retry_attempts))

    with pytest.raises(CatalogError, match=problem):
        Catalog(queues=(spec,))


@pytest.mark.parametrize(("max_attempts", "retry_attempts"), [(10, 3), (10, 9), (2, 1), (1, 3), (1, 50)])
def test_a_retrying_alarm_that_can_fire_or_a_queue_that_never_retries_is_accepted(
    max_attempts: int, retry_attempts: int
) -> None:
    # max_attempts 1: nothing is ever retried; the queue has no retrying alarm, whatever the threshold says.
    spec = queue(max_attempts=max_attempts, alarms=AlarmThresholds(retry_attempts=retry_attempts))

    assert spec.problems() == []


def test_the_default_pages_before_the_default_retry_timeline_dead_letters() -> None:
    spec = queue()
    assert 1 < spec.retry_alarm_attempts == 3 < spec.max_attempts


@pytest.mark.parametrize(("max_attempts", "threshold"), [(10, 3), (4, 3), (3, 2), (2, 1)])
def test_the_default_follows_a_queue_that_allows_fewer_runs_so_it_can_always_fire(
    max_attempts: int, threshold: int
) -> None:
    spec = queue(max_attempts=max_attempts)
    assert spec.problems() == []
    assert spec.retry_alarm_attempts == threshold


@pytest.mark.parametrize(
    ("interval_s", "missing_after_s", "accepted"),
    [
        (5 * MINUTE, 15 * MINUTE, True),
        (5 * MINUTE, 8 * MINUTE, True),
        # A heartbeat a minute late whose metric is 2 minutes late leaves 7 minutes of a healthy queue silent.
        (5 * MINUTE, 7 * MINUTE, False),
        (5 * MINUTE, 5 * MINUTE, False),
        (30, 15 * MINUTE, False),
    ],
)
def test_the_heartbeat_window_leaves_room_for_a_late_heartbeat_and_late_metrics(
    interval_s: int, missing_after_s: int, accepted: bool
) -> None:
    thresholds = AlarmThresholds(heartbeat_interval_s=interval_s, heartbeat_missing_after_s=missing_after_s)
    problems = queue(alarms=thresholds).problems()

    assert (problems == []) is accepted
    if not accepted:
        assert "alarms.heartbeat_missing_after_s" in problems[0] and "- 180" in problems[0]


@pytest.mark.parametrize(("share", "accepted"), [(0.8, True), (1.0, True), (0.01, True), (0.0, False), (1.2, False)])
def test_a_hold_share_the_runtimes_share_can_never_reach_is_refused(share: float, accepted: bool) -> None:
    # HoldShare is at most 1 (a key at its bound): above it the held-near-bound alarm could never fire.
    problems = queue(alarms=AlarmThresholds(hold_share=share)).problems()

    assert (problems == []) is accepted
    if not accepted:
        assert problems == [f"queue 'mail': alarms.hold_share {share} must be in (0, 1]"]
