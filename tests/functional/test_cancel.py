"""Cancel (sqs_jobs.cli.job_cancel): a queued or retrying copy of a cancelled key is acknowledged without running; a
running one stops at its next progress report or call, dead-lettered as JobCancelledError and never retried; a
completed one is not touched; `--undo` lets the next copy run. Every step through the worker's real writes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sqs_jobs.cli.job_cancel import CancelOutcome, CancelResult, CancelTarget, cancel_job, withdraw
from sqs_jobs.cli.job_life import jobs_in_flight
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import CANCELLED_COPY, DEAD_LETTERED, LifeState
from sqs_jobs.worker.settings import idempotency_record_id
from tests.functional.conftest import Harness, attributes_of, envelope, key_record, metric_values
from tests.functional.sample_jobs import stepwise

QUEUE = QueueSpec(name="steps", jobs=(JobSpec(name="stepwise", handler="tests.functional.sample_jobs.stepwise"),))
CATALOG = Catalog(queues=(QUEUE,))
OPERATOR = "arn:aws:sts::123456789012:assumed-role/operator/night-shift"


@pytest.fixture
def harness(clients: ClientFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    # A running job reads its record before each call at most this often (10 s in production).
    monkeypatch.setattr("sqs_jobs.worker.progress.CANCEL_CHECK_INTERVAL_S", 0.0)
    stepwise.reset()
    yield Harness.provisioned(clients, CATALOG)
    stepwise.reset()


def _target(job_id: str) -> CancelTarget:
    return CancelTarget(
        queue="steps", job="stepwise", job_id=job_id, key=f"stepwise:{job_id}", expiry_s=QUEUE.idempotency_expiry_s
    )


def _cancel(harness: Harness, job_id: str) -> CancelResult:
    return cancel_job(harness.clients("dynamodb"), harness.deployment.idempotency_table, _target(job_id), OPERATOR)


def _counted(harness: Harness, metric: str, reason: str = "") -> float:
    """A metric's count, in total or for one reason."""
    documents = [doc for doc in harness.metrics() if metric in doc and doc.get("reason", "") == reason]
    return sum(sum(metric_values(doc, metric)) for doc in documents)


def test_a_queued_job_cancelled_is_acknowledged_without_running(harness: Harness) -> None:
    harness.send(envelope("stepwise", "q-1"), queue="steps")

    result = _cancel(harness, "q-1")
    invocation = harness.deliver("steps")

    assert result.outcome is CancelOutcome.CANCELLED
    assert invocation is not None and invocation.failed_ids == [] and len(invocation.deleted) == 1
    assert stepwise.STEPS == {}  # never ran
    assert harness.queue_counts("steps") == (0, 0) and harness.dead_letters("steps") == []
    assert _counted(harness, CANCELLED_COPY) == 1
    record = key_record(harness, "stepwise:q-1")
    assert (record["status"], record["cancelled_by"]) == ("CANCELLED", OPERATOR)
    [listed] = jobs_in_flight(harness.clients("dynamodb"), harness.deployment.idempotency_table, ["steps"]).jobs
    assert (listed.state, listed.job_id, listed.cancelled_by) == (LifeState.CANCELLED, "q-1", OPERATOR)
    # A second copy (a producer's retry) is acknowledged the same way; cancelling again changes nothing.
    harness.send(envelope("stepwise", "q-1"), queue="steps")
    assert harness.deliver("steps") is not None and stepwise.STEPS == {}
    assert _cancel(harness, "q-1").outcome is CancelOutcome.ALREADY_CANCELLED


def test_a_retrying_job_cancelled_is_not_run_again(harness: Harness) -> None:
    stepwise.FAIL_IDS.add("t-1")
    harness.send(envelope("stepwise", "t-1"), queue="steps")
    first = harness.deliver("steps")
    assert first is not None and first.failed_ids

    assert _cancel(harness, "t-1").outcome is CancelOutcome.CANCELLED
    stepwise.FAIL_IDS.clear()
    harness.expire_visibility(first, queue="steps")
    second = harness.deliver("steps")

    assert second is not None and second.failed_ids == []
    assert stepwise.STEPS == {}
    assert harness.queue_counts("steps") == (0, 0) and harness.dead_letters("steps") == []
    # The cancel keeps what the key's failed run said.
    record = key_record(harness, "stepwise:t-1")
    assert (record["status"], record["runs"], record["last_error_type"]) == ("CANCELLED", 1, "StepFailedError")


@pytest.mark.parametrize("job_id", ["p-1", "call-1"], ids=["at its next progress report", "at its next call"])
def test_a_running_job_cancelled_stops_and_is_dead_lettered_never_retried(harness: Harness, job_id: str) -> None:
    results: list[CancelResult] = []
    stepwise.BETWEEN.append(lambda seen_id, step: results.append(_cancel(harness, seen_id)) if step == 1 else None)
    harness.send(envelope("stepwise", job_id), queue="steps")

    invocation = harness.deliver("steps")

    assert [result.outcome for result in results] == [CancelOutcome.REQUESTED]
    assert stepwise.STEPS[job_id] == [1]  # stopped before step 2
    assert invocation is not None and invocation.failed_ids == []
    [letter] = harness.dead_letters("steps")
    evidence = attributes_of(letter)
    assert (evidence["jobs.error_type"], evidence["jobs.failure"]) == ("JobCancelledError", "cancelled")
    assert _counted(harness, DEAD_LETTERED, reason="cancelled") == 1
    record = key_record(harness, "stepwise:" + job_id)
    assert record["status"] == "CANCELLED"
    # A redrive of its dead letter (or any copy) is acknowledged unrun while the cancel holds.
    harness.send(letter["Body"], queue="steps")
    assert harness.deliver("steps") is not None
    assert stepwise.STEPS[job_id] == [1]


def test_a_completed_job_is_not_cancelled(harness: Harness) -> None:
    harness.send(envelope("stepwise", "c-1"), queue="steps")
    assert harness.deliver("steps") is not None

    result = _cancel(harness, "c-1")

    assert result.outcome is CancelOutcome.COMPLETED and "nothing to cancel" in result.explanation
    assert key_record(harness, "stepwise:c-1")["status"] == "COMPLETED"


def test_undo_lets_the_next_copy_run(harness: Harness) -> None:
    dynamodb, table = harness.clients("dynamodb"), harness.deployment.idempotency_table
    assert _cancel(harness, "u-1").outcome is CancelOutcome.CANCELLED

    assert withdraw(dynamodb, table, _target("u-1")).outcome is CancelOutcome.WITHDRAWN
    harness.send(envelope("stepwise", "u-1"), queue="steps")
    assert harness.deliver("steps") is not None

    assert stepwise.STEPS["u-1"] == [1, 2, 3]
    assert withdraw(dynamodb, table, _target("u-1")).outcome is CancelOutcome.NOT_CANCELLED


def test_a_run_asked_to_stop_that_crashed_is_not_run_again(harness: Harness) -> None:
    # Its record as the crashed run left it: in progress, its hold expired, a cancel requested.
    now = time.time()
    harness.clients("dynamodb").put_item(
        TableName=harness.deployment.idempotency_table,
        Item={
            "id": {"S": idempotency_record_id("stepwise:x-1")},
            "status": {"S": "INPROGRESS"},
            "runs": {"N": "1"},
            "expiration": {"N": str(int(now) + 3600)},
            "in_progress_expiration": {"N": str(int((now - 60) * 1000))},
            "cancel_requested_at": {"N": f"{now - 120:.3f}"},
        },
    )
    harness.send(envelope("stepwise", "x-1"), queue="steps")

    invocation = harness.deliver("steps")

    assert invocation is not None and invocation.failed_ids == [] and len(invocation.deleted) == 1
    assert stepwise.STEPS == {} and harness.dead_letters("steps") == []
    assert _counted(harness, CANCELLED_COPY) == 1


def test_a_key_whose_cancelled_record_expired_runs_again(harness: Harness) -> None:
    now = time.time()
    harness.clients("dynamodb").put_item(
        TableName=harness.deployment.idempotency_table,
        Item={
            "id": {"S": idempotency_record_id("stepwise:e-1")},
            "status": {"S": "COMPLETED"},
            "runs": {"N": "0"},
            "expiration": {"N": str(int(now) - 10)},
            "cancel_requested_at": {"N": f"{now - 4000:.3f}"},
        },
    )
    harness.send(envelope("stepwise", "e-1"), queue="steps")

    assert harness.deliver("steps") is not None

    assert stepwise.STEPS["e-1"] == [1, 2, 3]
    assert "cancel_requested_at" not in key_record(harness, "stepwise:e-1")


def test_a_cancel_of_an_expired_completion_and_its_undo_leave_the_key_to_start_afresh(harness: Harness) -> None:
    # Given a key that completed on its third run, its record since expired (a completion keeps its run's number)
    dynamodb, table = harness.clients("dynamodb"), harness.deployment.idempotency_table
    dynamodb.put_item(
        TableName=table,
        Item={
            "id": {"S": idempotency_record_id("stepwise:a-1")},
            "status": {"S": "COMPLETED"},
            "runs": {"N": "3"},
            "expiration": {"N": str(int(time.time()) - 10)},
        },
    )
    # When an operator cancels the key, then withdraws the cancel
    assert _cancel(harness, "a-1").outcome is CancelOutcome.CANCELLED
    cancelled = key_record(harness, "stepwise:a-1")
    assert cancelled["status"] == "CANCELLED" and "runs" not in cancelled
    assert withdraw(dynamodb, table, _target("a-1")).outcome is CancelOutcome.WITHDRAWN
    # Then the key's next message runs as the first run of a new life, not the fourth of the old
    harness.send(envelope("stepwise", "a-1"), queue="steps")
    assert (invocation := harness.deliver("steps")) is not None and invocation.failed_ids == []
    assert stepwise.STEPS["a-1"] == [1, 2, 3]
    record = key_record(harness, "stepwise:a-1")
    assert (record["status"], record["runs"]) == ("COMPLETED", 1)
