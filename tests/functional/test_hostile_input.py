"""Hostile input (issue 6, item 3): each bad message of the corpus, delivered in one batch with good records.

The worker must not raise nor fail the batch; the good records succeed; the bad one is dead-lettered after one
attempt, byte for byte, with evidence naming the EnvelopeError subclass; nothing is left on the source queue.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from functions.worker import deadletter
from functions.worker import errors as worker_errors
from functions.worker.provenance import ORIGINAL_ATTRIBUTES
from tests.functional.conftest import Harness, attributes_of, envelope
from tests.functional.hostile_corpus import CORPUS, SQS_MAX_MESSAGE_BYTES, HostileCase

GOOD_ORDERS = {"5001": "good-one@example.com", "5002": "good-two@example.com"}


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
    assert evidence[deadletter.FAILURE] == deadletter.FAILURE_PERMANENT
    assert evidence[deadletter.ERROR_TYPE] == case.error_type
    message = evidence[deadletter.ERROR_MESSAGE]
    assert message.strip() and "\n" not in message and "\r" not in message
    assert len(message) <= deadletter.MAX_ERROR_MESSAGE_CHARS
    if not case.evidence_trimmed:
        assert case.error_type in evidence[deadletter.TRACEBACK]
        assert evidence[deadletter.SOURCE_QUEUE] == harness.deployment.queues["orders"].arn
    assert deadletter.JOB not in evidence  # an unparseable envelope names no job
    assert len(dead["MessageAttributes"]) <= 10
    # Real SQS counts the attributes in its 256 KiB limit (moto checks the body only): the copy must fit.
    assert _sqs_size(dead) <= SQS_MAX_MESSAGE_BYTES

    # Every attribute the producer set travels with it for a redrive, packed: `jobs.*` names included, as the
    # producer's data (they changed nothing the runtime counted: one attempt, its own evidence).
    own = case.attributes
    if own:
        originals = json.loads(evidence[ORIGINAL_ATTRIBUTES])
        assert set(originals) == set(own)
        for name, value in own.items():
            if "BinaryValue" in value:
                assert base64.b64decode(originals[name]["BinaryValue"]) == value["BinaryValue"]
            else:
                assert originals[name] == value
    else:
        assert ORIGINAL_ATTRIBUTES not in evidence


def test_a_body_at_the_size_limit_is_dead_lettered_bare_rather_than_left_to_go_round(harness: Harness) -> None:
    # A body of exactly SQS's limit leaves no room for evidence: on real SQS a copy with evidence would be
    # refused, and the message would be retried until SQS's redrive moved it. It is dead-lettered at once, bare,
    # and the worker's log line says why.
    body = _padded_to(SQS_MAX_MESSAGE_BYTES)
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
    assert _sqs_size(dead) <= SQS_MAX_MESSAGE_BYTES
    [logged] = [line for line in harness.log_lines() if line.get("message") == "job dead-lettered"]
    assert logged["error_type"] == "EnvelopeTooLargeError"
    assert logged["failure"] == deadletter.FAILURE_PERMANENT


def _padded_to(size: int) -> str:
    head = envelope("order_confirmation", "1")[:-1] + ', "note": "'
    return head + "x" * (size - len(head) - 2) + '"}'
