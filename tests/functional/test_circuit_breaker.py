"""Circuit breakers per downstream, on real SQS semantics (moto) and the fake invoicing API: a downstream that is
down stops being called, the records that need it wait without spending attempts (for a bounded time), one probe
tests recovery; and the time limit's fence on a job's AWS calls."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from example.standins.invoicing import FakeInvoicingApi
from functions.catalog import CATALOG
from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.local.emulator import Invocation
from sqs_jobs.specs import Catalog, CircuitBreakerSpec, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.provenance import HELD_SINCE
from sqs_jobs.worker.runtime import Worker
from tests.functional.conftest import Harness, attributes_of, envelope, key_record, metric_values, narrowed
from tests.functional.test_generate_invoice import body, put_invoice, wait_for_abandoned_runs

pytestmark = pytest.mark.timeout(90)

BREAKER = CircuitBreakerSpec(failure_threshold=3, open_s=1.0, max_open_s=2.0, max_hold_s=600)
INVOICES = replace(
    CATALOG.queue("invoices"),
    parallel_records=1,
    max_attempts=3,
    # Retried at most twice: the retrying alarm can fire from the second failure on.
    backoff_base_s=1,
    backoff_cap_s=2,
    circuit_breaker=BREAKER,
)
# Open long enough that no probe is let through while one batch runs, however loaded the machine.
ORDERS = replace(
    CATALOG.queue("orders"),
    parallel_records=1,
    circuit_breaker=replace(BREAKER, failure_threshold=2, open_s=30.0, max_open_s=60.0),
)
FENCED = QueueSpec(
    name="fenced",
    function_timeout_s=10,
    jobs=(
        JobSpec(
            name="two_step",
            handler="tests.functional.sample_jobs.two_step",
            resources=("invoices_bucket",),
            time_limit_s=1,
        ),
    ),
)


def catalog_with(*queues: QueueSpec) -> Catalog:
    """These queues alone, and the app's resources their jobs use: all a test here touches."""
    return narrowed(Catalog(resources=APP_RESOURCES, queues=queues), *(queue.name for queue in queues))


@pytest.fixture
def api(clients: ClientFactory) -> Iterator[FakeInvoicingApi]:
    with FakeInvoicingApi() as running:
        yield running
    wait_for_abandoned_runs()


def harness_for(clients: ClientFactory, api: FakeInvoicingApi, *queues: QueueSpec) -> Harness:
    return Harness.provisioned(clients, catalog_with(*queues), settings={"invoicing_api_url": api.url})


@pytest.fixture
def guarded(clients: ClientFactory, api: FakeInvoicingApi) -> Harness:
    return harness_for(clients, api, INVOICES)


def api_calls(api: FakeInvoicingApi, invoice_ids: list[str]) -> int:
    return sum(api.requests_for(f"generate_invoice:{invoice_id}") for invoice_id in invoice_ids)


def records_by_id(invocation: Invocation) -> dict[str, str]:
    return {json.loads(r["body"])["id"]: r["messageId"] for r in invocation.event["Records"]}


def held_lines(harness: Harness) -> list[dict[str, Any]]:
    return [line for line in harness.log_lines() if line.get("reason") == "circuit_open" and "message" in line]


def drain(harness: Harness, queue: str, worker: Worker, rounds: int = 20) -> None:
    """Deliver until the queue is empty, waiting out delays and backoffs."""
    for _ in range(rounds):
        visible, in_flight = harness.queue_counts(queue)
        delayed = int(
            harness.clients("sqs").get_queue_attributes(
                QueueUrl=harness.deployment.queues[queue].url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
            )["Attributes"]["ApproximateNumberOfMessagesDelayed"]
        )
        if visible + in_flight + delayed == 0:
            return
        invocation = harness.deliver(queue, worker=worker)
        if invocation is None:
            time.sleep(0.5)
        else:
            harness.expire_visibility(invocation, queue)
    raise AssertionError(f"queue {queue} did not drain")


def six_invoices_while_the_api_is_down(harness: Harness, api: FakeInvoicingApi) -> tuple[list[str], Worker]:
    invoice_ids = [f"INV-{n}" for n in range(6)]
    for invoice_id in invoice_ids:
        put_invoice(harness, invoice_id)
        harness.send(body(invoice_id), queue="invoices")
    api.set_mode("503")
    return invoice_ids, harness.worker("invoices")


def test_a_failing_api_opens_its_breaker_and_the_records_after_it_wait_without_calling(
    guarded: Harness, api: FakeInvoicingApi
) -> None:
    invoice_ids, worker = six_invoices_while_the_api_is_down(guarded, api)

    invocation = guarded.deliver("invoices", worker=worker)

    assert invocation is not None and len(invocation.event["Records"]) == 6
    assert api_calls(api, invoice_ids) == BREAKER.failure_threshold  # then no more calls
    # All six go back: the three that called retried with backoff (a run spent), the three refused held.
    assert len(invocation.failed_ids) == 6
    held = held_lines(guarded)
    assert len(held) == 3 and {line["downstream"] for line in held} == {api.url.rstrip("/")}
    assert all(line["message"] == "handed back unrun; visible again later" for line in held)
    [opened] = [line for line in guarded.log_lines() if line.get("message") == "circuit opened"]
    assert opened["downstream"] == api.url.rstrip("/") and opened["consecutive_failures"] == 3
    documents = guarded.metrics()
    [metric] = [d for d in documents if d.get("job") == "(runtime)" and d.get("reason") == opened["downstream"]]
    assert sum(metric_values(metric, "CircuitOpened")) == 1.0
    [deferred] = [d for d in documents if d.get("job") == "generate_invoice" and d.get("reason") == "circuit_open"]
    assert sum(metric_values(deferred, "JobDeferred")) == 3.0
    # A refusal is not a failed run: the failure rate counts the three calls only.
    [counts] = [d for d in guarded.metrics() if d.get("job") == "generate_invoice" and "reason" not in d]
    assert sum(metric_values(counts, "JobFailed")) == 3.0

    # The held ones: their keys' records give the run back and remember when the hold began; the three that
    # called have one run spent.
    held_ids = {line["id"] for line in held}
    for invoice_id in invoice_ids:
        record = key_record(guarded, f"generate_invoice:{invoice_id}")
        if invoice_id in held_ids:
            assert record["runs"] == 0 and 0 < time.time() - record["held_since"] < 30
        else:
            assert record["runs"] == 1 and "held_since" not in record


@pytest.mark.slow
def test_one_probe_finds_the_api_back_and_every_job_then_runs_once(guarded: Harness, api: FakeInvoicingApi) -> None:
    invoice_ids, worker = six_invoices_while_the_api_is_down(guarded, api)
    first = guarded.deliver("invoices", worker=worker)
    assert first is not None
    called = {i for i in invoice_ids if api.requests_for(f"generate_invoice:{i}")}
    api.set_mode("ok")

    drain(guarded, "invoices", worker)

    assert api.created_count() == 6
    for invoice_id in invoice_ids:
        # Held ones were never called while the API was down: one call each; the three that opened it, two.
        assert api.requests_for(f"generate_invoice:{invoice_id}") == (2 if invoice_id in called else 1)
    assert guarded.dead_letters("invoices") == []
    assert [line["message"] for line in guarded.log_lines() if line.get("message") == "circuit opened"] == [
        "circuit opened"
    ]


def test_past_max_hold_s_a_refusal_spends_an_attempt_and_a_lasting_outage_ends_in_the_dlq_with_evidence(
    clients: ClientFactory, api: FakeInvoicingApi
) -> None:
    # Open for 30 s: with 1 s, a loaded machine let the second record find the breaker half-open and call.
    breaker = replace(BREAKER, failure_threshold=1, max_hold_s=0, open_s=30.0, max_open_s=60.0)
    queue = replace(INVOICES, max_attempts=1, circuit_breaker=breaker)
    harness = harness_for(clients, api, queue)
    for invoice_id in ("INV-A", "INV-B"):
        put_invoice(harness, invoice_id)
        harness.send(body(invoice_id), queue="invoices")
    api.set_mode("503")

    invocation = harness.deliver("invoices", worker=harness.worker("invoices"))

    assert invocation is not None and invocation.failed_ids == []  # both dead-lettered on their only attempt
    assert api_calls(api, ["INV-A", "INV-B"]) == 1  # the second was refused, not called
    evidence = sorted(attributes_of(m)["jobs.error_type"] for m in harness.dead_letters("invoices"))
    assert evidence == ["CircuitOpenError", "HttpTransientError"]
    assert held_lines(harness) == []


def test_the_hold_is_bounded_by_the_runtimes_own_bookkeeping_never_by_a_producers(
    clients: ClientFactory, api: FakeInvoicingApi
) -> None:
    # Open for 30 s: with 1 s, a loaded machine let the last record find the breaker half-open and call.
    breaker = replace(BREAKER, failure_threshold=1, open_s=30.0, max_open_s=60.0)
    queue = replace(INVOICES, max_attempts=1, circuit_breaker=breaker)
    harness = harness_for(clients, api, queue)
    for invoice_id in ("INV-OPEN", "INV-FORGED", "INV-OURS"):
        put_invoice(harness, invoice_id)
    long_ago = {HELD_SINCE: {"DataType": "Number", "StringValue": str(time.time() - 3600)}}
    harness.send(body("INV-OPEN"), queue="invoices")
    # A producer claims the job has been held for an hour: its attribute is data, not bookkeeping.
    harness.send(body("INV-FORGED"), queue="invoices", MessageAttributes=long_ago)
    # The worker's own role sent this one (a copy it handed back an hour ago): that does count.
    harness.worker_clients("invoices")("sqs").send_message(
        QueueUrl=harness.deployment.queues["invoices"].url, MessageBody=body("INV-OURS"), MessageAttributes=long_ago
    )
    api.set_mode("503")

    invocation = harness.deliver("invoices", worker=harness.worker("invoices"))

    assert invocation is not None and len(invocation.event["Records"]) == 3
    by_id = {json.loads(m["Body"])["id"]: attributes_of(m) for m in harness.dead_letters("invoices")}
    assert by_id.get("INV-OURS", {}).get("jobs.error_type") == "CircuitOpenError"  # held an hour: counted
    assert "INV-FORGED" not in by_id
    [held] = held_lines(harness)
    assert held["id"] == "INV-FORGED"


# --- AWS services ------------------------------------------------------------------------------------------


def throttle(client: Any, event: str) -> list[str]:
    """Every call of `event` answers Throttling (a real botocore error path); returns the calls made."""
    calls: list[str] = []

    def answer(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        calls.append(event)
        parsed = {
            "Error": {"Code": "Throttling", "Message": "Rate exceeded"},
            "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": {}},
        }
        return AWSResponse(url="https://aws.local/", status_code=400, headers=HTTPHeaders(), raw=None), parsed

    client.meta.events.register(event, answer)
    return calls


def four_orders(clients: ClientFactory) -> tuple[Harness, Worker]:
    """The orders queue, one record at a time and a breaker that opens after two failures, with 4 orders."""
    catalog = catalog_with(ORDERS)
    harness = Harness.provisioned(clients, catalog)
    for n in range(4):
        harness.put_order(f"o{n}")
        harness.send(envelope("order_confirmation", f"o{n}"), queue="orders")
    return harness, harness.worker("orders")


def test_a_throttling_aws_service_opens_its_breaker_and_others_are_untouched(clients: ClientFactory) -> None:
    harness, worker = four_orders(clients)
    sends = throttle(harness.worker_clients("orders")("ses"), "before-call.ses.SendEmail")

    invocation = harness.deliver("orders", worker=worker)

    assert invocation is not None and len(invocation.event["Records"]) == 4
    assert len(sends) == 2  # SES's breaker opened after two throttled sends
    assert len(invocation.failed_ids) == 4  # two retried, two held
    assert {line["downstream"] for line in held_lines(harness)} == {"ses"}
    # Every record still read its order from DynamoDB: another service, another breaker.
    assert {s.downstream: s.state.value for s in worker._breakers.snapshots()} == {"dynamodb": "closed", "ses": "open"}


def test_the_runtimes_own_calls_pass_an_open_breaker_of_the_same_service(clients: ClientFactory) -> None:
    # The job's DynamoDB reads fail and open the "dynamodb" breaker; the idempotency table, on the same client,
    # keeps working, so the records are held (not runtime faults).
    harness, worker = four_orders(clients)
    reads = throttle(harness.worker_clients("orders")("dynamodb"), "before-call.dynamodb.GetItem")

    invocation = harness.deliver("orders", worker=worker)

    assert invocation is not None
    assert len(reads) == 2
    assert len(held_lines(harness)) == 2
    assert not [line for line in harness.log_lines() if line.get("reason") == "runtime_fault"]


# --- the time limit's fence on AWS calls -------------------------------------------------------------------


def test_a_cut_run_can_not_complete_a_side_effect_after_its_cut(clients: ClientFactory, api: FakeInvoicingApi) -> None:
    harness = harness_for(clients, api, FENCED)
    s3 = harness.worker_clients("fenced")("s3")
    release = threading.Event()
    # In flight at the cut: sent, its answer held back until `release` (once sent, only the answer can be refused)
    s3.meta.events.register("before-parse.s3.ListBuckets", lambda **_: release.wait(20) and None)
    harness.send(envelope("two_step", "late"), queue="fenced")
    worker = harness.worker("fenced")

    invocation = harness.deliver("fenced", worker=worker)

    assert invocation is not None and len(invocation.failed_ids) == 1  # cut at its 1 s limit
    release.set()  # the hung call answers, after the cut
    deadline = time.monotonic() + 10
    while worker._runner.cut_runs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker._runner.cut_runs() == []
    objects = harness.clients("s3").list_objects_v2(Bucket=harness.deployment.resources["invoices_bucket"])
    assert objects.get("KeyCount", 0) == 0  # the put after the late answer never happened
    [late] = [line for line in harness.log_lines() if line.get("call") == "s3.ListBuckets"]
    assert (late["id"], late["outcome"]) == ("late", "answered 200")
    [ended] = [line for line in harness.log_lines() if line.get("message") == "run cut at its time limit has ended"]
    assert ended["outcome"] == "TimeLimitInterrupt"


def test_on_a_fifo_queue_a_refusal_is_held_and_on_the_last_receive_dead_lettered_with_its_evidence(
    clients: ClientFactory, api: FakeInvoicingApi
) -> None:
    # A FIFO hand-back is a visibility change: SQS counts the receive, the ledger no run. On the queue's last
    # allowed receive a refusal can't go back (SQS's redrive would move it without evidence): it is dead-lettered.
    # Open long enough that no probe is let through between the two deliveries, however loaded the machine (with
    # 1 s, a loaded machine let the held record probe, and the API saw a second call).
    breaker = replace(BREAKER, failure_threshold=1, open_s=30.0, max_open_s=60.0)
    queue = replace(INVOICES, fifo=True, max_attempts=1, max_receives=2, circuit_breaker=breaker)
    harness = harness_for(clients, api, queue)
    for group, invoice_id in (("a", "INV-A"), ("b", "INV-B")):
        put_invoice(harness, invoice_id)
        harness.send(body(invoice_id), queue="invoices", MessageGroupId=group)
    api.set_mode("503")
    worker = harness.worker("invoices")

    first = harness.deliver("invoices", worker=worker)

    assert first is not None and len(first.event["Records"]) == 2
    assert api_calls(api, ["INV-A", "INV-B"]) == 1
    # Whichever ran first called, failed its only run and opened the breaker; the other was refused and held.
    [called] = harness.dead_letters("invoices")
    assert attributes_of(called)["jobs.error_type"] == "HttpTransientError"
    [held] = held_lines(harness)
    assert key_record(harness, f"generate_invoice:{held['id']}")["runs"] == 0

    harness.expire_visibility(first, "invoices")
    second = harness.deliver("invoices", worker=worker)  # its second receive, the limit: refused again

    assert second is not None and second.failed_ids == []
    [dead] = harness.dead_letters("invoices")
    evidence = attributes_of(dead)
    assert json.loads(dead["Body"])["id"] == held["id"]
    assert evidence["jobs.error_type"] == "ReceivesExhaustedError"
    assert evidence["jobs.failure"] == "receives_exhausted"
    assert "circuit_open" in evidence["jobs.error_message"] and "CircuitOpenError" in evidence["jobs.error_message"]
    assert api_calls(api, ["INV-A", "INV-B"]) == 1


def test_a_call_botocore_retries_after_the_run_was_cut_never_sends_its_retry(clients: ClientFactory) -> None:
    # Given a job's SES send whose first attempt times out (0.5 s) after its run's 0.3 s limit: botocore would
    # retry it by itself, inside the one call the fence checked when it began
    from botocore.exceptions import ReadTimeoutError
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    from sqs_jobs.worker.errors import JobTimeLimitError
    from sqs_jobs.worker.time_limit import JobRun, JobRunner

    clients("ses").verify_email_identity(EmailAddress="jobs@example.com")
    attempts: list[float] = []

    def first_attempt_times_out(request: Any, **_: Any) -> None:
        attempts.append(time.monotonic())
        if len(attempts) == 1:  # its answer never comes (moto, the next handler, is never reached)
            time.sleep(0.5)
            raise ReadTimeoutError(endpoint_url=request.url)

    # Before every other handler of the attempt, moto's included
    clients("ses").meta.events.register_first("before-send.ses.SendEmail", first_attempt_times_out)

    def send() -> None:
        clients("ses").send_email(
            Source="jobs@example.com",
            Destination={"ToAddresses": ["a@example.com"]},
            Message={"Subject": {"Data": "hi"}, "Body": {"Text": {"Data": "hi"}}},
        )

    refused: list[tuple[str, str]] = []
    run = JobRun(
        key="k", limit_s=0.3, target=send, args=(), on_call_after_cut=lambda _, what, how: refused.append((what, how))
    )
    # When the run is cut
    with pytest.raises(JobTimeLimitError):
        JobRunner().run(run)
    run.done.wait(5)
    # Then botocore's retry was refused before it was sent: no mail
    assert len(attempts) == 2
    assert ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].sent_messages == []
    assert ("ses.SendEmail", "refused") in refused


@pytest.mark.slow
def test_a_refused_api_key_is_the_deployments_fault_every_job_waits_unspent_and_runs_once_the_key_works(
    guarded: Harness, api: FakeInvoicingApi
) -> None:
    invoice_ids = [f"INV-{n}" for n in range(6)]
    for invoice_id in invoice_ids:
        put_invoice(guarded, invoice_id)
        guarded.send(body(invoice_id), queue="invoices")
    api.set_mode("401")  # a rotated key: every call would be refused
    worker = guarded.worker("invoices")

    invocation = guarded.deliver("invoices", worker=worker)

    assert invocation is not None and len(invocation.failed_ids) == 6
    # One call met the 401 and opened the host's breaker at once; the other five were never made.
    assert api_calls(api, invoice_ids) == 1
    held = held_lines(guarded)
    assert len(held) == 6 and {line["downstream"] for line in held} == {api.url.rstrip("/")}
    [opened] = [line for line in guarded.log_lines() if line.get("message") == "circuit opened"]
    assert "401" in opened["last_error"]
    # Not one failed run, not one attempt spent: nothing towards the DLQ, the failure-rate or retrying alarms.
    assert not [d for d in guarded.metrics() if "JobFailed" in d or "JobRetried" in d]
    for invoice_id in invoice_ids:
        assert key_record(guarded, f"generate_invoice:{invoice_id}")["runs"] == 0

    api.set_mode("ok")  # the key is fixed
    drain(guarded, "invoices", worker)

    assert api.created_count() == 6
    assert guarded.dead_letters("invoices") == []
