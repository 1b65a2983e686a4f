"""A service reads how its jobs stand and what they returned (JobPublisher.result, sqs_jobs.results): from the
key's record, by the codec the worker writes it with; through the stack's parameter, as a deployed service does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sqs_jobs.cli.console.app import create_app
from sqs_jobs.cli.console.security import Guard
from sqs_jobs.cli.dlq import DeadLetterQueue
from sqs_jobs.cli.job_lookup import JobLookup, find_job
from sqs_jobs.contract import UnknownContractJobError
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.results import RESULT_ATTRIBUTES, JobResults, JobState, ResultsNotConfiguredError
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.provenance import Provenance
from sqs_jobs.worker.settings import idempotency_record_id
from tests.functional.conftest import Harness
from tests.functional.console_support import JobPageBackend
from tests.functional.sample_jobs import flaky, odd_result

QUEUE = QueueSpec(
    name="mail",
    max_attempts=2,
    backoff_base_s=1,
    backoff_cap_s=1,
    jobs=(
        JobSpec(name="odd_result", handler="tests.functional.sample_jobs.odd_result"),
        JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky"),
        JobSpec(name="strict", handler="tests.functional.sample_jobs.strict"),
    ),
)
CATALOG = Catalog(queues=(QUEUE,))


@pytest.fixture
def mail(clients: ClientFactory) -> Iterator[Harness]:
    odd_result.SIDE_EFFECTS.clear()
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    yield Harness.provisioned(clients, CATALOG)


def _service(harness: Harness) -> JobPublisher:
    """A publisher as a service builds it from the stack's parameters, reading results."""
    return JobPublisher.from_stack(
        harness.clients("ssm"),
        harness.clients("sqs"),
        stack_name=harness.deployment.stack_name,
        results_client=harness.clients("dynamodb"),
    )


def test_a_succeeded_job_reads_back_what_it_returned(mail: Harness) -> None:
    service = _service(mail)
    service.publish("odd_result", "string-1")
    assert service.result("odd_result", "string-1").state is JobState.PENDING

    assert (invocation := mail.deliver("mail")) is not None and invocation.failed_ids == []

    result = service.result("odd_result", "string-1")
    assert (result.state, result.value, result.runs, result.done) == (
        JobState.SUCCEEDED,
        "0100018c-ses-message-id",
        1,
        True,
    )
    assert result.key == "odd_result:string-1" and result.remembered_until is not None
    dated = service.publish("odd_result", "datetime-1")
    assert dated is not None and mail.deliver("mail") is not None
    assert set(service.result("odd_result", "datetime-1").value) == {"sent_at"}


def test_a_retrying_job_says_its_last_error_then_dead_once_dead_lettered(mail: Harness) -> None:
    service = _service(mail)
    flaky.FAILURES["f-1"] = 5  # more than its two runs
    service.publish("flaky", "f-1")
    first = mail.deliver("mail")
    assert first is not None and first.failed_ids

    retrying = service.result("flaky", "f-1")
    assert (retrying.state, retrying.runs, retrying.done) == (JobState.RETRYING, 1, False)
    assert retrying.error_type and retrying.value is None

    mail.expire_visibility(first, "mail")
    assert mail.deliver("mail") is not None
    dead = service.result("flaky", "f-1")
    assert (dead.state, dead.error_type, dead.done) == (JobState.DEAD, retrying.error_type, True)


def test_a_permanent_failure_is_dead_with_its_error(mail: Harness) -> None:
    service = _service(mail)
    service.publish("strict", "not-a-number")
    assert mail.deliver("mail") is not None

    dead = service.result("strict", "not-a-number")

    assert (dead.state, dead.error_type) == (JobState.DEAD, "ValueError")
    assert dead.error is not None and "not-a-number" in dead.error


def test_waiting_returns_as_soon_as_the_job_is_done_and_says_so_when_it_is_not(mail: Harness) -> None:
    slept: list[float] = []
    reader = JobResults(
        mail.clients("dynamodb"),
        mail.deployment.idempotency_table,
        sleep=slept.append,
        monotonic=lambda: sum(slept),  # time passes as the reader sleeps
    )
    mail.publish("odd_result", "string-2")

    pending = reader.read("odd_result", "string-2", wait_s=1.0)

    assert (pending.state, pending.done) == (JobState.PENDING, False)
    # It backed off (0.1 s, doubling) and stopped at the wait's end.
    assert slept[:3] == [0.1, 0.2, 0.4] and sum(slept) == pytest.approx(1.0)
    assert mail.deliver("mail") is not None
    slept.clear()
    assert reader.read("odd_result", "string-2", wait_s=60).state is JobState.SUCCEEDED
    assert slept == []  # done at the first read: no wait


def test_a_record_past_its_expiry_reads_expired_and_so_does_a_job_whose_record_ttl_deleted(mail: Harness) -> None:
    service = _service(mail)
    service.publish("odd_result", "string-3")
    assert mail.deliver("mail") is not None
    mail.clients("dynamodb").update_item(
        TableName=mail.deployment.idempotency_table,
        Key={"id": {"S": idempotency_record_id("odd_result:string-3")}},
        UpdateExpression="SET expiration = :past",
        ExpressionAttributeValues={":past": {"N": str(int(time.time()) - 1)}},
    )

    assert service.result("odd_result", "string-3").state is JobState.EXPIRED
    # No record at all: pending, unless it was published longer ago than its queue keeps records.
    long_ago = datetime.now(UTC) - timedelta(seconds=QUEUE.idempotency_expiry_s + 60)
    assert service.result("odd_result", "never-ran", published_at=long_ago).state is JobState.EXPIRED
    assert service.result("odd_result", "never-ran", published_at=datetime.now(UTC)).state is JobState.PENDING


def test_a_custom_key_and_a_tenant_read_the_key_the_worker_ran_under(mail: Harness) -> None:
    service = _service(mail)
    service.publish("odd_result", "string-4", key="order-17")
    service.publish("odd_result", "string-5", tenant="acme")
    assert mail.deliver("mail") is not None

    assert service.result("odd_result", "string-4", key="order-17").state is JobState.SUCCEEDED
    assert service.result("odd_result", "string-4").state is JobState.PENDING  # not its key
    assert service.result("odd_result", "string-5", tenant="acme").value == "0100018c-ses-message-id"


def test_a_read_asks_for_the_results_attributes_only_of_a_key_record_only(mail: Harness) -> None:
    """What the CDK grant allows (dynamodb:LeadingKeys jobs#*, dynamodb:Attributes, Select SPECIFIC_ATTRIBUTES):
    every request the reader makes must be one that grant lets through (tests/infra checks the grant itself)."""
    requests: list[dict[str, Any]] = []
    dynamodb = mail.clients("dynamodb")
    dynamodb.meta.events.register("provide-client-params.dynamodb.*", lambda params, **_: requests.append(params))
    mail.publish("odd_result", "string-6")
    assert mail.deliver("mail") is not None

    JobResults(dynamodb, mail.deployment.idempotency_table).read("odd_result", "string-6")

    [request] = requests
    assert request["Key"]["id"]["S"].startswith("jobs#")
    asked = {request["ExpressionAttributeNames"][name.strip()] for name in request["ProjectionExpression"].split(",")}
    assert asked <= set(RESULT_ATTRIBUTES) and "data" in asked
    assert request["ConsistentRead"] is True and "Select" not in request


def test_a_publisher_without_a_reader_or_an_unknown_job_is_told_so(mail: Harness) -> None:
    with pytest.raises(ResultsNotConfiguredError, match="results_client"):
        JobPublisher(mail.clients("sqs"), {}, catalog=CATALOG).result("odd_result", "1")
    with pytest.raises(UnknownContractJobError, match="no_such_job"):
        _service(mail).result("no_such_job", "1")


def _lookup(harness: Harness, job: str, entity_id: str) -> JobLookup:
    """`jobctl job show`'s lookup of the job on the mail queue."""
    local = harness.deployment.queues["mail"]
    dead = DeadLetterQueue(
        harness.clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
    )
    return find_job(
        spec=QUEUE,
        job=job,
        entity_id=entity_id,
        key=None,
        dynamodb=harness.clients("dynamodb"),
        table=harness.deployment.idempotency_table,
        dead_letter_queue=dead,
    )


def test_job_show_says_the_state_and_result_a_service_reads(mail: Harness) -> None:
    mail.publish("odd_result", "string-7")
    assert mail.deliver("mail") is not None

    shown = _lookup(mail, "odd_result", "string-7").to_dict()

    assert (shown["state"], shown["result"]) == ("succeeded", "0100018c-ses-message-id")


def test_the_consoles_job_page_shows_the_state_and_the_result_as_text(mail: Harness, tmp_path: Path) -> None:
    mail.publish("odd_result", "datetime-9")
    assert mail.deliver("mail") is not None
    guard = Guard(host="127.0.0.1", port=8000)
    backend = JobPageBackend(CATALOG, lambda job, entity_id, key: _lookup(mail, job, entity_id))
    app = create_app(backend, guard, tmp_path)  # type: ignore[arg-type]

    page = app.test_client().get(
        f"/jobs?job=odd_result&id=datetime-9&token={guard.access_token}",
        base_url="http://127.0.0.1:8000",
        follow_redirects=True,
    )

    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert '<dd class="job-state">succeeded</dd>' in text
    assert '<pre class="job-result">' in text and "sent_at" in text


@pytest.mark.parametrize(("job_id", "key"), [(None, None), (5, None), ("", None), ("  ", None), ("ok", "")])
def test_an_id_or_key_no_job_could_have_is_refused_not_read_as_pending(mail: Harness, job_id: Any, key: Any) -> None:
    from sqs_jobs.errors import EnvelopeFieldError

    with pytest.raises(EnvelopeFieldError, match=r"must be a string|is empty"):
        _service(mail).result("flaky", job_id, key, wait=20)  # refused at once, not after 20 s of "pending"
