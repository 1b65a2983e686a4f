"""Issue 5 on the local engine: a stopped worker shows as stalled, with its heartbeat missing; and an opened circuit
breaker shows in `jobctl status`, from the worker's EMF through the engine's CloudWatch.

A module of its own: moto's backends are per process, so no other engine may run beside this one.
"""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime, timedelta

import pytest

from example.records import invoice_item
from functions.catalog import CATALOG
from sqs_jobs.cli.discovery import find_queues
from sqs_jobs.cli.status import queue_status
from sqs_jobs.local.engine import LocalEngine

pytestmark = pytest.mark.e2e


def test_a_stopped_worker_shows_as_stalled_with_its_heartbeat_missing() -> None:
    with LocalEngine(port=0, worker_output=io.StringIO(), catalog=CATALOG) as running:
        assert running.deployment is not None
        clients = running.clients()
        spec = running.catalog.queue("orders")
        deadline = time.monotonic() + 20
        where = find_queues(clients("ssm"), running.stack_name, catalog=CATALOG)["orders"]
        while queue_status(clients("sqs"), clients("cloudwatch"), spec, where).last_heartbeat_at is None:
            assert time.monotonic() < deadline, "the first heartbeat never got through"
            time.sleep(0.5)
        assert queue_status(clients("sqs"), clients("cloudwatch"), spec, where).healthy

        running.stop_workers()  # what a disabled event source or a reserved concurrency of 0 does
        clients("sqs").send_message(QueueUrl=where.url, MessageBody='{"job":"order_confirmation","id":"1"}')
        # Read as it will look once the alarms' windows have passed: nothing consumed, no heartbeat since.
        later = datetime.now(UTC) + timedelta(seconds=spec.alarms.heartbeat_missing_after_s + 60)
        status = queue_status(clients("sqs"), clients("cloudwatch"), spec, where, now=later)

    assert status.backlog >= 1
    assert not status.healthy
    assert any(problem.startswith("stalled") for problem in status.problems)
    assert any(problem.startswith("heartbeat missing") for problem in status.problems)


def test_an_invoicing_outage_opens_the_breaker_and_jobctl_status_says_so() -> None:
    with LocalEngine(port=0, worker_output=io.StringIO(), catalog=CATALOG) as running:
        assert running.deployment is not None
        clients = running.clients()
        spec = running.catalog.queue("invoices")
        where = find_queues(clients("ssm"), running.stack_name, catalog=CATALOG)["invoices"]
        for number in range(12):
            clients("dynamodb").put_item(
                TableName=running.deployment.resources["invoices_table"],
                Item=invoice_item(f"INV-{number}", amount="1.00"),
            )
        running.standins["invoicing_api_url"].set_mode("503")  # type: ignore[attr-defined]
        for number in range(12):
            clients("sqs").send_message(
                QueueUrl=where.url, MessageBody=f'{{"job":"generate_invoice","id":"INV-{number}"}}'
            )
        # The EMF documents reach the engine's CloudWatch through its metrics agent.
        deadline = time.monotonic() + 30
        status = queue_status(clients("sqs"), clients("cloudwatch"), spec, where)
        while not status.circuit_opened:
            assert time.monotonic() < deadline, "no breaker opening reached CloudWatch"
            time.sleep(0.5)
            status = queue_status(clients("sqs"), clients("cloudwatch"), spec, where)

    assert not status.healthy
    assert any(problem.startswith("circuit breakers opened") for problem in status.problems)
