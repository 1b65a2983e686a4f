"""Evidence always fits (issue 19): dead letters and hand-back copies of messages SQS accepted, measured as SQS
measures them, on moto through the worker's and jobctl's own entry points.

moto checks only the body's length in characters against a queue's MaximumMessageSize; SQS counts the body's
UTF-8 bytes and every attribute's name, data type and value (AWS's SQS API Reference, MessageAttributeValue). The
tests' moto is taught SQS's rule (lib/sqs_jobs/local/moto_limits.py, proved first below), and each test also measures
what landed with `message_size` against the queue's limit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner

from sqs_jobs.cli import dlq as jobctl_dlq
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.local.lambda_events import sqs_record
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.attribute_store import AttributeStore
from sqs_jobs.worker.deadletter import CopyTooLargeError, DeadLetterQueue, message_size
from sqs_jobs.worker.names import DeadLetterFailure
from sqs_jobs.worker.provenance import (
    ORIGINAL_ATTRIBUTES,
    PRIOR_ATTEMPTS,
    STORED_ATTRIBUTES,
    Attributes,
    MessageAttributes,
    Provenance,
    from_event,
    from_received,
    pack,
    unpack,
)
from tests.functional.conftest import Harness, attributes_of, envelope
from tests.previous_runtime import legacy_packing

EMOJI = "\U0001f600"
FULL_EVIDENCE = {
    deadletter.ERROR_TYPE,
    deadletter.ERROR_MESSAGE,
    deadletter.TRACEBACK,
    deadletter.FAILURE,
    deadletter.ATTEMPTS,
    deadletter.FIRST_FAILED_AT,
    deadletter.LAST_FAILED_AT,
    deadletter.SOURCE_QUEUE,
}


def _limits(harness: Harness, queue: str = "orders") -> tuple[int, int]:
    """The queue's and its DLQ's MaximumMessageSize, as deployed."""
    local = harness.deployment.queues[queue]

    def limit(url: str) -> int:
        attributes = harness.clients("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
        return int(attributes["Attributes"]["MaximumMessageSize"])

    return limit(local.url), limit(local.dlq_url)


def _jobctl(harness: Harness, with_dynamodb: bool = True) -> jobctl_dlq.DeadLetterQueue:
    local = harness.deployment.queues["orders"]
    return jobctl_dlq.DeadLetterQueue(
        harness.clients("sqs"),
        local.dlq_url,
        local.url,
        Provenance.of([local.worker_role_id]),
        receive_wait_s=0,
        dynamodb=(lambda: harness.clients("dynamodb")) if with_dynamodb else None,
    )


def _dead_letters(harness: Harness) -> list[dict[str, Any]]:
    """The DLQ's messages, left visible for jobctl."""
    found = harness.dead_letters()
    url = harness.deployment.queues["orders"].dlq_url
    for message in found:
        harness.clients("sqs").change_message_visibility(
            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    return found


def _received(harness: Harness, queue: str = "orders") -> dict[str, Any]:
    """The one message on the queue, received (and kept invisible) as the event source receives it."""
    [message] = harness.clients("sqs").receive_message(
        QueueUrl=harness.deployment.queues[queue].url,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
        VisibilityTimeout=300,
    )["Messages"]
    return dict(message)


def test_the_tests_sqs_refuses_what_sqs_refuses(harness: Harness) -> None:
    limit, _ = _limits(harness)
    url = harness.deployment.queues["orders"].url
    sqs = harness.clients("sqs")
    emoji_body = EMOJI * (limit // 4)  # a quarter of the limit in characters, all of it in bytes
    sqs.send_message(QueueUrl=url, MessageBody=emoji_body)
    refused: list[dict[str, Any]] = [
        {"MessageBody": emoji_body + "x"},
        # an attribute's name, data type and raw value count: 1 + 6 + 1 bytes here
        {"MessageBody": "x" * (limit - 7), "MessageAttributes": {"b": {"DataType": "Binary", "BinaryValue": b"\0"}}},
        {
            "MessageBody": "{}",
            "MessageAttributes": {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)},
        },
    ]
    for request in refused:
        with pytest.raises(ClientError) as caught:
            sqs.send_message(QueueUrl=url, **request)
        assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"
    sqs.send_message(
        QueueUrl=url,
        MessageBody="x" * (limit - 8),
        MessageAttributes={"b": {"DataType": "Binary", "BinaryValue": b"\0"}},
    )
    assert harness.queue_counts() == (2, 0)


def test_a_permanent_failure_with_a_90_kib_emoji_attribute_keeps_all_its_evidence_and_is_redriven_whole(
    harness: Harness,
) -> None:
    # Given a job for an order that doesn't exist, with a ~90 KiB emoji attribute (270 KiB as escaped JSON)
    queue_limit, dlq_limit = _limits(harness)
    body = envelope("order_confirmation", "9100")
    producer: Attributes = {
        "note": {"DataType": "String", "StringValue": EMOJI * 23_000},
        "tenant": {"DataType": "String", "StringValue": "acme"},
    }
    assert message_size(body, producer) <= queue_limit  # SQS accepts it
    harness.send(body, MessageAttributes=producer)

    # When it fails permanently
    harness.deliver()

    # Then its dead letter has every piece of evidence, uncut, and the producer's attributes byte for byte
    [dead] = _dead_letters(harness)
    evidence = attributes_of(dead)
    assert set(evidence) == FULL_EVIDENCE
    assert evidence[deadletter.ERROR_TYPE] == "OrderNotFoundError"
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.PERMANENT
    assert evidence[deadletter.ATTEMPTS] == "1"
    assert "[truncated]" not in evidence[deadletter.TRACEBACK]
    assert unpack(dead["MessageAttributes"][ORIGINAL_ATTRIBUTES]["BinaryValue"]) == producer
    assert message_size(dead["Body"], dead["MessageAttributes"]) <= dlq_limit

    # and jobctl shows and redrives it with the producer's attributes restored
    dlq = _jobctl(harness)
    [letter] = dlq.peek()
    assert letter.error_type == "OrderNotFoundError"
    assert letter.to_dict()["attributes"]["note"]["StringValue"] == EMOJI * 23_000
    assert dlq.move(jobctl_dlq.Filter()).moved == 1
    redriven = _received(harness)
    assert redriven["Body"] == body
    assert from_received(redriven["MessageAttributes"]) == producer


def test_a_hand_back_copy_of_a_200_kib_binary_attribute_message_is_the_originals_size(harness: Harness) -> None:
    queue_limit, _ = _limits(harness)
    local = harness.deployment.queues["orders"]
    body = envelope("order_confirmation", "9200")
    producer: Attributes = {
        "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256)) * 800},  # 200 KiB, 267 KiB as base64
        "tenant": {"DataType": "String", "StringValue": "acme"},
    }
    original_size = message_size(body, producer)
    harness.send(body, MessageAttributes=producer)
    record = sqs_record(_received(harness), local.arn)  # the Lambda record the worker would get
    attributes = MessageAttributes.split(from_event(record["messageAttributes"]), sent_by_runtime=False)
    dead_letters = DeadLetterQueue(
        harness.worker_clients()("sqs"), local.dlq_url, queue_max_bytes=local.spec.max_message_bytes
    )

    # A copy without bookkeeping is exactly the original's size; with the runs so far, that attribute more
    assert message_size(body, dead_letters.copy_attributes(body, attributes)) == original_size
    dead_letters.requeue(local.url, body, attributes, prior=0)
    harness.clients("sqs").delete_message(QueueUrl=local.url, ReceiptHandle=record["receiptHandle"])
    copy = _received(harness)
    assert from_received(copy["MessageAttributes"]) == {
        **producer,
        PRIOR_ATTEMPTS: {"DataType": "Number", "StringValue": "0"},
    }
    assert message_size(copy["Body"], copy["MessageAttributes"]) == original_size + len(PRIOR_ATTEMPTS) + 6 + 1
    assert message_size(copy["Body"], copy["MessageAttributes"]) <= queue_limit

    # and when the worker runs the copy, the producer's attributes are its own again, bytes as bytes
    harness.clients("sqs").change_message_visibility(
        QueueUrl=local.url, ReceiptHandle=copy["ReceiptHandle"], VisibilityTimeout=0
    )
    harness.deliver()
    [dead] = harness.dead_letters()
    assert unpack(dead["MessageAttributes"][ORIGINAL_ATTRIBUTES]["BinaryValue"]) == producer


def test_a_copy_of_a_message_with_jobs_names_is_packed_and_refused_when_packed_it_would_not_fit(
    harness: Harness,
) -> None:
    local = harness.deployment.queues["orders"]
    dead_letters = DeadLetterQueue(
        harness.worker_clients()("sqs"), local.dlq_url, queue_max_bytes=local.spec.max_message_bytes
    )
    # A producer's `jobs.*` attribute would read as bookkeeping on a copy the runtime sent: it travels packed.
    producer: Attributes = {
        "jobs.prior_attempts": {"DataType": "Number", "StringValue": "-5"},
        "tenant": {"DataType": "String", "StringValue": "acme"},
    }
    small = MessageAttributes.split(producer, sent_by_runtime=False)
    sent = dead_letters.copy_attributes("{}", small, prior=1)
    assert set(sent) == {ORIGINAL_ATTRIBUTES, PRIOR_ATTEMPTS}
    assert MessageAttributes.split(sent, sent_by_runtime=True) == MessageAttributes(
        bookkeeping={PRIOR_ATTEMPTS: "1"}, producer=producer
    )
    # At its queue's exact limit, the packed copy is bigger than SQS would take: a specific error, nothing sent.
    body = "x" * (local.spec.max_message_bytes - message_size("", producer))
    assert message_size(body, producer) == local.spec.max_message_bytes
    with pytest.raises(CopyTooLargeError):
        dead_letters.requeue(local.url, body, small)
    assert harness.queue_counts() == (0, 0)


def test_ten_producer_attributes_and_the_runs_so_far_travel_packed_within_sqss_ten(harness: Harness) -> None:
    local = harness.deployment.queues["orders"]
    dead_letters = DeadLetterQueue(harness.worker_clients()("sqs"), local.dlq_url)
    producer: Attributes = {f"a{i}": {"DataType": "String", "StringValue": "\u4e2d" * i} for i in range(10)}
    attributes = MessageAttributes.split(producer, sent_by_runtime=False)

    assert dead_letters.copy_attributes("{}", attributes) == producer  # ten, as they came
    sent = dead_letters.copy_attributes("{}", attributes, prior=3, held_since=1.5)
    assert len(sent) == 3  # packed, the runs so far, the hold's start
    assert MessageAttributes.split(sent, sent_by_runtime=True).producer == producer


@pytest.mark.slow
def test_a_dead_letter_too_big_for_its_dlq_stores_the_producers_attributes_and_a_redrive_restores_them(
    harness: Harness,
) -> None:
    # Given a source queue whose limit was raised by hand to SQS's 1 MiB, above the catalog's: its DLQ has no
    # room left for the evidence beside a message of 1 MiB less a few KiB
    local = harness.deployment.queues["orders"]
    sqs = harness.clients("sqs")
    sqs.set_queue_attributes(QueueUrl=local.url, Attributes={"MaximumMessageSize": "1048576"})
    _, dlq_limit = _limits(harness)
    body = envelope("order_confirmation", "9300")
    scan = bytes(range(256)) * 4096
    scan = scan[: dlq_limit - message_size(body, {"scan": {"DataType": "Binary", "BinaryValue": b""}})]
    producer: Attributes = {"scan": {"DataType": "Binary", "BinaryValue": scan}}
    assert message_size(body, producer) == dlq_limit  # the largest message SQS takes: packed, no room is left
    harness.send(body, MessageAttributes=producer)

    # When the worker dead-letters it (the order doesn't exist): its attributes go to the worker's attribute store
    invocation = harness.deliver()
    assert invocation is not None and invocation.failed_ids == []

    # Then the dead letter carries the whole evidence and a reference in place of the attributes
    [dead] = _dead_letters(harness)
    assert FULL_EVIDENCE <= set(dead["MessageAttributes"])
    assert ORIGINAL_ATTRIBUTES not in dead["MessageAttributes"]
    reference = json.loads(dead["MessageAttributes"][STORED_ATTRIBUTES]["StringValue"])
    assert reference["table"] == harness.deployment.idempotency_table
    assert message_size(dead["Body"], dead["MessageAttributes"]) <= dlq_limit

    # jobctl without DynamoDB access refuses to redrive it without them, and keeps it
    report = _jobctl(harness, with_dynamodb=False).move(jobctl_dlq.Filter())
    assert report.moved == 0 and len(report.failed) == 1 and "DynamoDB" in report.failed[0]["error"]
    # with it (the operator's `jobctl dlq show` and `redrive`), the message goes back as the producer sent it
    [letter] = _jobctl(harness).peek()
    shown = CliRunner().invoke(jobctl, ["dlq", "show", "orders", letter.message_id])
    assert shown.exit_code == 0, shown.output
    assert f"stored in: {dead['MessageAttributes'][STORED_ATTRIBUTES]['StringValue']}" in shown.output
    moved = CliRunner().invoke(jobctl, ["--output", "json", "dlq", "redrive", "orders", "--yes", "--no-verify"])
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.output[moved.output.index("{") :])["moved"] == 1
    redriven = _received(harness)
    assert redriven["Body"] == body
    assert from_received(redriven["MessageAttributes"]) == producer


def test_a_dead_letter_moved_back_whole_gets_its_stored_attributes_back_or_passes_the_reference_on(
    harness: Harness,
) -> None:
    # SQS's move task sends a dead letter back as it was: with the reference, sent by the worker's role.
    local = harness.deployment.queues["orders"]
    producer: Attributes = {"tenant": {"DataType": "String", "StringValue": "acme"}}
    store = AttributeStore(harness.worker_clients()("dynamodb"), harness.deployment.idempotency_table)
    reference = store.put(pack(producer)).to_attribute()
    moved = MessageAttributes.split(reference, sent_by_runtime=True)
    evidence = deadletter.Evidence("OrderNotFoundError", "gone", "", DeadLetterFailure.PERMANENT, 1, "", "", "", None)
    sqs = harness.worker_clients()("sqs")

    # With the store, its next dead letter carries them packed again (they fit now)
    again = DeadLetterQueue(sqs, local.dlq_url, attribute_store=store).dead_letter("{}", evidence, moved)
    assert unpack(again[ORIGINAL_ATTRIBUTES]["BinaryValue"]) == producer
    assert STORED_ATTRIBUTES not in again
    # Without it, the reference is passed on as it came, and so is it on a hand-back copy
    passed = DeadLetterQueue(sqs, local.dlq_url).dead_letter("{}", evidence, moved)
    assert passed[STORED_ATTRIBUTES] == reference[STORED_ATTRIBUTES]
    assert ORIGINAL_ATTRIBUTES not in passed
    assert DeadLetterQueue(sqs, local.dlq_url).copy_attributes("{}", moved) == reference


LEGACY_PRODUCER: Attributes = {
    "tenant": {"DataType": "String", "StringValue": "caf\u00e9 " + EMOJI},
    "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
}


def test_dead_letters_and_copies_written_by_the_previous_runtime_are_read_and_redriven(harness: Harness) -> None:
    local = harness.deployment.queues["orders"]
    worker_sqs = harness.worker_clients()("sqs")
    legacy = {ORIGINAL_ATTRIBUTES: {"DataType": "String", "StringValue": legacy_packing(LEGACY_PRODUCER)}}
    # A dead letter as the previous runtime wrote it (its role sent it), in the DLQ when the new one is deployed
    worker_sqs.send_message(
        QueueUrl=local.dlq_url,
        MessageBody=envelope("order_confirmation", "9400"),
        MessageAttributes={
            **legacy,
            deadletter.ERROR_TYPE: {"DataType": "String", "StringValue": "OrderNotFoundError"},
            deadletter.ATTEMPTS: {"DataType": "Number", "StringValue": "1"},
        },
    )
    # and a hand-back copy of another job, on its queue, with the runs it had used
    worker_sqs.send_message(
        QueueUrl=local.url,
        MessageBody=envelope("order_confirmation", "9401"),
        MessageAttributes={**legacy, PRIOR_ATTEMPTS: {"DataType": "Number", "StringValue": "2"}},
    )

    # The new worker reads the copy's attempts and the producer's attributes, and dead-letters it in the new packing
    harness.deliver()
    [dead] = [dead for dead in _dead_letters(harness) if "9401" in dead["Body"]]
    assert attributes_of(dead)[deadletter.ATTEMPTS] == "3"
    assert dead["MessageAttributes"][ORIGINAL_ATTRIBUTES]["DataType"] == "Binary"
    assert unpack(dead["MessageAttributes"][ORIGINAL_ATTRIBUTES]["BinaryValue"]) == LEGACY_PRODUCER

    # jobctl shows both with their evidence and attributes, and redrives the old one with them restored
    dlq = _jobctl(harness)
    letters = {letter.entity_id: letter for letter in dlq.peek()}
    assert {letters["9400"].error_type, letters["9401"].error_type} == {"OrderNotFoundError"}
    assert letters["9400"].publisher_attributes == LEGACY_PRODUCER
    assert dlq.move(jobctl_dlq.Filter(match="9400")).moved == 1
    redriven = _received(harness)
    assert from_received(redriven["MessageAttributes"]) == LEGACY_PRODUCER
