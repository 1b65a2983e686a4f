"""The testing API a team's tests use (`sqs_jobs.testing`), on a catalog of the framework's own test jobs, not the
example's: a job published and delivered through the real worker, a transient failure retried once its message
is visible again, a permanent one dead-lettered with its evidence, a duplicate not run again, and a call that
names no queue of a catalog that has several refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sqs_jobs.maintenance import MAINTENANCE_RESOURCES, maintenance_queue
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.testing import JobHarness, NoQueueNamedError, attributes_of
from tests.functional.sample_jobs import flaky

CATALOG = Catalog(
    resources=MAINTENANCE_RESOURCES,
    queues=(
        QueueSpec(
            name="work",
            description="the harness's own test queue",
            max_attempts=3,
            jobs=(JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky", description="fails on cue"),),
        ),
        maintenance_queue(),
    ),
)


@pytest.fixture
def jobs() -> Iterator[JobHarness]:
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    with JobHarness.running(CATALOG) as harness:
        yield harness


def test_a_published_job_runs_once_and_a_duplicate_is_not_run_again(jobs: JobHarness) -> None:
    jobs.publish("flaky", "a-1")
    jobs.publish("flaky", "a-1")

    invocations = jobs.drain("work")

    assert [record for invocation in invocations for record in invocation.failed_ids] == []
    assert flaky.SIDE_EFFECTS["a-1"] == 1 and jobs.runs_done("flaky") == 1
    assert jobs.key("flaky", "a-1").status == "COMPLETED"
    assert jobs.queue_counts("work") == (0, 0)


def test_a_transient_failure_is_retried_when_its_message_is_visible_again(jobs: JobHarness) -> None:
    flaky.FAILURES["t-1"] = 1
    jobs.publish("flaky", "t-1")

    first = jobs.deliver("work")
    assert first is not None and len(first.failed_ids) == 1
    assert jobs.deliver("work") is None  # back after its backoff: not visible yet
    jobs.expire_visibility(first, "work")
    second = jobs.deliver("work")

    assert second is not None and second.failed_ids == []
    assert flaky.SIDE_EFFECTS["t-1"] == 1 and jobs.key("flaky", "t-1").status == "COMPLETED"


def test_a_permanent_failure_is_dead_lettered_once_with_its_evidence(jobs: JobHarness) -> None:
    jobs.publish("flaky", "reject-1")

    invocation = jobs.deliver("work")

    assert invocation is not None and invocation.failed_ids == []  # handled: on the DLQ, not retried
    [letter] = jobs.dead_letters("work")
    evidence = attributes_of(letter)
    assert evidence["jobs.error_type"] == "RejectedByDownstreamError"
    assert evidence["jobs.failure"] == "permanent" and evidence["jobs.attempts"] == "1"


def test_a_call_that_names_no_queue_of_a_catalog_with_several_is_refused(jobs: JobHarness) -> None:
    with pytest.raises(NoQueueNamedError, match=r"^name the queue: the catalog has 2 \(work, maintenance\)$"):
        jobs.deliver()


def test_a_job_delayed_past_sqss_15_minutes_is_scheduled_and_runs_once_its_schedule_fires(jobs: JobHarness) -> None:
    from datetime import UTC, datetime, timedelta

    published_at = datetime.now(UTC)
    jobs.publisher().publish("flaky", "later-1", delay=timedelta(hours=2))
    # Nothing on the queue: the job waits in a one-time schedule, as EventBridge Scheduler holds it on AWS
    assert jobs.queue_counts("work") == (0, 0)
    assert jobs.fire_schedules(published_at + timedelta(minutes=90)) == []
    # When its time comes, the schedule sends it with the queue's scheduler role, once; then it runs
    [fired] = jobs.fire_schedules(published_at + timedelta(hours=2, minutes=1))
    assert fired.delivered and fired.scheduled_time >= published_at + timedelta(hours=2) - timedelta(seconds=1)
    assert jobs.fire_schedules(published_at + timedelta(hours=3)) == []  # a one-time schedule, deleted once fired
    jobs.drain("work")
    assert flaky.SIDE_EFFECTS["later-1"] == 1


def test_a_recurring_schedule_fires_its_next_run_each_time_it_is_due(jobs: JobHarness) -> None:
    from datetime import UTC, datetime, timedelta

    from sqs_jobs.stack_names import ONE_TIME_PREFIX

    # The catalog's weekly DLQ review (maintenance_queue), fired a week apart
    now = datetime.now(UTC)
    firings = [jobs.fire_schedules(now + timedelta(days=days)) for days in (8, 15, 15)]
    times = [[fired.scheduled_time for fired in fired_now if not fired.schedule.startswith(ONE_TIME_PREFIX)]
             for fired_now in firings]  # fmt: skip
    # Each week its own run, once: the second call goes on from the first, the third finds nothing due
    assert len(times[0]) == 1 and len(times[1]) == 1 and times[2] == []
    assert times[1][0] - times[0][0] == timedelta(days=7)
    assert jobs.queue_counts("maintenance") == (2, 0)
