"""The weekly DLQ review on the running local engine: its schedule fires at Monday 09:00 UTC (the scheduler's
clock is set to just before), the real worker runs dlq_review, and its summary arrives on the alarm topic."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from functions.catalog import CATALOG
from sqs_jobs.local.engine import LocalEngine
from sqs_jobs.local.scheduler import FastClock

pytestmark = pytest.mark.e2e

BEFORE_MONDAY_NINE = datetime(2026, 12, 7, 8, 59, 57, tzinfo=UTC)


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600, catalog=CATALOG) as running:
        yield running


def test_the_weekly_review_fires_and_its_summary_reaches_the_alarm_topic(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    clients = engine.clients()
    sqs, sns = clients("sqs"), clients("sns")
    inbox = sqs.create_queue(QueueName="review-inbox")["QueueUrl"]
    inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(
        TopicArn=engine.deployment.resources["alarm_topic"],
        Protocol="sqs",
        Endpoint=inbox_arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    orders = engine.deployment.queues["orders"]
    sqs.send_message(QueueUrl=orders.url, MessageBody=json.dumps({"job": "order_confirmation", "id": "404"}))
    assert engine.wait_until_idle(timeout_s=30)  # dead-lettered: no such order
    assert engine.scheduler is not None
    # Monday, three seconds before nine (UTC) on the scheduler's clock.
    engine.scheduler.clock = FastClock(1.0, start=BEFORE_MONDAY_NINE)

    summaries: list[str] = []
    deadline = time.monotonic() + 60
    while not summaries and time.monotonic() < deadline:
        received = sqs.receive_message(QueueUrl=inbox, WaitTimeSeconds=1).get("Messages", [])
        summaries += [message["Body"] for message in received]

    [summary] = summaries
    assert "orders" in summary and "OrderNotFoundError" in summary
    assert "jobctl dlq list orders" in summary
    [firing] = [firing for firing in engine.scheduler.fired if firing.schedule == "dlq_review-weekly"]
    assert firing.scheduled_time == datetime(2026, 12, 7, 9, 0, tzinfo=UTC) and firing.delivered
