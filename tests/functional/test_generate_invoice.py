"""generate_invoice on moto's mock_aws against the fake invoicing API: the article's incident, step by step.

Each delivery is one poll of the event source emulator (real ReceiveMessage, the Lambda SQS event shape,
deletes of what succeeded), as in tests/functional/conftest.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from example.standins.invoicing import FakeInvoicingApi, render_pdf
from functions.catalog import CATALOG
from functions.catalog import RESOURCES as APP_RESOURCES
from functions.jobs.generate_invoice import pdf_key
from sqs_jobs.local.emulator import Invocation
from sqs_jobs.specs import Catalog
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.backoff import backoff_ceiling_s
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.http import HttpClient
from sqs_jobs.worker.names import DeadLetterFailure
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.runtime import Worker
from sqs_jobs.worker.time_limit import CUT_THREAD_PREFIX
from tests.functional.conftest import Harness, attributes_of, metric_values, narrowed

pytestmark = pytest.mark.timeout(60)

QUEUE = "invoices"
INVOICES = CATALOG.queue(QUEUE)
# The incident at test speed: a 2 s time limit in a 10 s invocation (the shipped job has 60 s in 120 s).
SHORT_LIMIT = replace(
    INVOICES,
    function_timeout_s=10,
    jobs=tuple(replace(job, time_limit_s=2) for job in INVOICES.jobs),
)
SHORT_LIMIT_CATALOG = narrowed(Catalog(resources=APP_RESOURCES, queues=(SHORT_LIMIT,)), QUEUE)
# Only the invoices queue and what its job uses: all these tests touch.
INVOICES_ONLY = narrowed(CATALOG, QUEUE)
# How long a test waits for a run the time limit abandoned (it still holds its HTTP call) to end.
ABANDONED_RUN_GRACE_S = 10.0


def key_of(invoice_id: str) -> str:
    return f"generate_invoice:{invoice_id}"


def body(invoice_id: str) -> str:
    return json.dumps({"job": "generate_invoice", "id": invoice_id})


def cut_run_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith(CUT_THREAD_PREFIX)]


def wait_for_abandoned_runs(timeout_s: float = ABANDONED_RUN_GRACE_S) -> None:
    """Wait until no run cut at its time limit is still going (its thread ends once its call returns), so none
    outlives mock_aws."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = cut_run_threads()
        if not alive:
            return
        for thread in alive:
            thread.join(0.05)


@pytest.fixture
def api(clients: ClientFactory) -> Iterator[FakeInvoicingApi]:
    # Depends on `clients` so that it stops while mock_aws is still active: stopping answers hung requests,
    # and the runs waiting on them then clean up their idempotency records in moto, not in AWS.
    with FakeInvoicingApi() as running:
        yield running
    wait_for_abandoned_runs()


def invoicing_harness(clients: ClientFactory, api_url: str, catalog: Catalog = INVOICES_ONLY) -> Harness:
    return Harness.provisioned(clients, catalog, settings={"invoicing_api_url": api_url})


@pytest.fixture
def invoicing(clients: ClientFactory, api: FakeInvoicingApi) -> Harness:
    return invoicing_harness(clients, api.url)


def put_invoice(
    harness: Harness, invoice_id: str, customer: str = "Aiko", amount: str = "42.00", currency: str = "EUR"
) -> None:
    item = {"invoice_id": {"S": invoice_id}, "amount": {"N": amount}}
    item.update({name: {"S": value} for name, value in (("customer", customer), ("currency", currency)) if value})
    harness.clients("dynamodb").put_item(TableName=harness.deployment.resources["invoices_table"], Item=item)


def stored_pdf(harness: Harness, invoice_id: str) -> dict[str, Any] | None:
    s3 = harness.clients("s3")
    try:
        found = s3.get_object(Bucket=harness.deployment.resources["invoices_bucket"], Key=pdf_key(invoice_id))
    except s3.exceptions.NoSuchKey:
        return None
    return {"body": found["Body"].read(), "content_type": found["ContentType"]}


def deliver(harness: Harness, worker: Worker | None = None) -> Invocation:
    invocation = harness.deliver(QUEUE, worker=worker)
    assert invocation is not None, "nothing was visible on the queue"
    return invocation


def visibility_log(harness: Harness) -> list[int]:
    """Every visibility timeout the runtime sets on the queue (the calls still reach moto)."""
    timeouts: list[int] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        timeouts.append(params["VisibilityTimeout"])

    harness.worker_clients(QUEUE).register("provide-client-params.sqs.ChangeMessageVisibility", record)
    return timeouts


def retry_now(harness: Harness, invocation: Invocation) -> None:
    """Wait out the backoff at once: make the records the invocation left on the queue visible."""
    harness.expire_visibility(invocation, QUEUE)


# --- success ----------------------------------------------------------------------------------------------


def test_the_invoice_is_rendered_by_the_api_and_its_pdf_stored_in_s3(invoicing: Harness, api: FakeInvoicingApi) -> None:
    put_invoice(invoicing, "INV-1", customer="Aiko", amount="42.5", currency="EUR")
    message_id = invoicing.send(body("INV-1"), queue=QUEUE)

    invocation = deliver(invoicing)

    assert invocation.failed_ids == [] and invocation.deleted == [message_id]
    stored = stored_pdf(invoicing, "INV-1")
    assert stored is not None
    assert stored["content_type"] == "application/pdf"
    # Exactly what the API rendered from the invoice as it is in the table now.
    assert stored["body"] == render_pdf("INV-1", "Aiko", "42.5", "EUR")
    # One request, carrying the job's key as Idempotency-Key.
    assert api.stats()["requests"] == {key_of("INV-1"): 1}
    assert api.created_count() == 1
    [done] = [line for line in invoicing.log_lines() if line.get("message") == "invoice stored"]
    assert (done["s3_key"], done["bytes"]) == ("invoices/INV-1.pdf", len(stored["body"]))
    assert invoicing.dead_letters(QUEUE) == []


def test_a_redelivered_job_is_a_duplicate_and_never_calls_the_api_again(
    invoicing: Harness, api: FakeInvoicingApi
) -> None:
    put_invoice(invoicing, "INV-1")
    invoicing.send(body("INV-1"), queue=QUEUE)
    deliver(invoicing)
    invoicing.send(body("INV-1"), queue=QUEUE)  # a second publish of the same invoice

    assert deliver(invoicing).failed_ids == []

    assert api.requests_for(key_of("INV-1")) == 1
    assert any(line.get("message") == "duplicate skipped" for line in invoicing.log_lines())


# --- permanent failures: dead-lettered after one attempt ----------------------------------------------------


def test_a_missing_invoice_is_dead_lettered_after_one_attempt(invoicing: Harness, api: FakeInvoicingApi) -> None:
    invoicing.send(body("INV-404"), queue=QUEUE)

    invocation = deliver(invoicing)

    assert invocation.failed_ids == []  # acknowledged: dead-lettered, not retried
    [dead] = invoicing.dead_letters(QUEUE)
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == "InvoiceNotFoundError"
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.PERMANENT
    assert evidence[deadletter.ATTEMPTS] == "1"
    assert "INV-404" in evidence[deadletter.ERROR_MESSAGE]
    assert dead["Body"] == body("INV-404")
    assert api.stats()["requests"] == {}  # never called the API
    assert invoicing.queue_counts(QUEUE) == (0, 0)


def test_an_invoice_the_api_rejects_is_dead_lettered_after_one_attempt(
    invoicing: Harness, api: FakeInvoicingApi
) -> None:
    put_invoice(invoicing, "INV-1")
    api.set_mode("422")
    invoicing.send(body("INV-1"), queue=QUEUE)

    invocation = deliver(invoicing)

    assert invocation.failed_ids == []
    [dead] = invoicing.dead_letters(QUEUE)
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == "HttpPermanentError"
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.PERMANENT
    assert evidence[deadletter.ATTEMPTS] == "1"
    assert "answered 422" in evidence[deadletter.ERROR_MESSAGE]
    # The status and what the API said, for the operator to group and decide by.
    assert evidence[deadletter.HTTP].startswith("422 ")
    assert len(evidence[deadletter.HTTP]) > len("422 ")
    assert api.created_count() == 0
    assert stored_pdf(invoicing, "INV-1") is None


def test_an_invoice_without_a_currency_is_dead_lettered_without_calling_the_api(
    invoicing: Harness, api: FakeInvoicingApi
) -> None:
    put_invoice(invoicing, "INV-1", currency="")
    invoicing.send(body("INV-1"), queue=QUEUE)

    deliver(invoicing)

    [dead] = invoicing.dead_letters(QUEUE)
    assert attributes_of(dead)[deadletter.ERROR_TYPE] == "InvoiceDataError"
    assert "no valid currency" in attributes_of(dead)[deadletter.ERROR_MESSAGE]
    assert api.stats()["requests"] == {}


@pytest.fixture
def not_a_pdf_api() -> Iterator[str]:
    """An API that answers 200 with an HTML page (a proxy's error page, a misrouted URL)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            page = b"<html>maintenance</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_success_that_is_not_a_pdf_is_dead_lettered(clients: ClientFactory, not_a_pdf_api: str) -> None:
    harness = invoicing_harness(clients, not_a_pdf_api)
    put_invoice(harness, "INV-1")
    harness.send(body("INV-1"), queue=QUEUE)

    deliver(harness)

    [dead] = harness.dead_letters(QUEUE)
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == "InvoicingResponseError"
    assert "answered 200 with text/html (24 bytes), not a PDF" in evidence[deadletter.ERROR_MESSAGE]
    assert stored_pdf(harness, "INV-1") is None


# --- transient failures: retried with backoff, created once -------------------------------------------------


@pytest.mark.slow
def test_an_outage_is_retried_and_the_api_creates_the_invoice_once(invoicing: Harness, api: FakeInvoicingApi) -> None:
    put_invoice(invoicing, "INV-1")
    api.set_mode("503")  # with Retry-After: 1
    message_id = invoicing.send(body("INV-1"), queue=QUEUE)
    delays = visibility_log(invoicing)

    first = deliver(invoicing)

    assert first.failed_ids == [message_id]  # reported failed: SQS redelivers it
    assert invoicing.queue_counts(QUEUE) == (0, 1)  # invisible for its backoff
    # The runtime set the backoff as the visibility: full jitter under attempt 1's ceiling, raised to at
    # least the API's Retry-After.
    assert 1 <= delays[0] <= backoff_ceiling_s(1, INVOICES.backoff_base_s, INVOICES.backoff_cap_s)
    retry_now(invoicing, first)
    second = deliver(invoicing)  # still down
    assert second.failed_ids == [message_id]
    assert stored_pdf(invoicing, "INV-1") is None

    api.set_mode("ok")  # the API is back
    retry_now(invoicing, second)
    third = deliver(invoicing)

    assert third.failed_ids == [] and third.deleted == [message_id]
    assert stored_pdf(invoicing, "INV-1") is not None
    assert api.requests_for(key_of("INV-1")) == 3  # the job ran three times, each with the same key...
    assert api.created_count() == 1  # ...and one invoice exists
    assert invoicing.dead_letters(QUEUE) == []
    failures = [line for line in invoicing.log_lines() if line.get("error_type") == "HttpTransientError"]
    assert [(line["attempt"], line["classification"]) for line in failures] == [(1, "transient"), (2, "transient")]


def test_throttling_is_retried_like_an_outage(invoicing: Harness, api: FakeInvoicingApi) -> None:
    put_invoice(invoicing, "INV-1")
    api.set_mode("429")
    message_id = invoicing.send(body("INV-1"), queue=QUEUE)

    assert deliver(invoicing).failed_ids == [message_id]
    assert invoicing.dead_letters(QUEUE) == []


def test_a_lost_answer_is_retried_with_the_same_key_and_creates_nothing_new(
    invoicing: Harness, api: FakeInvoicingApi
) -> None:
    # The API creates the invoice, then answers after the client's read timeout: the job can't know it worked.
    put_invoice(invoicing, "INV-1")
    api.set_mode("slow", delay_s=1.5)
    worker = Worker(
        settings=invoicing.deployment.worker_settings(QUEUE),
        clients=invoicing.worker_clients(QUEUE),
        observability=Observability.create(output=invoicing.output),
        http_client=HttpClient(read_timeout_s=0.3),
    )
    message_id = invoicing.send(body("INV-1"), queue=QUEUE)

    first = deliver(invoicing, worker=worker)

    assert first.failed_ids == [message_id]
    assert api.created_count() == 1  # created, but the answer was lost
    api.set_mode("ok")
    retry_now(invoicing, first)
    again = deliver(invoicing, worker=worker)

    assert again.failed_ids == []
    assert api.requests_for(key_of("INV-1")) == 2
    assert api.created_count() == 1  # the retry got the same invoice back: no second invoice
    stored = stored_pdf(invoicing, "INV-1")
    assert stored is not None and b"INV-1" in stored["body"]


# --- the incident: one hanging call ------------------------------------------------------------------------


@pytest.mark.slow
def test_one_hanging_invoice_is_cut_at_its_time_limit_while_the_rest_of_the_batch_succeeds(
    clients: ClientFactory, api: FakeInvoicingApi
) -> None:
    harness = invoicing_harness(clients, api.url, SHORT_LIMIT_CATALOG)
    invoice_ids = ["INV-1", "INV-2", "INV-HANG", "INV-3", "INV-4"]
    for invoice_id in invoice_ids:
        put_invoice(harness, invoice_id)
        harness.send(body(invoice_id), queue=QUEUE)
    api.set_mode("hang", only_ids=["INV-HANG"])
    started = time.monotonic()

    invocation = deliver(harness)

    elapsed = time.monotonic() - started
    assert len(invocation.event["Records"]) == len(invoice_ids)  # one batch, as Lambda would send it
    hung = [r["messageId"] for r in invocation.event["Records"] if json.loads(r["body"])["id"] == "INV-HANG"]
    # Cut after its 2 s limit, not after the HTTP client's 30 s read timeout, nor never.
    assert 2 <= elapsed < SHORT_LIMIT.function_timeout_s
    assert not invocation.timed_out
    assert invocation.failed_ids == hung  # retried later: not lost, not dead-lettered
    for invoice_id in invoice_ids:
        assert (stored_pdf(harness, invoice_id) is None) is (invoice_id == "INV-HANG")
    assert harness.dead_letters(QUEUE) == []
    assert harness.queue_counts(QUEUE) == (0, 1)
    [cut] = [line for line in harness.log_lines() if line.get("error_type") == "JobTimeLimitError"]
    assert (cut["id"], cut["attempt"], cut["classification"]) == ("INV-HANG", 1, "transient")
    # The cut run's thread still waits in its HTTP read (a socket read can't be interrupted in a thread), fenced.
    assert len(cut_run_threads()) == 1

    # The API recovers and answers the hung request: the cut run's answer is refused (it may not store the PDF
    # after its record was settled) and said, and its thread ends.
    api.set_mode("ok")
    wait_for_abandoned_runs()
    assert cut_run_threads() == []
    [late] = [line for line in harness.log_lines() if line.get("outcome") == "answered" and "call" in line]
    assert (late["id"], late["call"]) == ("INV-HANG", f"POST {api.url.rstrip('/')}")
    assert stored_pdf(harness, "INV-HANG") is None

    # The cut run's key was released when it was cut, so the retry calls the API again - with the same
    # Idempotency-Key, so the API returns the invoice the hung request had created instead of a second one.
    retry_now(harness, invocation)
    retry = deliver(harness)

    assert retry.failed_ids == []
    assert stored_pdf(harness, "INV-HANG") is not None
    assert api.requests_for(key_of("INV-HANG")) == 2
    assert api.created_count() == len(invoice_ids)
    assert harness.queue_counts(QUEUE) == (0, 0)


@pytest.mark.slow
def test_a_retry_in_the_same_worker_runs_beside_its_fenced_cut_run_and_the_key_keeps_one_invoice(
    clients: ClientFactory, api: FakeInvoicingApi
) -> None:
    # A cut run blocked in its HTTP call is still alive, and fenced. The retry does not wait for it (a thread
    # that never ends would hold the record for ever): it runs, and the API's Idempotency-Key keeps one invoice.
    harness = invoicing_harness(clients, api.url, SHORT_LIMIT_CATALOG)
    put_invoice(harness, "INV-HANG")
    api.set_mode("hang")
    message_id = harness.send(body("INV-HANG"), queue=QUEUE)
    worker = harness.worker(QUEUE)
    first = deliver(harness, worker=worker)
    assert first.failed_ids == [message_id]
    assert api.waiting == 1  # the cut run's call still waits on the API
    retry_now(harness, first)

    second = deliver(harness, worker=worker)

    assert second.failed_ids == [message_id]  # ran, hung too, cut at its limit: attempt 2 spent
    assert api.requests_for(key_of("INV-HANG")) == 2
    cuts = [line for line in harness.log_lines() if line.get("error_type") == "JobTimeLimitError"]
    assert [line["attempt"] for line in cuts] == [1, 2]
    assert len(worker._runner.cut_runs()) == 2
    # Durations are of the runs' own code: each cut at its 2 s limit (measured from the job thread's start, which
    # a loaded machine may begin a few tens of milliseconds after the waiter starts counting).
    durations = [
        value
        for doc in harness.metrics()
        if doc.get("job") == "generate_invoice" and "JobDuration" in doc
        for value in metric_values(doc, "JobDuration")
    ]
    assert len(durations) == 2 and all(1900 <= value < 3000 for value in durations)

    api.set_mode("ok")  # both hung calls are answered now; neither cut run may store the PDF
    wait_for_abandoned_runs()
    assert stored_pdf(harness, "INV-HANG") is None
    retry_now(harness, second)
    # The next run succeeds (on a machine loaded enough to push a run past its 2 s limit, a later one does).
    for _ in range(3):
        third = deliver(harness, worker=worker)
        if not third.failed_ids:
            break
        retry_now(harness, third)
    assert third.failed_ids == []
    assert stored_pdf(harness, "INV-HANG") is not None
    assert api.created_count() == 1
