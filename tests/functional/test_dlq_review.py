"""The DLQ review through the real worker (moto): one summary on the alarm topic, DLQs read and never consumed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.maintenance import dlq_review
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.names import NO_EVIDENCE
from tests.functional.conftest import Harness, envelope

REVIEW = json.dumps({"job": "dlq_review", "id": "2026-12-07T09:00:00Z"})
MISSING_ORDERS = ("9001", "9002", "9003")
# The review covers every catalog queue; the tests dead-letter on `orders` only.
QUEUES = f"{len(CATALOG.queues)} queues"
OTHER_QUEUES = ", ".join(name for name in CATALOG.queue_names if name != "orders")


@pytest.fixture(autouse=True)
def quick_receives(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto answers at once; no need to long-poll an empty DLQ for a second in every test."""
    monkeypatch.setattr(dlq_review, "RECEIVE_WAIT_S", 0)


@pytest.fixture
def inbox(harness: Harness) -> str:
    """An SQS queue subscribed to the alarm topic (raw delivery): where the test reads the summaries."""
    sqs = harness.clients("sqs")
    url = sqs.create_queue(QueueName="alarm-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    harness.clients("sns").subscribe(
        TopicArn=harness.deployment.resources["alarm_topic"],
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"RawMessageDelivery": "false"},
    )
    return str(url)


def summaries(harness: Harness, inbox: str) -> list[dict[str, Any]]:
    """Every notification the topic delivered so far (SNS's JSON: Subject, Message, ...), consumed."""
    sqs = harness.clients("sqs")
    found: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return found
        for message in batch:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=inbox, ReceiptHandle=message["ReceiptHandle"])


def review(harness: Harness) -> None:
    """Run the review as the scheduler would: its envelope on the maintenance queue, delivered to its worker."""
    harness.send(REVIEW, queue="maintenance")
    invocation = harness.deliver(queue="maintenance")
    assert invocation is not None
    assert invocation.failed_ids == []


def dead_letter_orders(harness: Harness) -> None:
    """Three missing orders (OrderNotFoundError) and one malformed body, dead-lettered by the orders worker."""
    for order_id in MISSING_ORDERS:
        harness.send(envelope("order_confirmation", order_id))
    harness.send("not json")
    while harness.deliver() is not None:
        pass
    assert harness.queue_counts(dead_letter=True) == (4, 0)


def test_the_summary_counts_each_dlq_by_error_type_with_the_commands_to_triage(harness: Harness, inbox: str) -> None:
    # Given four dead letters on orders and empty DLQs elsewhere
    dead_letter_orders(harness)
    # When the review runs
    review(harness)
    # Then one summary went to the alarm topic
    [notification] = summaries(harness, inbox)
    assert notification["Subject"] == f"[SqsJobs] DLQ review: 4 dead letters in 1 of {QUEUES}"
    text = notification["Message"]
    assert f"DLQ review 2026-12-07T09:00:00Z: 4 dead letters in 1 of {QUEUES}." in text
    assert "orders: 4 dead letters (DLQ depth 4)" in text
    assert "      3  OrderNotFoundError\n" in text
    assert "      1  EnvelopeNotJSONError\n" in text
    assert "  oldest: under a minute old (sent 20" in text
    assert f"Empty: {OTHER_QUEUES}.\n" in text
    # with the commands an operator pastes, naming a real message
    letters = {
        message["MessageId"]: message["MessageAttributes"][deadletter.ERROR_TYPE]["StringValue"]
        for message in harness.dead_letters()
    }
    shown = [line.split()[4] for line in text.splitlines() if "jobctl dlq show orders" in line]
    assert len(shown) == 2
    assert sorted(letters[message_id] for message_id in shown) == ["EnvelopeNotJSONError", "OrderNotFoundError"]
    assert all(line.endswith(" --stack SqsJobs") for line in text.splitlines() if "jobctl" in line)
    assert "jobctl dlq redrive orders --error-type OrderNotFoundError --dry-run --stack SqsJobs" in text
    assert "jobctl dlq redrive orders --error-type EnvelopeNotJSONError --dry-run --stack SqsJobs" in text
    assert "list them: jobctl dlq list orders --stack SqsJobs" in text


def dlq_ids(harness: Harness) -> list[str]:
    """The orders DLQ's message IDs, read and made visible again at once."""
    sqs = harness.clients("sqs")
    url = harness.deployment.queues["orders"].dlq_url
    messages = harness.dead_letters()
    for message in messages:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    return sorted(message["MessageId"] for message in messages)


def test_the_review_consumes_nothing(harness: Harness, inbox: str) -> None:
    dead_letter_orders(harness)
    before = dlq_ids(harness)
    review(harness)
    # Every message is still there, visible at once (the review made each visible again)
    assert harness.queue_counts(dead_letter=True) == (4, 0)
    assert dlq_ids(harness) == before
    # and the next review finds the same
    harness.send(json.dumps({"job": "dlq_review", "id": "2026-12-14T09:00:00Z"}), queue="maintenance")
    assert harness.deliver(queue="maintenance") is not None
    subjects = [notification["Subject"] for notification in summaries(harness, inbox)]
    assert subjects == [f"[SqsJobs] DLQ review: 4 dead letters in 1 of {QUEUES}"] * 2


def test_an_all_empty_review_still_publishes(harness: Harness, inbox: str) -> None:
    review(harness)
    [notification] = summaries(harness, inbox)
    assert notification["Subject"] == f"[SqsJobs] DLQ review: all empty ({QUEUES})"
    assert f"Empty: {', '.join(CATALOG.queue_names)}.\n" in notification["Message"]
    assert "if it stops arriving, it did not run" in notification["Message"]


def test_a_forged_error_type_is_not_counted_as_evidence(harness: Harness, inbox: str) -> None:
    # Given a message a producer (not the orders worker's role) sent to the DLQ with the runtime's attribute names
    harness.clients("sqs").send_message(
        QueueUrl=harness.deployment.queues["orders"].dlq_url,
        MessageBody=envelope("order_confirmation", "4242"),
        MessageAttributes={deadletter.ERROR_TYPE: {"DataType": "String", "StringValue": "OrderNotFoundError"}},
    )
    review(harness)
    [notification] = summaries(harness, inbox)
    text = notification["Message"]
    assert f"      1  {NO_EVIDENCE}\n" in text
    assert "OrderNotFoundError" not in text
    assert "--error-type '(no evidence: not dead-lettered by the runtime)' --dry-run" in text


def test_the_same_scheduled_review_delivered_twice_publishes_once(harness: Harness, inbox: str) -> None:
    review(harness)
    # the scheduler delivers the same firing again (at least once)
    review(harness)
    assert len(summaries(harness, inbox)) == 1


def test_an_unreadable_dlq_is_reported_and_the_rest_reviewed(harness: Harness, inbox: str) -> None:
    dead_letter_orders(harness)
    harness.clients("sqs").delete_queue(QueueUrl=harness.deployment.queues["invoices"].dlq_url)
    review(harness)
    [notification] = summaries(harness, inbox)
    assert notification["Subject"] == f"[SqsJobs] DLQ review: 4 dead letters in 1 of {QUEUES}, 1 DLQ NOT READ"
    assert "invoices: DLQ NOT READ: " in notification["Message"]
    assert "NonExistentQueue" in notification["Message"]
    assert "orders: 4 dead letters" in notification["Message"]


def test_a_summary_sns_refuses_fails_the_run_and_it_is_retried(harness: Harness) -> None:
    # Given an alarm topic that does not exist (deleted, or a wrong ARN)
    topic = harness.deployment.resources["alarm_topic"]
    harness.clients("sns").delete_topic(TopicArn=topic)
    message_id = harness.send(REVIEW, queue="maintenance")
    invocation = harness.deliver(queue="maintenance")
    # Then the run failed as transient: the record goes back to its queue for a retry, not to the DLQ
    assert invocation is not None
    assert invocation.failed_ids == [message_id]
    assert harness.queue_counts("maintenance", dead_letter=True) == (0, 0)
    failures = [line for line in harness.log_lines() if line.get("error_type") == "SummaryNotPublishedError"]
    assert failures, harness.log_lines()[-3:]


def test_a_capped_scan_says_at_least_and_still_consumes_nothing(
    harness: Harness, inbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dlq_review, "MAX_READ_PER_QUEUE", 2)
    dead_letter_orders(harness)
    review(harness)
    [notification] = summaries(harness, inbox)
    assert notification["Subject"] == f"[SqsJobs] DLQ review: at least 4 dead letters in 1 of {QUEUES}"
    assert "orders: at least 4 dead letters (DLQ depth 4; read the first 2)" in notification["Message"]
    assert harness.queue_counts(dead_letter=True) == (4, 0)
