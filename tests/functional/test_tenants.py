"""Tenants on a standard queue (SQS fair queues): a message's tenant is its body's `tenant` and its MessageGroupId.
What the runtime sends on keeps both: a dead letter keeps the group (and gets no deduplication ID, which a standard
queue refuses), and a fresh copy of a record on its last receive keeps its tenant's group."""

from __future__ import annotations

import json

import pytest

from functions.worker import deadletter
from functions.worker.provenance import MessageAttributes
from jobctl.dlq import DeadLetterQueue, Filter
from sqs_jobs.catalog import CATALOG
from tests.functional.conftest import Harness, narrowed

TENANT = "acme-eu"


@pytest.fixture
def orders(clients: object) -> Harness:
    return Harness.provisioned(clients, narrowed(CATALOG, "orders"))  # type: ignore[arg-type]


def _body(job: str, entity_id: str, tenant: str | None = TENANT) -> str:
    fields = {"job": job, "id": entity_id} | ({"tenant": tenant} if tenant is not None else {})
    return json.dumps(fields)


def test_a_tenants_dead_letter_keeps_its_message_group_on_a_standard_dlq(orders: Harness) -> None:
    # An unknown job: dead-lettered on its first receive, with its group, which SQS's fair queues go by.
    orders.send(_body("no_such_job", "1"), MessageGroupId=TENANT)

    orders.deliver()

    [dead] = orders.dead_letters()
    assert dead["Attributes"]["MessageGroupId"] == TENANT
    assert "MessageDeduplicationId" not in dead["Attributes"]
    assert orders.queue_counts() == (0, 0)


@pytest.mark.parametrize(
    ("body", "group"),
    [
        (_body("order_confirmation", "1"), TENANT),
        (_body("order_confirmation", "1", tenant=None), None),
        ('{"job": "order_confirmation", "id": "1", "tenant": "not a group"}', None),
        ("not json at all", None),
    ],
    ids=["tenant", "no-tenant", "tenant-sqs-refuses", "not-json"],
)
def test_a_fresh_copy_keeps_its_tenants_message_group(orders: Harness, body: str, group: str | None) -> None:
    queue = orders.deployment.queues["orders"]
    dead_letters = deadletter.DeadLetterQueue(orders.worker_clients()("sqs"), queue.dlq_url)

    dead_letters.requeue(queue.url, body, MessageAttributes.split({}, sent_by_runtime=False))

    copy = orders.peek()
    assert copy["Body"] == body
    assert copy["Attributes"].get("MessageGroupId") == group


def test_a_redriven_dead_letter_goes_back_with_its_tenants_message_group(orders: Harness) -> None:
    queue = orders.deployment.queues["orders"]
    orders.send(_body("no_such_job", "1"), MessageGroupId=TENANT)  # a group on the record: kept in the DLQ
    orders.send(_body("no_such_job", "2"))  # none on the record: the body's tenant is the group going back
    orders.deliver()
    assert orders.queue_counts(dead_letter=True) == (2, 0)

    report = DeadLetterQueue(orders.clients("sqs"), queue.dlq_url, queue.url, scan_visibility_s=0).move(Filter())

    assert (report.moved, report.failed) == (2, [])
    sqs = orders.clients("sqs")
    back = sqs.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])
    assert sorted(json.loads(m["Body"])["id"] for m in back["Messages"]) == ["1", "2"]
    assert {m["Attributes"].get("MessageGroupId") for m in back["Messages"]} == {TENANT}
