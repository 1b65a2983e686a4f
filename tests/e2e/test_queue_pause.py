"""A paused queue on the local engine: its pollers stop receiving, nothing is lost, resuming drains it."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cli.queue_control import pause, resume
from sqs_jobs.local.engine import LocalEngine

pytestmark = pytest.mark.e2e

# Longer than the switch's refresh plus a paused poller's wait and a receive's long poll: time for a poller that
# ignored the pause to have taken the message.
PAUSED_WATCH_S = 4


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    # No heartbeat canary in the way: its beats would be waiting on the paused queue too.
    with LocalEngine(port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600, catalog=CATALOG) as running:
        yield running


def _mails_to(engine: LocalEngine, address: str) -> int:
    return sum(1 for mail in engine.sent_mail() if address in mail["destinations"].get("ToAddresses", []))


def test_a_paused_queue_keeps_its_jobs_until_it_is_resumed(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    clients = engine.clients()
    orders = engine.deployment.queues["orders"]
    clients("dynamodb").put_item(
        TableName=engine.deployment.resources["orders_table"],
        Item={"order_id": {"S": "31"}, "email": {"S": "paused@example.com"}},
    )
    assert engine.wait_until_idle(timeout_s=30)
    before = engine.stats()["orders"]["records"]

    pause(clients("lambda"), orders.arn)
    time.sleep(2)  # the pollers notice within the switch's refresh
    clients("sqs").send_message(QueueUrl=orders.url, MessageBody=json.dumps({"job": "order_confirmation", "id": "31"}))
    time.sleep(PAUSED_WATCH_S)

    assert engine.queue_counts()["orders"]["ApproximateNumberOfMessages"] == 1
    assert engine.stats()["orders"]["records"] == before
    assert _mails_to(engine, "paused@example.com") == 0

    resume(clients("lambda"), orders.arn)
    deadline = time.monotonic() + 30
    while _mails_to(engine, "paused@example.com") == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _mails_to(engine, "paused@example.com") == 1
    assert engine.wait_until_idle(timeout_s=30)


def test_status_says_a_paused_queue_is_paused(engine: LocalEngine) -> None:
    from functions.catalog import CATALOG
    from sqs_jobs.cli.discovery import find_queues
    from sqs_jobs.cli.status import QueueStatus, queue_status

    clients = engine.clients()
    where = find_queues(clients("ssm"), engine.stack_name, catalog=CATALOG)["orders"]

    def read() -> QueueStatus:
        return queue_status(
            clients("sqs"), clients("cloudwatch"), CATALOG.queue("orders"), where, lambda_client=clients("lambda")
        )

    assert read().paused is False
    pause(clients("lambda"), where.arn)
    status = read()
    assert status.paused is True and not status.healthy
    assert "paused: its worker takes no jobs until `jobctl queue resume orders`" in status.problems
    resume(clients("lambda"), where.arn)
    assert read().paused is False
