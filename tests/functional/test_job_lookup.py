"""`jobctl job show` and `jobctl queue pause|resume` on the worker's real records, in moto."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cli.dlq import DeadLetterQueue
from sqs_jobs.cli.job_lookup import (
    COMPLETED,
    DEAD_LETTERED,
    IN_PROGRESS,
    NOT_FOUND,
    RETRYING,
    JobKeyUnknownError,
    JobLookup,
    find_job,
    idempotency_table,
)
from sqs_jobs.cli.queue_control import NoMappingError, is_paused, mappings, pause, resume
from sqs_jobs.errors import UnknownJobError
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.provenance import Provenance
from tests.functional.conftest import Harness, envelope, narrowed


# Only what these tests use: a fraction of the whole catalog's provisioning, per test.
@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, narrowed(CATALOG, "orders", "order_updates", "invoices"))


def _lookup(
    harness: Harness,
    job: str,
    entity_id: str,
    key: str | None = None,
    now: datetime | None = None,
    queue: str = "orders",
) -> JobLookup:
    local = harness.deployment.queues[queue]
    dead = DeadLetterQueue(
        harness.clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
    )
    return find_job(
        spec=local.spec,
        job=job,
        entity_id=entity_id,
        key=key,
        dynamodb=harness.clients("dynamodb"),
        table=idempotency_table(harness.clients("lambda"), local.arn),
        dead_letter_queue=dead,
        now=now,
    )


def test_a_completed_job_is_found_by_the_record_powertools_wrote(harness: Harness) -> None:
    harness.put_order("1001")
    harness.send(envelope("order_confirmation", "1001"))
    before = datetime.now(UTC)
    harness.deliver()

    found = _lookup(harness, "order_confirmation", "1001")

    assert found.verdict == COMPLETED
    assert found.idempotency_key == "order_confirmation:1001"
    assert found.record is not None and found.record.completed_at is not None
    assert before - timedelta(seconds=2) <= found.record.completed_at <= datetime.now(UTC) + timedelta(seconds=2)
    expiry = harness.deployment.queues["orders"].spec.idempotency_expiry_s
    assert found.record.remembered_until - found.record.completed_at == timedelta(seconds=expiry)
    assert found.to_dict()["verdict"] == "completed"
    assert found.flow is None and found.to_dict()["flow"] is None  # neither unique nor debounced
    # Once the record's expiry has passed it no longer protects against a redelivery.
    later = _lookup(harness, "order_confirmation", "1001", now=found.record.remembered_until + timedelta(seconds=1))
    assert later.verdict == NOT_FOUND and "expired" in later.explanation()


def test_a_publisher_key_is_what_the_record_is_found_by(harness: Harness) -> None:
    harness.put_order("1002")
    harness.send('{"job": "order_confirmation", "id": "1002", "key": "checkout-7"}')
    harness.deliver()
    assert _lookup(harness, "order_confirmation", "1002").verdict == NOT_FOUND
    assert _lookup(harness, "order_confirmation", "1002", key="checkout-7").verdict == COMPLETED


def test_a_dead_lettered_job_is_found_in_the_dlq_with_its_evidence(harness: Harness) -> None:
    harness.send(envelope("order_confirmation", "404"))  # no such order: a permanent failure
    harness.deliver()

    found = _lookup(harness, "order_confirmation", "404")

    assert found.verdict == DEAD_LETTERED
    [letter] = found.dead_letters
    assert letter.error_type == "OrderNotFoundError"
    assert harness.queue_counts(dead_letter=True) == (1, 0)  # looked at, not consumed


def test_a_dead_lettered_job_whose_dead_letter_was_taken_is_still_dead_lettered_by_its_record(
    harness: Harness,
) -> None:
    harness.send(envelope("order_confirmation", "405"))  # no such order: a permanent failure
    harness.deliver()
    harness.dead_letters()  # taken (a consumer of the DLQ, a redrive under way): not visible now

    found = _lookup(harness, "order_confirmation", "405")

    assert found.verdict == DEAD_LETTERED and found.dead_letters == []
    assert "dead-lettered at" in found.explanation() and "not in the DLQ now" in found.explanation()


def test_a_dead_letter_is_the_jobs_only_if_its_key_is_too(harness: Harness) -> None:
    # Two updates of one missing order, each its own key: one dead letter per key.
    for key in ("405-u3", "405-u4"):
        harness.send(f'{{"job": "order_confirmation", "id": "405", "key": "{key}"}}')
    harness.deliver()

    [u3] = _lookup(harness, "order_confirmation", "405", key="405-u3").dead_letters
    [u4] = _lookup(harness, "order_confirmation", "405", key="405-u4").dead_letters
    assert (u3.envelope_key, u4.envelope_key) == ("405-u3", "405-u4")
    assert _lookup(harness, "order_confirmation", "405").dead_letters == []  # the job's own key: not these


def test_a_job_whose_key_needs_more_than_its_id_asks_for_the_key(harness: Harness) -> None:
    # order_update_mail's key function needs the publisher's key: an operator's lookup says so, in one line.
    with pytest.raises(JobKeyUnknownError, match="give the key the publisher chose with --key"):
        _lookup(harness, "order_update_mail", "1001", queue="order_updates")
    found = _lookup(harness, "order_update_mail", "1001", key="1001-u3", queue="order_updates")
    assert found.idempotency_key == "order_update_mail:1001-u3"


def test_an_unknown_job_is_not_found_and_an_unknown_name_is_refused(harness: Harness) -> None:
    assert _lookup(harness, "order_confirmation", "never-sent").verdict == NOT_FOUND
    with pytest.raises(UnknownJobError, match="unknown job type 'no_such_job'"):
        _lookup(harness, "no_such_job", "1")


def test_in_progress_is_read_from_an_in_progress_record(harness: Harness) -> None:
    from sqs_jobs.worker.settings import idempotency_record_id

    local = harness.deployment.queues["orders"]
    now = datetime.now(UTC)
    harness.clients("dynamodb").put_item(
        TableName=harness.deployment.idempotency_table,
        Item={
            "id": {"S": idempotency_record_id("order_confirmation:55")},
            "status": {"S": "INPROGRESS"},
            "expiration": {"N": str(int(now.timestamp()) + local.spec.idempotency_expiry_s)},
            "in_progress_expiration": {"N": str(int((now.timestamp() + 30) * 1000))},
            "runs": {"N": "1"},
            "started_at": {"N": f"{now.timestamp() - 2:.3f}"},
            "run_by": {"S": "2026/12/04/[$LATEST]abc 1f2e-req"},
        },
    )
    found = _lookup(harness, "order_confirmation", "55", now=now)
    assert found.verdict == IN_PROGRESS
    # Since when and by which worker: what a run not listed yet (its first seconds) shows of itself.
    started = datetime.fromtimestamp(round(now.timestamp() - 2, 3), tz=UTC)
    assert f", since {started.isoformat()}, by 2026/12/04/[$LATEST]abc 1f2e-req;" in found.explanation()
    assert found.to_dict()["record"]["run_by"] == "2026/12/04/[$LATEST]abc 1f2e-req"
    assert _lookup(harness, "order_confirmation", "55", now=now + timedelta(seconds=31)).verdict == NOT_FOUND


def test_a_job_whose_run_failed_is_retrying_with_its_runs_and_last_error(harness: Harness) -> None:
    # Given an order whose mail the SES sandbox refuses once (a throttle: transient)
    harness.put_order("77")
    throttled: list[int] = []

    def throttle_once(**_: object) -> None:
        if not throttled:
            throttled.append(1)
            raise ConnectionResetError("SES reset the connection")

    clients = harness.worker_clients("orders")
    clients.register("before-call.ses.SendEmail", throttle_once)
    harness.send(envelope("order_confirmation", "77"))
    invocation = harness.deliver()
    assert invocation is not None and len(invocation.failed_ids) == 1
    # When the operator looks it up before its retry
    found = _lookup(harness, "order_confirmation", "77")
    # Then it is retrying: its run, the error and when
    assert found.verdict == RETRYING
    assert found.record is not None and found.record.runs == 1
    assert found.record.last_error_type == "ConnectionResetError"
    assert "run 1 of 10 failed at" in found.explanation() and "ConnectionResetError" in found.explanation()
    assert found.to_dict()["record"]["runs"] == 1
    # And once it has run again, completed on its second run
    harness.expire_visibility(invocation)
    harness.deliver()
    done = _lookup(harness, "order_confirmation", "77")
    assert done.verdict == COMPLETED and done.record is not None and done.record.completed_run == 2


def test_pause_and_resume_flip_the_queues_event_source_mapping(harness: Harness) -> None:
    lambda_client = harness.clients("lambda")
    arn = harness.deployment.queues["orders"].arn
    [mapping] = mappings(lambda_client, arn)
    assert mapping.function_name == "SqsJobs-orders-worker" and not mapping.paused

    assert [item.paused for item in pause(lambda_client, arn)] == [True]
    assert is_paused(lambda_client, arn)
    assert is_paused(lambda_client, harness.deployment.queues["invoices"].arn) is False  # only that queue
    pause(lambda_client, arn)  # idempotent
    assert [item.paused for item in resume(lambda_client, arn)] == [False]
    assert not is_paused(lambda_client, arn)


def test_a_queue_without_a_mapping_is_a_typed_error(harness: Harness) -> None:
    with pytest.raises(NoMappingError, match="no Lambda event source mapping reads"):
        pause(harness.clients("lambda"), "arn:aws:sqs:us-east-1:123456789012:elsewhere")
