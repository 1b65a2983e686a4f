"""The worker on real SQS semantics (moto): success, duplicates, permanent and transient failures, evidence."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer, IdempotencyConfig

from functions.catalog import CATALOG
from sqs_jobs.catalog_ref import ENV_CATALOG
from sqs_jobs.local.lambda_events import sqs_record
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker import deadletter, entry
from sqs_jobs.worker.clients import ClientFactory, new_session
from sqs_jobs.worker.errors import WorkerConfigError
from sqs_jobs.worker.names import RUNTIME_JOB, DeadLetterFailure
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.provenance import ORIGINAL_ATTRIBUTES, MessageAttributes, unpack
from sqs_jobs.worker.runtime import Worker
from sqs_jobs.worker.settings import IDEMPOTENCY_KEY_PREFIX
from tests.functional.conftest import Harness, attributes_of, envelope, lambda_context, narrowed
from tests.functional.sample_jobs import empty_key, flaky

EVENTS = Path(__file__).parent.parent / "events"
EVIDENCE_ATTRIBUTES = {
    deadletter.ERROR_TYPE,
    deadletter.ERROR_MESSAGE,
    deadletter.TRACEBACK,
    deadletter.FAILURE,
    deadletter.ATTEMPTS,
    deadletter.FIRST_FAILED_AT,
    deadletter.LAST_FAILED_AT,
    deadletter.SOURCE_QUEUE,
    deadletter.JOB,
    deadletter.ID,
}

TEST_CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="testing",
            max_attempts=3,
            jobs=(
                JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky"),
                JobSpec(name="empty_key", handler="tests.functional.sample_jobs.empty_key"),
            ),
        ),
    ),
)


# Only what these tests use: a fraction of the whole catalog's provisioning, per test.
@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, narrowed(CATALOG, "orders"))


@pytest.fixture
def testing(clients: ClientFactory) -> Iterator[Harness]:
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    flaky.ATTEMPTS_SEEN.clear()
    empty_key.RUNS.clear()
    yield Harness.provisioned(clients, TEST_CATALOG)


def test_confirmation_mail_is_sent_and_the_message_deleted(harness: Harness) -> None:
    # Given an order and its job on the queue
    harness.put_order("1001", email="aiko@example.com", customer_name="Aiko")
    harness.send(envelope("order_confirmation", "1001"))
    # When the event source delivers it
    invocation = harness.deliver()
    # Then one mail went out, the record succeeded and SQS no longer holds it
    assert invocation is not None
    assert invocation.failed_ids == []
    assert harness.mails_to("aiko@example.com") == 1
    assert harness.queue_counts() == (0, 0)
    assert harness.queue_counts(dead_letter=True) == (0, 0)


def test_same_order_published_twice_sends_one_mail(harness: Harness) -> None:
    harness.put_order("1001", email="aiko@example.com")
    harness.send(envelope("order_confirmation", "1001"))
    harness.send(envelope("order_confirmation", "1001"))
    harness.deliver()
    harness.deliver()
    assert harness.mails_to("aiko@example.com") == 1
    assert harness.queue_counts() == (0, 0)
    outcomes = [line.get("message") for line in harness.log_lines() if line.get("job") == "order_confirmation"]
    assert outcomes.count("job done") == 1
    assert outcomes.count("duplicate skipped") == 1


def test_redriven_copy_with_a_new_message_id_does_not_repeat_the_side_effect(harness: Harness) -> None:
    # A redrive sends the same body as a new message (new messageId): the business key still matches.
    harness.put_order("1001", email="aiko@example.com")
    first_id = harness.send(envelope("order_confirmation", "1001"))
    harness.deliver()
    second_id = harness.send(envelope("order_confirmation", "1001"))
    assert second_id != first_id
    invocation = harness.deliver()
    assert invocation is not None and invocation.failed_ids == []
    assert harness.mails_to("aiko@example.com") == 1


def test_idempotency_record_outlives_the_dlq_retention(harness: Harness) -> None:
    harness.put_order("1001")
    harness.send(envelope("order_confirmation", "1001"))
    before = int(time.time())
    harness.deliver()
    table = harness.deployment.idempotency_table
    items = harness.clients("dynamodb").scan(TableName=table)["Items"]
    assert len(items) == 1
    record = items[0]
    assert record["status"]["S"] == "COMPLETED"
    assert record["id"]["S"].startswith(f"{IDEMPOTENCY_KEY_PREFIX}#")
    dlq_retention = harness.deployment.queues["orders"].spec.dlq_retention_s
    assert int(record["expiration"]["N"]) > before + dlq_retention


def test_missing_order_is_dead_lettered_after_one_attempt_with_evidence(harness: Harness) -> None:
    body = envelope("order_confirmation", "9999")
    harness.send(body)
    invocation = harness.deliver()
    assert invocation is not None and invocation.failed_ids == []
    assert harness.queue_counts() == (0, 0)
    [dead] = harness.dead_letters()
    assert dead["Body"] == body
    evidence = attributes_of(dead)
    assert set(evidence) == EVIDENCE_ATTRIBUTES
    assert evidence[deadletter.ERROR_TYPE] == "OrderNotFoundError"
    assert "9999" in evidence[deadletter.ERROR_MESSAGE]
    assert "OrderNotFoundError" in evidence[deadletter.TRACEBACK]
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.PERMANENT
    assert evidence[deadletter.ATTEMPTS] == "1"
    assert evidence[deadletter.SOURCE_QUEUE] == harness.deployment.queues["orders"].arn
    assert evidence[deadletter.JOB] == "order_confirmation"
    assert evidence[deadletter.ID] == "9999"
    assert evidence[deadletter.FIRST_FAILED_AT] <= evidence[deadletter.LAST_FAILED_AT]
    assert harness.mails_to("buyer@example.com") == 0


def test_a_producers_attributes_are_kept_whole_even_when_named_like_evidence(harness: Harness) -> None:
    # A producer may set any attribute, `jobs.*` too: it is its data, never the runtime's evidence.
    body = envelope("order_confirmation", "9999")
    harness.send(
        body,
        MessageAttributes={
            "tenant": {"DataType": "String", "StringValue": "acme"},
            deadletter.ERROR_TYPE: {"DataType": "String", "StringValue": "ForgedError"},
        },
    )
    harness.deliver()
    [dead] = harness.dead_letters()
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == "OrderNotFoundError"
    assert unpack(dead["MessageAttributes"][ORIGINAL_ATTRIBUTES]["BinaryValue"]) == {
        "tenant": {"DataType": "String", "StringValue": "acme"},
        deadletter.ERROR_TYPE: {"DataType": "String", "StringValue": "ForgedError"},
    }
    assert len(dead["MessageAttributes"]) <= 10  # SQS's limit on message attributes
    assert deadletter.JOB not in evidence  # in the body; its slot carries the originals


def test_a_dead_letter_redriven_as_is_has_its_old_evidence_replaced_and_its_producers_attributes_kept(
    harness: Harness,
) -> None:
    # SQS's own redrive moves a dead letter back whole: the runtime's evidence (sent by the worker's role) and
    # the producer's attributes packed beside it. On its next failure the old evidence is replaced, and the
    # producer's attributes are unpacked and packed again, not nested.
    dead_letters = deadletter.DeadLetterQueue(
        harness.worker_clients("orders")("sqs"), harness.deployment.queues["orders"].url
    )
    dead_letters.send(
        envelope("order_confirmation", "9999"),
        deadletter.Evidence(
            error_type="OldError",
            error_message="old",
            traceback="",
            failure=DeadLetterFailure.PERMANENT,
            attempts=3,
            first_failed_at="",
            last_failed_at="",
            source_queue="",
            envelope=None,
        ),
        {},
        MessageAttributes.split({"tenant": {"DataType": "String", "StringValue": "acme"}}, sent_by_runtime=False),
    )
    harness.deliver()
    [dead] = harness.dead_letters()
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == "OrderNotFoundError"
    assert evidence[deadletter.ATTEMPTS] == "1"
    assert unpack(dead["MessageAttributes"][ORIGINAL_ATTRIBUTES]["BinaryValue"]) == {
        "tenant": {"DataType": "String", "StringValue": "acme"}
    }


@pytest.mark.parametrize(
    ("body", "error_type"),
    [
        ("not json at all", "EnvelopeNotJSONError"),
        ('["order_confirmation", "1001"]', "EnvelopeNotObjectError"),
        ("null", "EnvelopeNotObjectError"),
        ('{"id": "1001"}', "EnvelopeFieldError"),
        ('{"job": "order_confirmation", "id": ""}', "EnvelopeFieldError"),
        ('{"job": "order_confirmation", "id": 1001}', "EnvelopeFieldError"),
        ('{"job": "send_fax", "id": "1001"}', "UnknownJobError"),
        (json.dumps({"job": "order_confirmation", "id": "1", "note": "x" * 1100}), "EnvelopeTooLargeError"),
        ('{"job": "order_confirmation", "id": "1", "id": "2"}', "EnvelopeFieldError"),
    ],
)
def test_bad_envelopes_are_dead_lettered_while_good_records_of_the_batch_succeed(
    harness: Harness, body: str, error_type: str
) -> None:
    harness.put_order("1001", email="aiko@example.com")
    harness.send(envelope("order_confirmation", "1001"))
    harness.send(body)
    invocation = harness.deliver()
    assert invocation is not None
    assert len(invocation.event["Records"]) == 2
    assert invocation.failed_ids == []
    assert not invocation.raised
    assert harness.mails_to("aiko@example.com") == 1
    [dead] = harness.dead_letters()
    assert dead["Body"] == body
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == error_type
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.PERMANENT
    assert deadletter.JOB not in evidence  # an unparseable envelope names no job


def test_transient_failure_is_retried_then_dead_lettered_on_the_last_attempt(testing: Harness) -> None:
    flaky.FAILURES["42"] = 99  # never recovers
    body = envelope("flaky", "42")
    testing.send(body, queue="testing")
    max_attempts = TEST_CATALOG.queue("testing").max_attempts
    for attempt in range(1, max_attempts):
        invocation = testing.deliver("testing")
        assert invocation is not None
        assert len(invocation.failed_ids) == 1, f"attempt {attempt} should be reported failed"
        assert testing.queue_counts("testing") == (0, 1)  # still on the queue, in flight
        testing.expire_visibility(invocation, "testing")
    last = testing.deliver("testing")
    assert last is not None and last.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == list(range(1, max_attempts + 1))
    assert testing.queue_counts("testing") == (0, 0)
    [dead] = testing.dead_letters("testing")
    evidence = attributes_of(dead)
    assert dead["Body"] == body
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.RETRIES_EXHAUSTED
    assert evidence[deadletter.ERROR_TYPE] == "ConnectionRefusedError"
    assert evidence[deadletter.ATTEMPTS] == str(max_attempts)
    assert flaky.SIDE_EFFECTS["42"] == 0


def test_job_that_recovers_after_two_transient_failures_has_its_side_effect_once(testing: Harness) -> None:
    flaky.FAILURES["7"] = 2
    testing.send(envelope("flaky", "7"), queue="testing")
    for _ in range(2):
        invocation = testing.deliver("testing")
        assert invocation is not None and len(invocation.failed_ids) == 1
        testing.expire_visibility(invocation, "testing")
    done = testing.deliver("testing")
    assert done is not None and done.failed_ids == []
    # A late duplicate delivery of the same job changes nothing.
    testing.send(envelope("flaky", "7"), queue="testing")
    testing.deliver("testing")
    assert flaky.SIDE_EFFECTS["7"] == 1
    assert testing.dead_letters("testing") == []


def test_permanent_error_raised_by_a_job_goes_to_the_dlq_at_once(testing: Harness) -> None:
    testing.send(envelope("flaky", "reject-1"), queue="testing")
    invocation = testing.deliver("testing")
    assert invocation is not None and invocation.failed_ids == []
    [dead] = testing.dead_letters("testing")
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == "RejectedByDownstreamError"
    assert evidence[deadletter.ATTEMPTS] == "1"


def test_every_record_failing_still_returns_a_partial_response(testing: Harness) -> None:
    for entity_id in ("a", "b", "c"):
        flaky.FAILURES[entity_id] = 1
        testing.send(envelope("flaky", entity_id), queue="testing")
    invocation = testing.deliver("testing")
    assert invocation is not None
    assert not invocation.raised
    assert sorted(invocation.failed_ids) == sorted(r["messageId"] for r in invocation.event["Records"])


def test_empty_job_defined_key_is_refused_not_hashed(testing: Harness) -> None:
    testing.send(envelope("empty_key", "1"), queue="testing")
    testing.deliver("testing")
    assert empty_key.RUNS == []
    [dead] = testing.dead_letters("testing")
    assert attributes_of(dead)[deadletter.ERROR_TYPE] == "IdempotencyKeyError"


def test_job_defined_key_is_used(testing: Harness) -> None:
    testing.send(json.dumps({"job": "empty_key", "id": "1", "tenant": "t-1"}), queue="testing")
    testing.send(json.dumps({"job": "empty_key", "id": "2", "tenant": "t-1"}), queue="testing")
    testing.deliver("testing")
    testing.deliver("testing")
    # Same key "t-1": one of the two runs, the other is its duplicate (side by side in one batch, either may win).
    assert len(empty_key.RUNS) == 1 and empty_key.RUNS[0] in {"1", "2"}


def test_a_publisher_key_belongs_to_its_job_so_two_jobs_sharing_it_both_run(testing: Harness) -> None:
    testing.send(json.dumps({"job": "flaky", "id": "9", "key": "shared"}), queue="testing")
    testing.send(json.dumps({"job": "empty_key", "id": "2", "key": "shared"}), queue="testing")
    testing.deliver("testing")
    assert flaky.SIDE_EFFECTS["9"] == 1
    assert empty_key.RUNS == ["2"]


def test_publisher_key_overrides_the_default(testing: Harness) -> None:
    testing.send(json.dumps({"job": "flaky", "id": "9", "key": "k-1"}), queue="testing")
    testing.send(json.dumps({"job": "flaky", "id": "10", "key": "k-1"}), queue="testing")
    testing.deliver("testing")
    testing.deliver("testing")
    assert sum(flaky.SIDE_EFFECTS.values()) == 1


@pytest.mark.slow
def test_job_in_progress_elsewhere_is_handed_back_for_later_not_run_and_not_counted(testing: Harness) -> None:
    # Given another worker holds the in-progress record of the same business key
    persistence = DynamoDBPersistenceLayer(
        table_name=testing.deployment.idempotency_table, boto3_client=testing.clients("dynamodb")
    )
    persistence.configure(IdempotencyConfig(event_key_jmespath="key"), key_prefix=IDEMPOTENCY_KEY_PREFIX)
    persistence.save_inprogress(data={"key": "flaky:5"}, remaining_time_in_millis=60_000)
    # When this worker receives it, it waits briefly for the twin, then neither runs it nor dead-letters it: the
    # message goes back, visible again after a backoff, and no run of the key is counted
    message_id = testing.send(envelope("flaky", "5"), queue="testing")
    invocation = testing.deliver("testing")
    assert invocation is not None and invocation.failed_ids == [message_id]
    assert flaky.SIDE_EFFECTS["5"] == 0
    assert testing.dead_letters("testing") == []
    assert testing.queue_counts("testing") == (0, 1)
    [handed_back] = [line for line in testing.log_lines() if line.get("reason") == "in_progress" and "message" in line]
    assert handed_back["message"] == "handed back unrun; visible again later"
    assert 0 <= handed_back["next_delay_s"] <= TEST_CATALOG.queue("testing").backoff_base_s
    assert handed_back["receive"] == 1 and "attempt" not in handed_back


def test_a_dead_letter_send_failure_is_the_runtimes_fault_the_record_stays_and_comes_back(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.send(envelope("order_confirmation", "9999"))
    worker = harness.worker()
    broken = ClientFactory(session=new_session(region_name="us-east-1"))
    monkeypatch.setattr(worker, "_dead_letters", deadletter.DeadLetterQueue(broken("sqs"), "https://invalid/none"))
    invocation = harness.deliver(worker=worker)
    assert invocation is not None and len(invocation.failed_ids) == 1
    assert harness.queue_counts() == (0, 1)  # not lost: back after a backoff
    assert runtime_faults(harness) == {"dead_letter_send": 1}


def test_a_failing_idempotency_table_is_the_runtimes_fault_not_the_jobs(testing: Harness) -> None:
    # Given a worker whose idempotency table is out of reach (a wrong name, a missing grant: a 4xx from AWS)
    testing.send(envelope("flaky", "1"), queue="testing")
    settings = replace(testing.deployment.worker_settings("testing"), idempotency_table="no-such-table")
    worker = Worker(
        settings=settings,
        clients=testing.worker_clients("testing"),
        observability=Observability.create(output=testing.output),
    )
    # When the record is delivered, the job doesn't run, nor is it dead-lettered or charged an attempt:
    invocation = testing.deliver("testing", worker=worker)
    assert invocation is not None and len(invocation.failed_ids) == 1
    assert flaky.ATTEMPTS_SEEN == []
    assert testing.dead_letters("testing") == []
    # it goes back, visible again after a backoff, and the runtime-faults alarm's metric counts it
    assert testing.queue_counts("testing") == (0, 1)
    assert runtime_faults(testing) == {"idempotency_store": 1}
    [handed_back] = [
        line for line in testing.log_lines() if line.get("reason") == "runtime_fault" and "message" in line
    ]
    assert "no-such-table" in handed_back["error"] or "ResourceNotFound" in handed_back["error"]
    assert handed_back["receive"] == 1


def runtime_faults(harness: Harness) -> dict[str, int]:
    """The RuntimeFault counts the worker emitted, by reason."""
    return {
        doc["reason"]: int(sum(doc["RuntimeFault"]))
        for doc in harness.metrics()
        if doc.get("job") == RUNTIME_JOB and "reason" in doc
    }


def test_logs_carry_job_id_message_id_and_attempt(harness: Harness) -> None:
    harness.put_order("1001")
    message_id = harness.send(envelope("order_confirmation", "1001"))
    harness.deliver()
    [done] = [line for line in harness.log_lines() if line.get("message") == "job done"]
    assert done["job"] == "order_confirmation"
    assert done["id"] == "1001"
    assert done["message_id"] == message_id
    assert done["attempt"] == 1
    assert done["idempotency_key"] == "order_confirmation:1001"


def test_metrics_count_outcomes_per_job(harness: Harness) -> None:
    harness.put_order("1001")
    for body in (envelope("order_confirmation", "1001"), envelope("order_confirmation", "1001"), "garbage"):
        harness.send(body)
    harness.deliver()
    documents = harness.metrics()
    by_job = {(doc["job"], doc.get("reason", "")): doc for doc in documents}
    assert by_job[("order_confirmation", "")]["JobSucceeded"] == [1.0]
    assert by_job[("order_confirmation", "")]["JobDuplicate"] == [1.0]
    assert by_job[("(unparseable)", "")]["JobDeadLettered"] == [1.0]
    assert by_job[("(unparseable)", "")]["JobFailed"] == [1.0]
    assert by_job[("(unparseable)", "permanent")]["JobDeadLettered"] == [1.0]
    for doc in documents:
        [directive] = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "SqsJobs"
        expected = ["queue", "job", "reason", "service"] if "reason" in doc else ["queue", "job", "service"]
        assert directive["Dimensions"] == [expected]


def test_worker_handles_the_real_lambda_event_shape(harness: Harness) -> None:
    # tests/events holds events in the shape Lambda sends; the worker answers with a partial-batch response.
    event = json.loads((EVENTS / "sqs_order_confirmation_batch.json").read_text())
    harness.put_order("1001", email="aiko@example.com")
    response = harness.worker().handle(event, lambda_context())
    assert response == {"batchItemFailures": []}
    assert harness.mails_to("aiko@example.com") == 1
    errors = sorted(attributes_of(m)[deadletter.ERROR_TYPE] for m in harness.dead_letters())
    assert errors == ["EnvelopeFieldError", "OrderNotFoundError"]


def test_emulated_records_have_the_shape_of_real_lambda_records() -> None:
    real = json.loads((EVENTS / "sqs_event_aws_docs.json").read_text())["Records"][0]
    message = {
        "MessageId": "m-1",
        "ReceiptHandle": "rh",
        "Body": "Test message.",
        "MD5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
        "Attributes": {
            "ApproximateReceiveCount": 1,
            "SentTimestamp": 1545082649183,
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": 1545082649185,
        },
        "MessageAttributes": {"myAttribute": {"DataType": "String", "StringValue": "myValue"}},
    }
    emulated = sqs_record(message, real["eventSourceARN"])
    assert set(emulated) - {"md5OfMessageAttributes"} == set(real)
    assert emulated["attributes"] == real["attributes"]
    assert emulated["messageAttributes"] == real["messageAttributes"]
    assert emulated["awsRegion"] == real["awsRegion"]


def test_lambda_entry_builds_its_worker_from_the_environment(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in harness.deployment.worker_settings("orders").to_environ().items():
        monkeypatch.setenv(name, value)
    # The stack names the catalog on every function; the harness's deployment was given the object.
    monkeypatch.setenv(ENV_CATALOG, "functions.catalog:CATALOG")
    monkeypatch.setattr(entry, "_worker", None)
    harness.put_order("1001", email="aiko@example.com")
    event = json.loads((EVENTS / "sqs_order_confirmation_batch.json").read_text())
    event["Records"] = event["Records"][:1]
    assert entry.handler(event, lambda_context()) == {"batchItemFailures": []}
    assert harness.mails_to("aiko@example.com") == 1


def test_lambda_entry_refuses_an_incomplete_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry, "_worker", None)
    monkeypatch.setenv(ENV_CATALOG, "functions.catalog:CATALOG")
    monkeypatch.delenv("JOBS_QUEUE_NAME", raising=False)
    with pytest.raises(WorkerConfigError, match="JOBS_QUEUE_NAME"):
        entry.handler({"Records": []}, lambda_context())


def test_every_worker_accepts_the_heartbeat_and_only_records_it(harness: Harness) -> None:
    harness.send(json.dumps({"job": "heartbeat", "id": "2026-11-29T23:00:00Z"}))
    invocation = harness.deliver()
    assert invocation is not None and invocation.failed_ids == []
    assert harness.queue_counts() == (0, 0)
    assert harness.clients("dynamodb").scan(TableName=harness.deployment.idempotency_table)["Items"] == []
    [beat] = [line for line in harness.log_lines() if line.get("message") == "heartbeat"]
    assert beat["lag_s"] >= 0
    [doc] = [doc for doc in harness.metrics() if doc["job"] == "heartbeat"]
    assert doc["Heartbeat"] == [1.0]
    assert "JobSucceeded" not in doc


def test_each_run_records_its_duration(harness: Harness) -> None:
    harness.put_order("1001")
    harness.send(envelope("order_confirmation", "1001"))
    harness.send(envelope("order_confirmation", "9999"))
    harness.deliver()
    [doc] = [doc for doc in harness.metrics() if doc["job"] == "order_confirmation" and "reason" not in doc]
    assert len(doc["JobDuration"]) == 2  # the successful run and the failed one
    assert all(0 <= ms < 60_000 for ms in doc["JobDuration"])
    units = {m["Name"]: m["Unit"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units["JobDuration"] == "Milliseconds"


@pytest.mark.slow
def test_a_large_batch_emits_every_duration_without_overflowing_emf(harness: Harness) -> None:
    # CloudWatch EMF (and Powertools) take under 100 values per metric in one document; a batch of 150 runs
    # must still be counted whole, and nothing may escape the handler.
    event: dict[str, list[dict[str, Any]]] = {"Records": []}
    template = json.loads((EVENTS / "sqs_order_confirmation_batch.json").read_text())["Records"][1]
    for index in range(150):
        record = dict(template, messageId=f"m-{index}", body=envelope("order_confirmation", f"missing-{index}"))
        event["Records"].append(record)
    response = harness.worker().handle(event, lambda_context())
    assert response == {"batchItemFailures": []}
    documents = [d for d in harness.metrics() if d["job"] == "order_confirmation" and "reason" not in d]
    assert sum(len(d.get("JobDuration", [])) for d in documents) == 150
    assert sum(sum(d.get("JobDeadLettered", [])) for d in documents) == 150
    assert all(len(d.get("JobDuration", [])) < 100 for d in documents)
