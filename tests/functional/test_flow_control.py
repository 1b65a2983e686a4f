"""Flow control through the real worker on moto: a job's rate limit and its concurrency per key, shared by every
worker through the idempotency table; an endpoint's rate limit on its calls; a record held by any of them is
handed back spending no attempt, for a bounded time; the limits' store failing is the runtime's fault."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from example.standins.invoicing import FakeInvoicingApi
from functions.catalog import CATALOG
from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.flow_control import KeyConcurrency, RateLimit, job_rate_limit_name, key_concurrency_name
from sqs_jobs.resources import Endpoint, MailSender
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.key_concurrency import slot_id
from sqs_jobs.worker.rate_limit import bucket_id
from tests.functional.conftest import Harness, key_record, metric_values, narrowed
from tests.functional.sample_jobs import gather
from tests.functional.test_generate_invoice import body, put_invoice, wait_for_abandoned_runs
from tests.functional.test_job_lookup import _lookup

pytestmark = pytest.mark.timeout(120)

# One token every 100 s: the first record of a batch takes it, the rest can't wait that long and are held.
SLOW = RateLimit(per_second=0.01, burst=1)


def _queue(name: str, **job: Any) -> QueueSpec:
    return QueueSpec(
        name=name,
        function_timeout_s=20,
        max_attempts=3,
        jobs=(JobSpec(name=f"{name}_job", handler="tests.functional.sample_jobs.gather", time_limit_s=5, **job),),
    )


RATED = _queue("rated", rate_limit=SLOW)
PER_REGION = _queue("per_region", rate_limit=replace(SLOW, per="region"))
EXCLUSIVE = _queue("exclusive", concurrency=KeyConcurrency(limit=1, per="customer"))
CATALOG_UNDER_TEST = Catalog(queues=(RATED, PER_REGION, EXCLUSIVE))


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    gather.reset()
    yield Harness.provisioned(clients, CATALOG_UNDER_TEST)


def _send(harness: Harness, queue: str, entity_id: str, **extra: str) -> None:
    harness.send(json.dumps({"job": f"{queue}_job", "id": entity_id, **extra}), queue=queue)


def _deferred(harness: Harness, reason: str) -> float:
    return sum(
        value
        for document in harness.metrics()
        if document.get("reason") == reason and "JobDeferred" in document
        for value in metric_values(document, "JobDeferred")
    )


def _held_by(harness: Harness) -> dict[str, float]:
    held: dict[str, float] = {}
    for document in harness.metrics():
        if document.get("job") == "(runtime)" and "JobHeld" in document and "reason" in document:
            held[document["reason"]] = held.get(document["reason"], 0) + sum(metric_values(document, "JobHeld"))
    return held


def _table_item(harness: Harness, item_id: str) -> dict[str, Any]:
    return dict(
        harness.clients("dynamodb")
        .get_item(TableName=harness.deployment.idempotency_table, Key={"id": {"S": item_id}})
        .get("Item", {})
    )


def test_a_jobs_rate_limit_lets_one_run_start_and_holds_the_rest_without_spending_an_attempt(
    harness: Harness,
) -> None:
    for n in range(3):
        _send(harness, "rated", f"r{n}")

    invocation = harness.deliver("rated")

    assert invocation is not None
    assert sum(len(started) for started in gather.STARTED.values()) == 1
    assert len(invocation.failed_ids) == 2
    assert _deferred(harness, "rate_limited") == 2
    assert _held_by(harness) == {job_rate_limit_name("rated_job"): 2}
    held_ids = [
        json.loads(r["body"])["id"] for r in invocation.event["Records"] if r["messageId"] in invocation.failed_ids
    ]
    for held_id in held_ids:
        record = key_record(harness, f"rated_job:{held_id}")
        assert record["runs"] == 0  # handed back, its run given back
        assert record["held_since"] > 0
    # An operator's look at a held job says it is held, not that a run failed.
    said = _lookup(harness, "rated_job", held_ids[0], queue="rated").explanation()
    assert said.startswith("held since ") and "0 of 3 runs spent" in said and "failed" not in said
    # The bucket is in the shared table: a new worker (another execution environment) finds no token either.
    assert "tat" in _table_item(harness, bucket_id(job_rate_limit_name("rated_job"), ""))
    harness.expire_visibility(invocation, "rated")
    again = harness.deliver("rated", worker=harness.worker("rated"))
    assert again is not None and len(again.failed_ids) == 2
    assert sum(len(started) for started in gather.STARTED.values()) == 1


def test_a_limit_per_field_gives_each_value_its_own_bucket(harness: Harness) -> None:
    _send(harness, "per_region", "a1", region="eu")
    _send(harness, "per_region", "a2", region="us")
    _send(harness, "per_region", "a3", region="eu")

    invocation = harness.deliver("per_region")

    assert invocation is not None
    started = {run_id for runs in gather.STARTED.values() for run_id in runs}
    assert len(started) == 2 and "a2" in started  # one of eu's, and us's own
    assert len(invocation.failed_ids) == 1


def test_past_its_max_hold_a_limits_refusal_is_a_failed_attempt(clients: ClientFactory) -> None:
    queue = _queue("rated", rate_limit=replace(SLOW, max_hold_s=0))
    harness = Harness.provisioned(clients, Catalog(queues=(queue,)))
    gather.reset()
    _send(harness, "rated", "x1")
    _send(harness, "rated", "x2")

    invocation = harness.deliver("rated")

    assert invocation is not None and len(invocation.failed_ids) == 1
    [held] = [
        json.loads(r["body"])["id"] for r in invocation.event["Records"] if r["messageId"] in invocation.failed_ids
    ]
    record = key_record(harness, f"rated_job:{held}")
    assert record["runs"] == 1 and record["last_error_type"] == "RateLimitedError"
    assert _deferred(harness, "rate_limited") == 0


def test_one_run_per_key_at_once_across_a_batch_the_other_held_until_the_first_settles(harness: Harness) -> None:
    _send(harness, "exclusive", "c1-a", customer="c1")
    _send(harness, "exclusive", "c1-b", customer="c1")
    _send(harness, "exclusive", "c2-a", customer="c2")

    invocation = harness.deliver("exclusive")

    assert invocation is not None
    assert gather.MOST["c1"] == 1 and gather.MOST["c2"] == 1
    assert len(invocation.failed_ids) == 1
    assert _deferred(harness, "key_busy") == 1
    # Every run settled: its slot was given back.
    for customer in ("c1", "c2"):
        assert _table_item(harness, slot_id(key_concurrency_name("exclusive_job"), customer, 0)) == {}
    harness.expire_visibility(invocation, "exclusive")
    again = harness.deliver("exclusive")
    assert again is not None and again.failed_ids == []
    assert sorted(gather.STARTED["c1"]) == ["c1-a", "c1-b"]


def test_a_slot_whose_invocation_ended_is_free_again(harness: Harness) -> None:
    # A worker died holding c9's slot; its lease ended with its invocation.
    harness.clients("dynamodb").put_item(
        TableName=harness.deployment.idempotency_table,
        Item={
            "id": {"S": slot_id(key_concurrency_name("exclusive_job"), "c9", 0)},
            "holder": {"S": "a dead worker"},
            "until": {"N": f"{time.time() - 1:.3f}"},
        },
    )
    _send(harness, "exclusive", "c9-a", customer="c9")

    invocation = harness.deliver("exclusive")

    assert invocation is not None and invocation.failed_ids == []
    assert gather.STARTED["c9"] == ["c9-a"]


def test_the_limits_store_failing_holds_the_record_as_the_runtimes_fault(harness: Harness) -> None:
    worker = harness.worker("rated")

    def refuse_flow_items(params: dict[str, Any], **_: Any) -> None:
        if str(params.get("Key", {}).get("id", {}).get("S", "")).startswith("flow#"):
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected"}}, "UpdateItem")

    harness.worker_clients("rated").register("before-parameter-build.dynamodb.UpdateItem", refuse_flow_items)
    _send(harness, "rated", "s1")

    invocation = harness.deliver("rated", worker=worker)

    assert invocation is not None and len(invocation.failed_ids) == 1
    assert gather.STARTED == {}
    assert key_record(harness, "rated_job:s1")["runs"] == 0
    faults = [d for d in harness.metrics() if d.get("reason") == "flow_control_store" and "RuntimeFault" in d]
    assert faults and _deferred(harness, "runtime_fault") == 1


# --- an endpoint's limit on its calls --------------------------------------------------------------------------

INVOICES = replace(CATALOG.queue("invoices"), parallel_records=2, max_attempts=3)


@pytest.fixture
def api(clients: ClientFactory) -> Iterator[FakeInvoicingApi]:
    with FakeInvoicingApi() as running:
        yield running
    wait_for_abandoned_runs()


def test_an_endpoints_rate_limit_holds_a_call_over_it_and_its_record_spends_no_attempt(
    clients: ClientFactory, api: FakeInvoicingApi
) -> None:
    resources = tuple(replace(spec, rate_limit=SLOW) if isinstance(spec, Endpoint) else spec for spec in APP_RESOURCES)
    catalog = narrowed(Catalog(resources=resources, queues=(INVOICES,)), "invoices")
    harness = Harness.provisioned(clients, catalog, settings={"invoicing_api_url": api.url})
    for invoice_id in ("INV-1", "INV-2"):
        put_invoice(harness, invoice_id)
        harness.send(body(invoice_id), queue="invoices")

    invocation = harness.deliver("invoices")

    assert invocation is not None and len(invocation.failed_ids) == 1
    assert api.created_count() == 1  # the other call was never made
    [held] = [
        json.loads(r["body"])["id"] for r in invocation.event["Records"] if r["messageId"] in invocation.failed_ids
    ]
    assert api.requests_for(f"generate_invoice:{held}") == 0
    assert key_record(harness, f"generate_invoice:{held}")["runs"] == 0
    assert _held_by(harness) == {"endpoint:invoicing_api_url": 1}


def test_on_a_fifo_queue_a_held_record_spends_no_attempt_and_its_group_keeps_its_order(
    clients: ClientFactory,
) -> None:
    queue = replace(_queue("rated", rate_limit=SLOW), name="ordered", fifo=True)
    harness = Harness.provisioned(clients, Catalog(queues=(queue,)))
    gather.reset()
    for step in ("a", "b", "c"):
        harness.send(
            json.dumps({"job": "rated_job", "id": f"g1-{step}"}),
            queue="ordered",
            MessageGroupId="g1",
            MessageDeduplicationId=step,
        )

    invocation = harness.deliver("ordered")

    assert invocation is not None and len(invocation.failed_ids) == 2
    assert gather.STARTED["g1"] == ["g1-a"]
    assert key_record(harness, "rated_job:g1-b")["runs"] == 0  # held: its run given back
    assert key_record(harness, "rated_job:g1-c") == {}  # skipped behind it: never started
    assert _deferred(harness, "rate_limited") == 1


def test_a_mail_senders_rate_limit_holds_an_ses_send_over_it_which_is_never_made(clients: ClientFactory) -> None:
    resources = tuple(
        replace(spec, rate_limit=SLOW) if isinstance(spec, MailSender) else spec for spec in APP_RESOURCES
    )
    orders = replace(CATALOG.queue("orders"), parallel_records=1)
    harness = Harness.provisioned(clients, narrowed(Catalog(resources=resources, queues=(orders,)), "orders"))
    for order_id in ("o-1", "o-2"):
        harness.put_order(order_id, email=f"{order_id}@example.com")
        harness.send(json.dumps({"job": "order_confirmation", "id": order_id}))

    invocation = harness.deliver()

    assert invocation is not None and len(invocation.failed_ids) == 1
    assert harness.mails_to("o-1@example.com") + harness.mails_to("o-2@example.com") == 1
    [held] = [
        json.loads(r["body"])["id"] for r in invocation.event["Records"] if r["messageId"] in invocation.failed_ids
    ]
    assert key_record(harness, f"order_confirmation:{held}")["runs"] == 0
    assert _held_by(harness) == {"endpoint:mail_sender": 1}


def test_a_limit_per_tenant_keys_on_the_envelopes_tenant(clients: ClientFactory) -> None:
    queue = _queue("rated", rate_limit=replace(SLOW, per="tenant"))
    harness = Harness.provisioned(clients, Catalog(queues=(queue,)))
    gather.reset()
    for entity_id, tenant in (("t1", "acme"), ("t2", "globex"), ("t3", "acme")):
        _send(harness, "rated", entity_id, tenant=tenant)

    invocation = harness.deliver("rated")

    assert invocation is not None and len(invocation.failed_ids) == 1
    started = {run_id for runs in gather.STARTED.values() for run_id in runs}
    assert "t2" in started and len(started) == 2  # globex's own, and one of acme's


@pytest.mark.slow
def test_a_run_cut_at_its_limit_keeps_its_keys_slot_until_its_thread_ends(clients: ClientFactory) -> None:
    from tests.functional.sample_jobs import nap

    queue = QueueSpec(
        name="napping",
        function_timeout_s=10,
        jobs=(
            JobSpec(
                name="nap",
                handler="tests.functional.sample_jobs.nap",
                time_limit_s=1,
                concurrency=KeyConcurrency(limit=1, per="customer"),
            ),
        ),
    )
    harness = Harness.provisioned(clients, Catalog(queues=(queue,)))
    nap.FAILURES.clear()
    harness.send(json.dumps({"job": "nap", "id": "2.5", "customer": "c7"}), queue="napping")
    slot = slot_id(key_concurrency_name("nap"), "c7", 0)

    invocation = harness.deliver("napping")

    assert invocation is not None and len(invocation.failed_ids) == 1  # cut at 1 s: retried
    # Its code still sleeps (a call still in flight, as far as anyone knows): the next run of c7 must wait.
    assert _table_item(harness, slot) != {}
    deadline = time.monotonic() + 10
    while _table_item(harness, slot) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _table_item(harness, slot) == {}  # given back once the cut run's thread ended
