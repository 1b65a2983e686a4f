"""Hostile input (issue 6, item 3): each bad message of the corpus, delivered in one batch with good records.

The worker must not raise nor fail the batch; the good records succeed; the bad one is dead-lettered after one
attempt, byte for byte, with evidence naming the EnvelopeError subclass; nothing is left on the source queue.
"""

from __future__ import annotations

from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.worker import deadletter
from sqs_jobs.worker import errors as worker_errors
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import DeadLetterFailure
from sqs_jobs.worker.provenance import ORIGINAL_ATTRIBUTES, unpack
from tests.functional.conftest import Harness, attributes_of, envelope, narrowed
from tests.functional.hostile_corpus import CORPUS, HostileCase

GOOD_ORDERS = {"5001": "good-one@example.com", "5002": "good-two@example.com"}
# Only the queue the corpus is delivered to, and what its jobs use: a third of the provisioning, per case.
ORDERS_ONLY = narrowed(CATALOG, "orders")


@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, ORDERS_ONLY)


def test_the_corpus_is_large_and_names_are_unique() -> None:
    assert len(CORPUS) >= 40
    assert len({case.name for case in CORPUS}) == len(CORPUS)
    for case in CORPUS:
        assert case.body, "SQS refuses empty bodies"
        assert issubclass(getattr(worker_errors, case.error_type), worker_errors.EnvelopeError)
        assert len(case.attributes) <= 10, "SQS allows 10 message attributes"


def _sqs_size(message: dict[str, Any]) -> int:
    """A message's size as SQS counts it: the body plus each attribute's name, type and value."""
    size = len(message["Body"].encode("utf-8"))
    for name, value in message.get("MessageAttributes", {}).items():
        data = value.get("StringValue")
        raw = data.encode("utf-8") if data is not None else value.get("BinaryValue", b"")
        size += len(name.encode()) + len(value["DataType"].encode()) + len(raw)
    return size


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_hostile_message_is_dead_lettered_once_while_good_records_of_its_batch_succeed(
    harness: Harness, case: HostileCase
) -> None:
    # Given two good jobs for existing orders and the hostile message, in one delivery
    for order_id, email in GOOD_ORDERS.items():
        harness.put_order(order_id, email=email)
        harness.send(envelope("order_confirmation", order_id))
    extra: dict[str, Any] = {"MessageAttributes": case.attributes} if case.attributes else {}
    bad_id = harness.send(case.body, **extra)

    # When the event source delivers them once
    invocation = harness.deliver()

    # Then the invocation neither raised nor failed any record, and all three were in its batch
    assert invocation is not None
    assert not invocation.raised
    assert not invocation.timed_out
    assert invocation.response == {"batchItemFailures": []}
    assert {record["messageId"] for record in invocation.event["Records"]} >= {bad_id}
    assert len(invocation.event["Records"]) == 3
    assert len(invocation.deleted) == 3
    # the good records succeeded, one mail each
    for email in GOOD_ORDERS.values():
        assert harness.mails_to(email) == 1
    # nothing is left on the source queue
    assert harness.queue_counts() == (0, 0)

    # and the bad message is in the DLQ, byte for byte, after exactly one attempt, with clear evidence
    [dead] = harness.dead_letters()
    assert dead["Body"] == case.body
    assert dead["Body"].encode("utf-8") == case.body.encode("utf-8")
    evidence = attributes_of(dead)
    assert evidence[deadletter.ATTEMPTS] == "1"
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.PERMANENT
    assert evidence[deadletter.ERROR_TYPE] == case.error_type
    message = evidence[deadletter.ERROR_MESSAGE]
    assert message.strip() and "\n" not in message and "\r" not in message
    assert len(message.encode("utf-8")) <= deadletter.MAX_ERROR_MESSAGE_BYTES
    # The DLQ's headroom above its queue's limit holds all the evidence, even beside a body at that limit.
    assert case.error_type in evidence[deadletter.TRACEBACK]
    assert evidence[deadletter.SOURCE_QUEUE] == harness.deployment.queues["orders"].arn
    assert deadletter.JOB not in evidence  # an unparseable envelope names no job
    assert len(dead["MessageAttributes"]) <= 10
    # Real SQS counts the attributes in its limit (moto checks the body only): the dead letter must fit the DLQ.
    assert _sqs_size(dead) == deadletter.message_size(dead["Body"], dead["MessageAttributes"])
    assert _sqs_size(dead) <= harness.deployment.queues["orders"].spec.dlq_max_message_bytes

    # Every attribute the producer set travels with it for a redrive, packed: `jobs.*` names included, as the
    # producer's data (they changed nothing the runtime counted: one attempt, its own evidence).
    own = case.attributes
    if own:
        assert unpack(dead["MessageAttributes"][ORIGINAL_ATTRIBUTES]["BinaryValue"]) == own
    else:
        assert ORIGINAL_ATTRIBUTES not in dead["MessageAttributes"]


def test_a_body_at_its_queues_exact_limit_is_dead_lettered_with_all_its_evidence(harness: Harness) -> None:
    # The most a producer can send: a body of exactly the queue's limit. The DLQ's room above that limit takes
    # the whole evidence; nothing is cut, and the message is not left to go round until SQS's redrive moves it.
    limit = harness.deployment.queues["orders"].spec.max_message_bytes
    body = _padded_to(limit)
    assert len(body.encode("utf-8")) == limit
    harness.put_order("5001", email="good-one@example.com")
    harness.send(envelope("order_confirmation", "5001"))
    harness.send(body)
    invocation = harness.deliver()
    assert invocation is not None and not invocation.raised
    assert invocation.response == {"batchItemFailures": []}
    assert harness.mails_to("good-one@example.com") == 1
    assert harness.queue_counts() == (0, 0)
    [dead] = harness.dead_letters()
    assert dead["Body"] == body
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == "EnvelopeTooLargeError"
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.PERMANENT
    assert evidence[deadletter.ATTEMPTS] == "1"
    assert "EnvelopeTooLargeError" in evidence[deadletter.TRACEBACK]
    assert "[truncated]" not in evidence[deadletter.TRACEBACK]
    assert {deadletter.FIRST_FAILED_AT, deadletter.LAST_FAILED_AT, deadletter.SOURCE_QUEUE} <= set(evidence)
    assert limit < _sqs_size(dead) <= harness.deployment.queues["orders"].spec.dlq_max_message_bytes
    [logged] = [line for line in harness.log_lines() if line.get("message") == "job dead-lettered"]
    assert logged["error_type"] == "EnvelopeTooLargeError"
    assert logged["failure"] == DeadLetterFailure.PERMANENT


def _padded_to(size: int) -> str:
    head = envelope("order_confirmation", "1")[:-1] + ', "note": "'
    return head + "x" * (size - len(head) - 2) + '"}'
