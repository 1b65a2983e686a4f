"""`make demo`: the order-confirmation job end to end on the embedded local engine, then a small durable import.

Seeds orders, publishes good jobs, the same order twice, an order that doesn't exist and a malformed message,
then checks what happened: one mail per order (once for the duplicate), the missing order and the malformed
message in the DLQ with their evidence. Then imports a CSV of 2,500 orders with import_orders, a durable execution
(example/demo_import.py). Exits 0 only if all of that happened.
"""

from __future__ import annotations

import json
import logging
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from example.demo_import import run_import
from functions.catalog import CATALOG
from sqs_jobs.local.engine import LocalEngine
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.worker.errors import EnvelopeError

ORDERS = {
    "1001": {"email": "aiko@example.com", "customer_name": "Aiko", "total": "42.00", "currency": "EUR"},
    "1002": {"email": "ben@example.com", "customer_name": "Ben", "total": "7.50", "currency": "USD"},
    "1003": {"email": "chen@example.com", "customer_name": "Chen", "total": "120.00", "currency": "JPY"},
}
MISSING_ORDER = "9999"
WORKER_LOG = Path(".local-engine/demo-worker.log")
MALFORMED_BODY = '{"job": "order_confirmation", "id": 1004}'


@dataclass
class DemoResult:
    checks: list[tuple[str, bool]] = field(default_factory=list)

    def check(self, label: str, passed: bool) -> None:
        self.checks.append((label, passed))
        print(f"  [{'ok' if passed else 'FAILED'}] {label}")

    @property
    def passed(self) -> bool:
        return all(passed for _, passed in self.checks)


def _seed_orders(dynamodb: Any, table: str) -> None:
    for order_id, order in ORDERS.items():
        item = {"order_id": {"S": order_id}, "total": {"N": order["total"]}}
        item.update({name: {"S": order[name]} for name in ("email", "customer_name", "currency")})
        dynamodb.put_item(TableName=table, Item=item)


def _drain_dlq(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=30
        ).get("Messages", [])
        if not batch:
            return messages
        messages.extend(batch)


def run_demo(engine: LocalEngine) -> DemoResult:
    assert engine.deployment is not None
    deployment = engine.deployment
    clients = engine.clients()
    orders = deployment.queues["orders"]
    _seed_orders(clients("dynamodb"), deployment.resources["orders_table"])
    publisher = JobPublisher(
        clients("sqs"), {name: queue.url for name, queue in deployment.queues.items()}, catalog=CATALOG
    )
    result = DemoResult()

    print("publishing: orders 1001, 1002, 1003, order 1001 again (duplicate), missing order 9999")
    published = publisher.publish_many([("order_confirmation", order_id) for order_id in ORDERS])
    published.append(publisher.publish("order_confirmation", "1001"))
    published.append(publisher.publish("order_confirmation", MISSING_ORDER))
    result.check(f"publisher returned {len(published)} message IDs", len(set(published)) == 5)

    print("publishing a bulky payload through the publisher (must be refused before sending)")
    try:
        publisher.publish("order_confirmation", "1005", extra={"customer_name": "x" * 2000})
        result.check("bulky payload refused at publish time", False)
    except EnvelopeError as error:
        print(f"    refused: {type(error).__name__}: {error}")
        result.check("bulky payload refused at publish time", True)

    print(f"sending a malformed message straight to SQS (as another service might): {MALFORMED_BODY}")
    clients("sqs").send_message(QueueUrl=orders.url, MessageBody=MALFORMED_BODY)

    print("waiting for the worker to drain the queue...")
    result.check("queue drained", engine.wait_until_idle(timeout_s=60))

    mails = Counter(mail["destinations"]["ToAddresses"][0] for mail in engine.sent_mail())
    print(f"mails sent: {dict(mails)}")
    for order in ORDERS.values():
        result.check(f"exactly one mail to {order['email']}", mails[order["email"]] == 1)
    result.check("no other mail sent", sum(mails.values()) == len(ORDERS))

    dead = _drain_dlq(clients("sqs"), orders.dlq_url)
    evidence = {
        message["Body"]: {name: value.get("StringValue") for name, value in message["MessageAttributes"].items()}
        for message in dead
    }
    print("DLQ:")
    for body, attributes in evidence.items():
        print(f"    {body}  <- {attributes.get('jobs.error_type')}: {attributes.get('jobs.error_message')}")
    missing_body = json.dumps({"job": "order_confirmation", "id": MISSING_ORDER}, separators=(",", ":"))
    missing = evidence.get(missing_body, {})
    result.check(
        "missing order dead-lettered after one attempt as OrderNotFoundError",
        missing.get("jobs.error_type") == "OrderNotFoundError" and missing.get("jobs.attempts") == "1",
    )
    malformed = evidence.get(MALFORMED_BODY, {})
    result.check(
        "malformed message dead-lettered as EnvelopeFieldError",
        malformed.get("jobs.error_type") == "EnvelopeFieldError",
    )
    result.check("nothing else in the DLQ", len(dead) == 2)
    run_import(engine, result)
    return result


def main() -> int:
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # The durable SDKs log the broken file's failed step and execution with their tracebacks: the demo checks that
    # failure itself (its dead letter holds the evidence), so their logs are not shown.
    for sdk in ("aws_durable_execution_sdk_python", "aws_durable_execution_sdk_python_testing"):
        logging.getLogger(sdk).setLevel(logging.CRITICAL)
    print("starting the local engine (embedded moto server + Lambda SQS emulator)...")
    WORKER_LOG.parent.mkdir(parents=True, exist_ok=True)
    with (
        WORKER_LOG.open("w", encoding="utf-8") as worker_log,
        LocalEngine(port=0, worker_output=worker_log, catalog=CATALOG) as engine,
    ):
        print(f"local engine at {engine.endpoint_url}; worker logs and EMF metrics in {WORKER_LOG}")
        result = run_demo(engine)
    passed = sum(1 for _, ok in result.checks if ok)
    print(f"\ndemo {'passed' if result.passed else 'FAILED'}: {passed}/{len(result.checks)} checks")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
