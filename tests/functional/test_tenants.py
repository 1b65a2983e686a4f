"""Tenants on a standard queue (SQS fair queues): a message's tenant is its body's `tenant` and its MessageGroupId.
JobPublisher sends both (on a FIFO queue the group stays the order, the tenant in the body alone), the job sees the
tenant in its envelope, and the worker logs it. What the runtime sends on keeps both: a dead letter keeps the group
(and gets no deduplication ID, which a standard queue refuses), and a fresh copy of a record on its last receive
keeps its tenant's group."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from functions.catalog import CATALOG
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.console.app import create_app
from sqs_jobs.cli.console.backend import ConsoleBackend
from sqs_jobs.cli.console.security import ACCESS_COOKIE, Guard
from sqs_jobs.cli.discovery import find_queues
from sqs_jobs.cli.dlq import DeadLetterQueue, Filter
from sqs_jobs.cli.status import queue_status
from sqs_jobs.envelope import Envelope
from sqs_jobs.publisher import JobPublisher, PublishError
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.provenance import MessageAttributes
from tests.functional.conftest import Harness, narrowed
from tests.functional.sample_jobs import whose

TENANT = "acme-eu"
WHOSE = Catalog(
    queues=(
        QueueSpec(name="shared", jobs=(JobSpec(name="whose", handler="tests.functional.sample_jobs.whose"),)),
        QueueSpec(
            name="ordered", fifo=True, jobs=(JobSpec(name="whose_fifo", handler="tests.functional.sample_jobs.whose"),)
        ),
    )
)


@pytest.fixture
def orders(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, narrowed(CATALOG, "orders"))


@pytest.fixture
def shared(clients: ClientFactory) -> Iterator[Harness]:
    whose.SEEN.clear()
    yield Harness.provisioned(clients, WHOSE)


def _publisher(harness: Harness) -> JobPublisher:
    urls = {name: queue.url for name, queue in harness.deployment.queues.items()}
    return JobPublisher(harness.clients("sqs"), urls, catalog=harness.catalog)


def _received(harness: Harness, queue: str) -> list[dict[str, Any]]:
    sqs = harness.clients("sqs")
    url = harness.deployment.queues[queue].url
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])
    for message in messages.get("Messages", []):
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    return list(messages.get("Messages", []))


def test_a_tenants_job_arrives_with_its_message_group_and_the_job_sees_its_tenant(shared: Harness) -> None:
    publisher = _publisher(shared)
    publisher.publish("whose", "1", tenant=TENANT)
    publisher.publish("whose", "2")
    publisher.publish_many([Envelope(job="whose", id="3", tenant="globex"), ("whose", "4")])

    sent = {json.loads(m["Body"])["id"]: m for m in _received(shared, "shared")}
    assert {entity: m["Attributes"].get("MessageGroupId") for entity, m in sent.items()} == {
        "1": TENANT,
        "2": None,
        "3": "globex",
        "4": None,
    }
    assert json.loads(sent["1"]["Body"]) == {"job": "whose", "id": "1", "tenant": TENANT}

    invocation = shared.deliver("shared")

    assert invocation is not None and invocation.failed_ids == []
    assert sorted(whose.SEEN) == [
        ("1", TENANT, TENANT),
        ("2", None, None),
        ("3", "globex", "globex"),
        ("4", None, None),
    ]
    # Every log line of a record names its tenant beside its job and ID (Powertools leaves out a key that is None).
    tenants_logged = {(line["id"], line.get("tenant")) for line in shared.log_lines() if "id" in line}
    assert tenants_logged == {("1", TENANT), ("2", None), ("3", "globex"), ("4", None)}


def test_on_a_fifo_queue_the_group_stays_the_order_and_the_tenant_rides_in_the_body(shared: Harness) -> None:
    publisher = _publisher(shared)
    publisher.publish("whose_fifo", "1", tenant=TENANT)
    publisher.publish("whose_fifo", "2", tenant=TENANT, group="order-7")

    sent = {json.loads(m["Body"])["id"]: m for m in _received(shared, "ordered")}
    assert {entity: m["Attributes"]["MessageGroupId"] for entity, m in sent.items()} == {"1": "1", "2": "order-7"}
    assert all(json.loads(m["Body"])["tenant"] == TENANT for m in sent.values())


def test_jobctl_enqueue_publishes_a_tenants_job_and_refuses_a_tenant_sqs_would(orders: Harness) -> None:
    enqueued = CliRunner().invoke(
        jobctl, ["--output", "json", "enqueue", "orders", "order_confirmation", "1", "--tenant", TENANT]
    )
    refused = CliRunner().invoke(jobctl, ["enqueue", "orders", "order_confirmation", "2", "--tenant", "acme eu"])

    assert enqueued.exit_code == 0, enqueued.output
    assert json.loads(enqueued.output)["tenant"] == TENANT
    [message] = _received(orders, "orders")
    assert message["Attributes"]["MessageGroupId"] == TENANT
    assert json.loads(message["Body"])["tenant"] == TENANT
    assert refused.exit_code != 0 and "MessageGroupId" in refused.output


def test_a_fifo_group_on_a_standard_queue_is_refused_pointing_at_tenant(shared: Harness) -> None:
    with pytest.raises(PublishError, match="pass tenant="):
        _publisher(shared).publish("whose", "1", group="acme")
    assert shared.queue_counts("shared") == (0, 0)


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


@pytest.mark.slow
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


def _console_page(harness: Harness, path: str, archive_dir: Path) -> str:
    guard = Guard(host="127.0.0.1", port=8080)
    browser = create_app(ConsoleBackend(harness.clients, "SqsJobs", catalog=CATALOG), guard, archive_dir).test_client()
    browser.set_cookie(ACCESS_COOKIE, guard.access_token, domain="127.0.0.1")
    page = browser.get(path, base_url="http://127.0.0.1:8080")
    assert page.status_code == 200, page.text
    return page.text


# --- what an operator sees ----------------------------------------------------------------------------------------

# A tenant may hold any ASCII punctuation: markup in it must reach a terminal and a page as text.
MARKUP_TENANT = "[bold]<b>acme</b>"


def _dead_letters_of_three_tenants(harness: Harness) -> None:
    for entity_id, tenant in (("1", TENANT), ("2", TENANT), ("3", MARKUP_TENANT), ("4", None)):
        # No such order: dead-lettered at once (OrderNotFoundError), and safe to redrive.
        harness.send(_body("order_confirmation", entity_id, tenant), **({"MessageGroupId": tenant} if tenant else {}))
    harness.deliver()
    assert harness.queue_counts(dead_letter=True) == (4, 0)


@pytest.mark.slow
def test_dlq_list_groups_and_filters_by_tenant(harness: Harness) -> None:
    _dead_letters_of_three_tenants(harness)

    grouped = CliRunner().invoke(jobctl, ["--output", "json", "dlq", "list", "orders", "--group-by", "tenant"])
    only = CliRunner().invoke(jobctl, ["--output", "json", "dlq", "list", "orders", "--tenant", TENANT])
    # Wide enough for every cell whole, whatever COLUMNS the tests run with.
    table = CliRunner().invoke(jobctl, ["dlq", "list", "orders", "--group-by", "tenant"], env={"COLUMNS": "400"})

    assert grouped.exit_code == 0, grouped.output
    counts = {entry["tenant"]: entry["count"] for entry in json.loads(grouped.output)["groups"]}
    assert counts == {TENANT: 2, MARKUP_TENANT: 1, None: 1}
    assert only.exit_code == 0 and json.loads(only.output)["total"] == 2
    assert table.exit_code == 0, table.output
    assert MARKUP_TENANT in table.output  # literally: rich never reads a cell's text as markup
    assert "(no tenant)" in table.output


@pytest.mark.slow
def test_dlq_show_names_the_tenant_and_redrive_takes_only_the_tenants_asked_for(harness: Harness) -> None:
    _dead_letters_of_three_tenants(harness)
    listed = json.loads(
        CliRunner().invoke(jobctl, ["--output", "json", "dlq", "list", "orders", "--group-by", "tenant"]).output
    )
    sample = next(entry["sample_message_id"] for entry in listed["groups"] if entry["tenant"] is None)

    shown = CliRunner().invoke(jobctl, ["dlq", "show", "orders", sample])
    moved = CliRunner().invoke(
        jobctl, ["--output", "json", "dlq", "redrive", "orders", "--tenant", TENANT, "--yes", "--no-verify"]
    )

    assert shown.exit_code == 0, shown.output
    assert f"{'tenant':>16}: (no tenant)" in shown.output.splitlines()
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.output)["moved"] == 2
    back = _received(harness, "orders")
    assert sorted(json.loads(m["Body"])["id"] for m in back) == ["1", "2"]
    assert {m["Attributes"]["MessageGroupId"] for m in back} == {TENANT}


def test_the_consoles_queue_page_counts_dead_letters_per_tenant_and_shows_each_ones(
    harness: Harness, tmp_path: Path
) -> None:
    _dead_letters_of_three_tenants(harness)

    html = _console_page(harness, "/queues/orders", tmp_path)

    by_tenant = html[html.index("<caption>By tenant</caption>") : html.index("</table>", html.index("By tenant"))]
    rows = re.findall(r'<th scope="row">(.*?)</th>\s*<td class="num">(\d+)</td>', by_tenant)
    assert dict(rows) == {TENANT: "2", "[bold]&lt;b&gt;acme&lt;/b&gt;": "1", "(no tenant)": "1"}
    every = html[html.index("<caption>Every dead letter</caption>") :]
    assert every.count(f"<td>{TENANT}</td>") == 2 and every.count("<td>(no tenant)</td>") == 1
    assert "<b>acme</b>" not in html  # the tenant's markup is text on the page


# --- backlog per tenant: what SQS reports of a fair queue ----------------------------------------------------------


def test_jobctl_status_reads_sqs_fair_queue_metrics_of_a_standard_queue(harness: Harness, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    orders = harness.deployment.queues["orders"]
    queue_name = orders.url.rsplit("/", 1)[-1]
    # What SQS publishes for a fair queue (moto takes the data as CloudWatch would store it).
    harness.clients("cloudwatch").put_metric_data(
        Namespace="AWS/SQS",
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
                "Value": value,
                "Timestamp": now - timedelta(minutes=1),
            }
            for name, value in (
                ("ApproximateNumberOfNoisyGroups", 2.0),
                ("ApproximateAgeOfOldestMessageInQuietGroups", 12.0),
                ("ApproximateAgeOfOldestMessage", 1800.0),
            )
        ],
    )
    locations = find_queues(harness.clients("ssm"), "SqsJobs", CATALOG)
    sqs, cloudwatch = harness.clients("sqs"), harness.clients("cloudwatch")

    standard = queue_status(sqs, cloudwatch, CATALOG.queue("orders"), locations["orders"], now=now)
    fifo = queue_status(sqs, cloudwatch, CATALOG.queue("order_updates"), locations["order_updates"], now=now)

    assert (standard.noisy_tenants, standard.quiet_oldest_age_s) == (2, 12.0)
    assert standard.to_dict()["noisy_tenants"] == 2
    # The age alarm's problem says whose wait it is: the noisy tenants', while the others' oldest is 12 s.
    [aged] = [problem for problem in standard.problems if problem.startswith("oldest message")]
    assert aged.endswith("; SQS deems 2 tenant(s) noisy, the others' oldest has waited 12s")
    assert (fifo.noisy_tenants, fifo.quiet_oldest_age_s) == (None, None)
    # The console's queue page says the same.
    page = _console_page(harness, "/queues/orders", tmp_path)
    assert "<dt>Noisy tenants</dt><dd>2 (the others' oldest: 12 s)</dd>" in page
