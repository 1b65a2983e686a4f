"""What a job returns can never make its side effect repeat (lib/sqs_jobs/worker/results.py): a result that can't be
kept is dropped with a warning and a metric, and the run still counts as completed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import RESULT_DROPPED, RUNTIME_FAULT
from tests.functional.conftest import Harness, envelope, key_record, metric_values
from tests.functional.sample_jobs import odd_result

CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="mail",
            max_attempts=3,
            backoff_base_s=1,
            backoff_cap_s=1,
            jobs=(JobSpec(name="odd_result", handler="tests.functional.sample_jobs.odd_result"),),
        ),
    ),
)


@pytest.fixture
def mail(clients: ClientFactory) -> Iterator[Harness]:
    odd_result.SIDE_EFFECTS.clear()
    yield Harness.provisioned(clients, CATALOG)


def drain(harness: Harness) -> None:
    """Deliver until the queue is empty, waiting out every backoff at once."""
    for _ in range(10):
        invocation = harness.deliver("mail")
        if invocation is None:
            return
        harness.expire_visibility(invocation, "mail")
    raise AssertionError("the queue did not drain")


def metric_total(harness: Harness, name: str, **dimensions: str) -> float:
    return sum(
        sum(metric_values(doc, name))
        for doc in harness.metrics()
        if name in doc and all(doc.get(key) == value for key, value in dimensions.items())
    )


@pytest.mark.parametrize(
    ("entity_id", "kept", "dropped"),
    [
        ("datetime-1", "sent_at", None),  # converted: ISO 8601
        ("string-1", "0100018c-ses-message-id", None),  # a plain string is a result like any other
        ("huge-1", None, "too_large"),
        ("object-1", None, "not_json"),
        ("unreadable-1", None, "not_json"),
    ],
)
def test_a_result_that_cannot_be_stored_as_it_is_never_repeats_the_side_effect(
    mail: Harness, entity_id: str, kept: str | None, dropped: str | None
) -> None:
    # Given a job that sends a mail and returns an odd result, published twice (a producer's retry)
    mail.send(envelope("odd_result", entity_id), queue="mail")
    mail.send(envelope("odd_result", entity_id), queue="mail")
    # When both are delivered, as often as the queue has them
    drain(mail)
    # Then the mail went out once, the key is completed, and nothing was dead-lettered or blamed on the store
    assert odd_result.SIDE_EFFECTS[entity_id] == 1
    record = key_record(mail, f"odd_result:{entity_id}")
    assert record["status"] == "COMPLETED" and record["runs"] == 1
    assert mail.dead_letters("mail") == []
    assert metric_total(mail, RUNTIME_FAULT) == 0
    if kept is None:
        assert record["data"] == "null"
    else:
        assert kept in record["data"]
    if dropped is None:
        assert metric_total(mail, RESULT_DROPPED) == 0
    else:
        assert metric_total(mail, RESULT_DROPPED, job="odd_result", reason=dropped) == 1
        [warning] = [line for line in mail.log_lines() if line.get("message", "").startswith("the job's result")]
        assert (warning["reason"], warning["id"]) == (dropped, entity_id)


def fail_completion_writes(harness: Harness, times: int, queue: str = "mail") -> list[int]:
    """The `queue` worker's writes that mark a run completed fail (a connection reset) `times` times; the calls
    made."""
    calls: list[int] = []

    def reset(params: dict[str, Any], **_: Any) -> None:
        if ":completed" in params.get("ExpressionAttributeValues", {}) or "#response_data" in params.get(
            "ExpressionAttributeNames", {}
        ):
            calls.append(1)
            if len(calls) <= times:
                raise ConnectionResetError("the connection to DynamoDB was reset")

    harness.worker_clients(queue).register("provide-client-params.dynamodb.UpdateItem", reset)
    return calls


def test_a_completion_write_that_fails_is_tried_again_without_the_result(mail: Harness) -> None:
    calls = fail_completion_writes(mail, times=1)
    mail.send(envelope("odd_result", "string-7"), queue="mail")
    mail.send(envelope("odd_result", "string-7"), queue="mail")  # a duplicate, delivered later
    drain(mail)
    assert odd_result.SIDE_EFFECTS["string-7"] == 1
    record = key_record(mail, "odd_result:string-7")
    assert (record["status"], record["runs"]) == ("COMPLETED", 1)
    assert "data" not in record  # the second try keeps no result
    assert len(calls) == 2
    assert metric_total(mail, RUNTIME_FAULT) == 0


def test_a_completion_that_cannot_be_written_is_acknowledged_not_run_again_for_its_message(mail: Harness) -> None:
    fail_completion_writes(mail, times=2)
    mail.send(envelope("odd_result", "string-8"), queue="mail")
    invocation = mail.deliver("mail")
    # The side effect happened: the message is acknowledged, the store is blamed, never the job
    assert invocation is not None and invocation.failed_ids == []
    assert odd_result.SIDE_EFFECTS["string-8"] == 1
    assert metric_total(mail, RUNTIME_FAULT, reason="idempotency_store") == 1
    assert mail.dead_letters("mail") == []
    assert key_record(mail, "odd_result:string-8")["status"] == "INPROGRESS"  # until its invocation's deadline
