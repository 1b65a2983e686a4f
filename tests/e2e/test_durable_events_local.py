"""A durable job waiting for an approval on the local engine, as an operator and a service send it: `jobctl job show`
says what it waits for and until when, `jobctl job event` sends the event, and a service's JobPublisher (built from
the stack's parameters, its Lambda client at the engine's callback endpoint) sends another job's."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import boto3
import pytest

from sqs_jobs.durable.record import DurableRecords, DurableState
from sqs_jobs.local.engine import LocalEngine
from sqs_jobs.local.heartbeat import heartbeat_body
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.stack_names import local_callbacks_parameter_name
from tests.e2e.jobctl_runs import as_json, run
from tests.functional.test_durable_events import CATALOG, JOB, QUEUE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
CATALOG_REF = "tests.functional.test_durable_events:CATALOG"


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(port=0, worker_output=io.StringIO(), catalog=CATALOG, durable_skip_time=True) as running:
        yield running


def _record(engine: LocalEngine, job_id: str) -> DurableState:
    assert engine.deployment is not None
    dynamodb = engine.clients()("dynamodb")
    return DurableRecords(lambda: dynamodb, engine.deployment.idempotency_table, 60).read(f"{JOB}:{job_id}")


def _until(engine: LocalEngine, job_id: str, done: bool, timeout_s: float = 60) -> DurableState:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = _record(engine, job_id)
        if (state.status == "SUCCEEDED") if done else (state.waiting_for is not None):
            return state
        time.sleep(0.1)
    raise AssertionError(f"{JOB}:{job_id}: {_record(engine, job_id)}")


def _publisher(engine: LocalEngine) -> JobPublisher:
    """A service's publisher, from the stack's parameters; its Lambda client at the engine's callback endpoint."""
    clients = engine.clients()
    endpoint = clients("ssm").get_parameter(Name=local_callbacks_parameter_name(engine.stack_name))
    lambda_client = boto3.client(
        "lambda",
        region_name=engine.region,
        endpoint_url=endpoint["Parameter"]["Value"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    return JobPublisher.from_stack(
        clients("ssm"),
        clients("sqs"),
        stack_name=engine.stack_name,
        results_client=clients("dynamodb"),
        lambda_client=lambda_client,
    )


def test_an_operator_sees_what_a_durable_job_waits_for_and_sends_it_the_approval_with_jobctl(
    engine: LocalEngine,
) -> None:
    publisher = _publisher(engine)
    publisher.publish(JOB, "patient-op")
    _until(engine, "patient-op", done=False)

    shown = run(engine, "--catalog", CATALOG_REF, "job", "show", JOB, "patient-op")
    assert shown.exit_code == 0, shown.output
    assert "waiting for:  event 'approved' since " in shown.output and ", until " in shown.output
    listed = run(engine, "--catalog", CATALOG_REF, "--output", "json", "job", "list", QUEUE)
    assert listed.exit_code == 0, listed.output
    [running] = [job for job in as_json(listed)["jobs"] if job["id"] == "patient-op"]
    assert running["state"] == "running" and running["job"] == JOB
    assert "waiting for event 'approved' until " in running["progress"]["note"]
    other = run(engine, "--catalog", CATALOG_REF, "job", "event", JOB, "patient-op", "rejected")
    assert other.exit_code == 1 and "is not waiting for event 'rejected': it waits for event 'approved'" in other.output
    bad = run(engine, "--catalog", CATALOG_REF, "job", "event", JOB, "patient-op", "approved", "--payload", "{by")
    assert bad.exit_code == 2 and "--payload is not JSON" in bad.output

    sent = run(
        engine,
        "--catalog",
        CATALOG_REF,
        "--output",
        "json",
        "job",
        "event",
        JOB,
        "patient-op",
        "approved",
        "--payload",
        '{"by": "ops"}',
    )

    assert sent.exit_code == 0, sent.output
    assert as_json(sent)["sent"] is True and as_json(sent)["event"] == "approved"
    assert _until(engine, "patient-op", done=True).waiting_for is None
    result = publisher.result(JOB, "patient-op")
    assert result.state.value == "succeeded"
    again = run(engine, "--catalog", CATALOG_REF, "job", "event", JOB, "patient-op", "approved")
    assert again.exit_code == 1 and "waits for no event now" in again.output


def test_a_service_sends_the_approval_with_its_publisher(engine: LocalEngine) -> None:
    publisher = _publisher(engine)
    publisher.publish(JOB, "patient-svc")
    _until(engine, "patient-svc", done=False)

    publisher.send_event(JOB, "patient-svc", "approved", {"by": "billing-service"})

    assert _until(engine, "patient-svc", done=True).status == "SUCCEEDED"
    assert engine.durables is not None
    [execution] = [
        found
        for found in engine.durables.executions(JOB)
        if json.loads(json.loads(found.start_input.input or "{}")["body"])["id"] == "patient-svc"
    ]
    ended = engine.durables.wait(JOB, execution.durable_execution_arn, timeout_s=30)
    assert json.loads(ended.result) == {"decision": {"by": "billing-service"}}


def test_an_operator_cancels_a_waiting_durable_job_its_execution_stops_and_later_copies_start_nothing(
    engine: LocalEngine,
) -> None:
    assert engine.durables is not None and engine.deployment is not None
    publisher = _publisher(engine)
    publisher.publish(JOB, "patient-cancel")
    waiting = _until(engine, "patient-cancel", done=False)

    cancelled = run(
        engine, "--catalog", CATALOG_REF, "--output", "json", "job", "cancel", JOB, "patient-cancel", "--yes"
    )

    assert cancelled.exit_code == 0, cancelled.output
    assert as_json(cancelled)["outcome"] == "requested"  # stopped; the next heartbeat dead-letters it
    assert as_json(cancelled)["stopped_execution"] == waiting.execution_arn
    stopped = engine.durables.wait(JOB, str(waiting.execution_arn), timeout_s=30)
    assert stopped.status.value in ("STOPPED", "FAILED")  # the testing SDK reports a stop as FAILED
    # The queue's next heartbeat ends the stopped execution: one dead letter naming the operator's cancel.
    sqs = engine.clients()("sqs")
    sqs.send_message(QueueUrl=engine.deployment.queues[QUEUE].url, MessageBody=heartbeat_body())
    deadline = time.monotonic() + 60
    while _record(engine, "patient-cancel").status != "FAILED" and time.monotonic() < deadline:
        time.sleep(0.2)
    record = _record(engine, "patient-cancel")
    assert record.status == "FAILED" and record.cancelled_at is not None and record.waiting_for is None
    assert record.last_error_type == "JobCancelledError" and "an operator cancelled the job" in (
        record.last_error or ""
    )
    listed = run(engine, "--catalog", CATALOG_REF, "--output", "json", "job", "list", QUEUE)
    assert not [job for job in as_json(listed)["jobs"] if job["id"] == "patient-cancel"]
    # A later copy (a new publish, a redrive) is acknowledged without starting while the cancel stands.
    executions = len(engine.durables.executions(JOB))
    publisher.publish(JOB, "patient-cancel")
    assert engine.wait_until_idle(timeout_s=30)
    assert len(engine.durables.executions(JOB)) == executions

    undone = run(engine, "--catalog", CATALOG_REF, "job", "cancel", JOB, "patient-cancel", "--undo", "--yes")

    assert undone.exit_code == 0 and "cancel withdrawn" in undone.output
    publisher.publish(JOB, "patient-cancel")
    assert _until(engine, "patient-cancel", done=False).generation == record.generation
