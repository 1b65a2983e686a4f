"""Upgrades in flight: what the previous runtime wrote is in the queues, the DLQs and the idempotency table when
this one is deployed. Its records (plain Powertools), its hand-back copies (`jobs.prior_attempts`,
`jobs.held_since`, `jobs.original_attributes` as JSON text) and the messages it was retrying keep working: nothing
completed runs again, no run it counted is forgotten, nothing is dead-lettered for the upgrade."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer, IdempotencyConfig

from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.provenance import MessageAttributes, from_received
from sqs_jobs.worker.settings import IDEMPOTENCY_KEY_PREFIX
from tests.functional.conftest import Harness, attributes_of, envelope, key_record
from tests.functional.sample_jobs import flaky

QUEUE = QueueSpec(
    name="upgraded",
    max_attempts=3,
    jobs=(JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky"),),
)
CATALOG = Catalog(queues=(QUEUE,))


@pytest.fixture
def upgraded(clients: ClientFactory) -> Iterator[Harness]:
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    flaky.ATTEMPTS_SEEN.clear()
    yield Harness.provisioned(clients, CATALOG)


def previous_runtimes_store(harness: Harness) -> DynamoDBPersistenceLayer:
    """The idempotency store as the previous runtime wrote it: Powertools' own DynamoDB layer, unchanged."""
    store = DynamoDBPersistenceLayer(
        table_name=harness.deployment.idempotency_table, boto3_client=harness.clients("dynamodb")
    )
    store.configure(
        IdempotencyConfig(event_key_jmespath="key", expires_after_seconds=QUEUE.idempotency_expiry_s),
        key_prefix=IDEMPOTENCY_KEY_PREFIX,
    )
    return store


def send_as_previous_runtime(harness: Harness, body: str, attributes: dict[str, dict[str, str]]) -> None:
    """A copy the previous runtime handed back: sent by the worker's own role, its bookkeeping in attributes."""
    harness.worker_clients("upgraded")("sqs").send_message(
        QueueUrl=harness.deployment.queues["upgraded"].url, MessageBody=body, MessageAttributes=attributes
    )


def number(value: int | float) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": str(value)}


def test_a_job_the_previous_runtime_completed_is_not_run_again(upgraded: Harness) -> None:
    store = previous_runtimes_store(upgraded)
    store.save_inprogress(data={"key": "flaky:done"}, remaining_time_in_millis=60_000)
    store.save_success(data={"key": "flaky:done"}, result={"effects": 1})
    upgraded.send(envelope("flaky", "done"), queue="upgraded")
    invocation = upgraded.deliver("upgraded")
    assert invocation is not None and invocation.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == []
    assert [line["message"] for line in upgraded.log_lines() if line.get("id") == "done"] == ["duplicate skipped"]


def test_an_in_progress_record_the_previous_runtime_left_is_taken_over_after_its_deadline(upgraded: Harness) -> None:
    previous_runtimes_store(upgraded).save_inprogress(data={"key": "flaky:left"}, remaining_time_in_millis=0)
    time.sleep(0.005)
    upgraded.send(envelope("flaky", "left"), queue="upgraded")
    invocation = upgraded.deliver("upgraded")
    assert invocation is not None and invocation.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == [1]  # its record kept no count: the run it stood for is unknown
    assert key_record(upgraded, "flaky:left")["status"] == "COMPLETED"


def test_a_copy_the_previous_runtime_handed_back_keeps_its_runs_and_its_producers_attributes(
    upgraded: Harness,
) -> None:
    # Given a copy with 1 run before it, carrying its producer's attributes as the previous runtime packed them
    packed = json.dumps({"trace": {"DataType": "String", "StringValue": "t-1"}}, separators=(",", ":"))
    flaky.FAILURES["copy"] = 99
    send_as_previous_runtime(
        upgraded,
        envelope("flaky", "copy"),
        {"jobs.prior_attempts": number(1), "jobs.original_attributes": {"DataType": "String", "StringValue": packed}},
    )
    # When it fails on every run
    for _ in range(QUEUE.max_attempts):
        invocation = upgraded.deliver("upgraded")
        if invocation is None:
            break
        upgraded.expire_visibility(invocation, "upgraded")
    # Then it ran as attempts 2 and 3, and its dead letter has the evidence and the producer's attribute
    assert flaky.ATTEMPTS_SEEN == [2, 3]
    [dead] = upgraded.dead_letters("upgraded")
    evidence = attributes_of(dead)
    assert (evidence["jobs.failure"], evidence["jobs.attempts"]) == ("retries_exhausted", "3")
    carried = MessageAttributes.split(from_received(dead["MessageAttributes"]), sent_by_runtime=True).producer
    assert carried == {"trace": {"DataType": "String", "StringValue": "t-1"}}


def test_a_copy_that_had_used_all_its_runs_still_gets_one_so_nothing_is_dead_lettered_for_the_upgrade(
    upgraded: Harness,
) -> None:
    send_as_previous_runtime(upgraded, envelope("flaky", "late"), {"jobs.prior_attempts": number(7)})
    invocation = upgraded.deliver("upgraded")
    assert invocation is not None and invocation.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == [QUEUE.max_attempts]
    assert upgraded.dead_letters("upgraded") == []


def test_a_message_the_previous_runtime_was_retrying_runs_on_and_is_not_dead_lettered(upgraded: Harness) -> None:
    # Given a message SQS has delivered three times already (the previous runtime's retries: max_attempts 3)
    upgraded.send(envelope("flaky", "retried"), queue="upgraded")
    url = upgraded.deployment.queues["upgraded"].url
    sqs = upgraded.clients("sqs")
    for _ in range(QUEUE.max_attempts):
        [message] = sqs.receive_message(QueueUrl=url)["Messages"]
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    # When this runtime receives it (its 4th receive), it runs: the runs are the key's record's, and it has none
    invocation = upgraded.deliver("upgraded")
    assert invocation is not None and invocation.failed_ids == []
    assert int(invocation.event["Records"][0]["attributes"]["ApproximateReceiveCount"]) == QUEUE.max_attempts + 1
    assert flaky.ATTEMPTS_SEEN == [1]
    assert upgraded.dead_letters("upgraded") == []
