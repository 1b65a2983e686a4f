"""Durable jobs waiting for an event (context.wait_for_event), on moto and AWS's durable execution testing SDK: the
event is sent by the publisher (JobPublisher.send_event) through an ordinary boto3 Lambda client to the testing SDK's
own web server (Lambda's callback API); a wait that times out dead-letters the job with its evidence."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from sqs_jobs.durable import Durable
from sqs_jobs.durable.record import DurableRecords, DurableState
from sqs_jobs.durable.runtime import DurableRuntime, DurableSettings
from sqs_jobs.events import EventNotAwaitedError, EventPayloadError, NotADurableJobError
from sqs_jobs.local.durable import LocalDurableFunctions
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.stack_names import durable_function_name
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.runtime import Worker
from tests.functional.conftest import REGION, Harness, envelope
from tests.functional.sample_jobs import awaits_approval

QUEUE = "approvals"
JOB, AGAIN, PLAIN = "approve_refund", "approve_refund_again", "plain_job"
HANDLER = "tests.functional.sample_jobs.awaits_approval"
DURABLE = Durable(execution_timeout_s=600, retention_days=1, function_timeout_s=60, step_time_limit_s=5)
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name=QUEUE,
            max_attempts=2,
            backoff_base_s=1,
            jobs=(
                JobSpec(name=JOB, handler=HANDLER, durable=DURABLE),
                JobSpec(name=AGAIN, handler=f"{HANDLER}_again", durable=DURABLE),
                JobSpec(name=PLAIN, handler="tests.functional.sample_jobs.nap"),
            ),
        ),
    ),
)


@dataclass
class Approvals:
    harness: Harness
    functions: LocalDurableFunctions
    publisher: JobPublisher
    lambda_client: Any

    def start(self, job: str, job_id: str) -> str:
        """Publish and deliver `job`: its worker starts the execution; its ARN."""
        self.harness.send(envelope(job, job_id), queue=QUEUE)
        worker = Worker(
            settings=self.harness.deployment.worker_settings(QUEUE),
            clients=self.harness.worker_clients(QUEUE),
            observability=Observability.create(output=self.harness.output),
            durable_starter=self.functions,
        )
        invocation = self.harness.deliver(QUEUE, worker=worker)
        assert invocation is not None and invocation.failed_ids == []
        [execution] = self.functions.executions(job)  # one per test and job
        return str(execution.durable_execution_arn)

    def record(self, job: str, job_id: str) -> DurableState:
        records = DurableRecords(
            lambda: self.harness.clients("dynamodb"), self.harness.deployment.idempotency_table, 60
        )
        return records.read(f"{job}:{job_id}")

    def until_waiting(self, job: str, job_id: str, timeout_s: float = 30) -> DurableState:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.record(job, job_id)
            if state.waiting_for is not None:
                return state
            time.sleep(0.05)
        raise AssertionError(f"{job}:{job_id} never waited for an event: {self.record(job, job_id)}")

    def in_flight(self) -> list[Any]:
        from sqs_jobs.cli.job_life import jobs_in_flight

        dynamodb = self.harness.clients("dynamodb")
        return jobs_in_flight(dynamodb, self.harness.deployment.idempotency_table, [QUEUE]).jobs

    def ended(self, job: str, arn: str) -> Any:
        return self.functions.wait(job, arn, timeout_s=60)


@pytest.fixture
def approvals(clients: ClientFactory) -> Iterator[Approvals]:
    harness = Harness.provisioned(clients, CATALOG)
    runtimes = {}
    for job in (JOB, AGAIN):
        settings = DurableSettings(worker=harness.deployment.worker_settings(QUEUE), job=job)
        runtime = DurableRuntime(
            settings, harness.worker_clients(QUEUE), observability=Observability.create(output=harness.output)
        )
        runtimes[job] = (durable_function_name("test", job), runtime)
    functions = LocalDurableFunctions(runtimes, state_dir=None, skip_time=True)
    url = functions.serve_callbacks()
    # An ordinary boto3 Lambda client, as a service's: its callback calls go to the testing SDK's server.
    lambda_client = boto3.client(
        "lambda", region_name=REGION, endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test"
    )
    publisher = JobPublisher.from_stack(
        harness.clients("ssm"),
        harness.clients("sqs"),
        stack_name=harness.deployment.stack_name,
        catalog=CATALOG,
        results_client=harness.clients("dynamodb"),
        lambda_client=lambda_client,
    )
    awaits_approval.RAN.clear()
    yield Approvals(harness, functions, publisher, lambda_client)
    functions.close()


def test_a_durable_job_waits_for_its_event_and_goes_on_with_its_payload(approvals: Approvals) -> None:
    arn = approvals.start(JOB, "patient-1")
    waiting = approvals.until_waiting(JOB, "patient-1")
    assert waiting.waiting_for == "approved" and waiting.status == "RUNNING"
    assert waiting.waiting_since is not None and waiting.waiting_until is not None
    assert waiting.waiting_until - waiting.waiting_since == pytest.approx(awaits_approval.WAIT_S, abs=1)
    assert awaits_approval.RAN["patient-1"] == ["prepare"]
    [listed] = approvals.in_flight()  # jobctl job list's and the console's view: running, and what it waits for
    assert (listed.queue, listed.job, listed.job_id, listed.state.value) == (QUEUE, JOB, "patient-1", "running")
    assert listed.progress is not None and "waiting for event 'approved' until " in listed.progress.note
    assert listed.run_by.startswith("durable execution ")

    approvals.publisher.send_event(JOB, "patient-1", "approved", {"by": "ops@example.com"})

    ended = approvals.ended(JOB, arn)
    assert ended.status.value == "SUCCEEDED"
    assert json.loads(ended.result) == {"decision": {"by": "ops@example.com"}}
    assert awaits_approval.RAN["patient-1"] == ["prepare", "apply"]  # the first step ran once, not on the replay
    after = approvals.record(JOB, "patient-1")
    assert after.status == "SUCCEEDED" and after.waiting_for is None and after.waiting_until is None
    with pytest.raises(EventNotAwaitedError, match="waits for no event now"):
        approvals.publisher.send_event(JOB, "patient-1", "approved", {"by": "twice"})
    assert approvals.in_flight() == []  # ended: no longer in flight


def test_an_event_the_job_does_not_wait_for_is_refused_to_its_sender_and_changes_nothing(
    approvals: Approvals,
) -> None:
    with pytest.raises(EventNotAwaitedError, match="waits for no event now"):
        approvals.publisher.send_event(JOB, "patient-2", "approved")  # not published yet
    arn = approvals.start(JOB, "patient-2")
    approvals.until_waiting(JOB, "patient-2")
    with pytest.raises(EventNotAwaitedError, match="waits for event 'approved'") as refused:
        approvals.publisher.send_event(JOB, "patient-2", "rejected", {"why": "no"})
    assert refused.value.waiting_for == "approved"
    with pytest.raises(EventPayloadError, match="not JSON-serializable"):
        approvals.publisher.send_event(JOB, "patient-2", "approved", {"at": object()})
    with pytest.raises(EventPayloadError, match="Lambda takes at most 262144"):
        approvals.publisher.send_event(JOB, "patient-2", "approved", "x" * 262_144)
    with pytest.raises(NotADurableJobError, match="only durable jobs wait for events"):
        approvals.publisher.send_event(PLAIN, "patient-2", "approved")
    assert approvals.record(JOB, "patient-2").waiting_for == "approved"  # still waiting

    approvals.publisher.send_event(JOB, "patient-2", "approved", None)
    ended = approvals.ended(JOB, arn)
    assert json.loads(ended.result) == {"decision": None}


def test_a_wait_that_times_out_dead_letters_the_job_with_the_events_evidence(approvals: Approvals) -> None:
    arn = approvals.start(JOB, "hasty-1")

    ended = approvals.ended(JOB, arn)

    assert ended.status.value == "FAILED"
    [dead] = approvals.harness.dead_letters(QUEUE)
    assert json.loads(dead["Body"]) == json.loads(envelope(JOB, "hasty-1"))
    attributes = {name: value.get("StringValue") for name, value in dead["MessageAttributes"].items()}
    assert attributes["jobs.error_type"] == "EventTimeoutError"
    assert "no event 'approved' came within 1 s" in attributes["jobs.error_message"]
    assert attributes["jobs.failure"] == "permanent"
    state = approvals.record(JOB, "hasty-1")
    assert state.status == "FAILED" and state.waiting_for is None
    assert state.last_error_type == "EventTimeoutError"
    assert awaits_approval.RAN["hasty-1"] == ["prepare"]  # nothing after the wait ran


def test_a_timeout_listed_as_transient_waits_again_up_to_the_queues_attempts(approvals: Approvals) -> None:
    arn = approvals.start(AGAIN, "hasty-2")

    ended = approvals.ended(AGAIN, arn)

    assert ended.status.value == "FAILED"
    history = approvals.functions.functions[AGAIN].runner.get_execution_history(arn, include_execution_data=True)
    callbacks = [e for e in history.to_dict()["Events"] if e.get("EventType") == "CallbackStarted"]
    assert [e["Name"] for e in callbacks] == ["approved", "approved#2"]  # max_attempts=2 waits in all
    [dead] = approvals.harness.dead_letters(QUEUE)
    assert dead["MessageAttributes"]["jobs.error_type"]["StringValue"] == "EventTimeoutError"


def test_the_consoles_cancel_of_a_waiting_durable_job_stops_its_execution(approvals: Approvals) -> None:
    from sqs_jobs.cli.console.backend import ConsoleBackend
    from sqs_jobs.cli.job_cancel import CancelOutcome

    class Backend(ConsoleBackend):
        def _idempotency_table(self) -> str:  # the stack's, found from its worker on AWS
            return approvals.harness.deployment.idempotency_table

    # What the console stops an execution with: a boto3 Lambda client, here at the local durable functions' server.
    backend = Backend(approvals.harness.clients, "test", CATALOG, durable_api=lambda: approvals.lambda_client)
    arn = approvals.start(JOB, "patient-3")
    approvals.until_waiting(JOB, "patient-3")

    result = backend.cancel(JOB, "patient-3", None)

    assert result.outcome is CancelOutcome.REQUESTED and arn in result.explanation
    assert approvals.ended(JOB, arn).status.value in ("STOPPED", "FAILED")
    assert approvals.record(JOB, "patient-3").cancelled_at is not None
    assert backend.cancel(JOB, "patient-3", None, undo=True).outcome is CancelOutcome.WITHDRAWN
    assert approvals.record(JOB, "patient-3").cancelled_at is None


def test_a_callback_lambda_closed_is_not_awaited_and_a_wrong_endpoints_404_is_not_taken_for_one(
    approvals: Approvals,
) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from botocore.exceptions import ClientError

    from sqs_jobs.events import JobEvents
    from sqs_jobs.worker.names import CALLBACK_ID, WAITING_FOR

    arn = approvals.start(JOB, "patient-4")
    waiting = approvals.until_waiting(JOB, "patient-4")
    callback = approvals.harness.clients("dynamodb").get_item(
        TableName=approvals.harness.deployment.idempotency_table,
        Key={"id": {"S": _record_id("patient-4")}},
    )["Item"][CALLBACK_ID]["S"]

    class NotLambda(BaseHTTPRequestHandler):  # what a wrong endpoint answers: 404, no error type
        def do_POST(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), NotLambda)
    threading.Thread(target=elsewhere.serve_forever, daemon=True).start()
    try:
        wrong = boto3.client(
            "lambda",
            region_name=REGION,
            endpoint_url=f"http://127.0.0.1:{elsewhere.server_address[1]}",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        events = JobEvents(approvals.harness.clients("dynamodb"), wrong, approvals.harness.deployment.idempotency_table)
        with pytest.raises(ClientError) as refused:
            events.send(JOB, "patient-4", "approved", {"by": "lost?"})
        assert refused.value.response["Error"]["Code"] == "404"  # passed through: not "no longer waits"
    finally:
        elsewhere.shutdown()
        elsewhere.server_close()
    assert approvals.record(JOB, "patient-4").waiting_for == "approved"  # still waiting, nothing lost

    approvals.publisher.send_event(JOB, "patient-4", "approved", {"by": "ops"})
    assert approvals.ended(JOB, arn).status.value == "SUCCEEDED"
    # A record that still names the closed callback (its clearing write lost): Lambda's answer says it is closed.
    approvals.harness.clients("dynamodb").update_item(
        TableName=approvals.harness.deployment.idempotency_table,
        Key={"id": {"S": _record_id("patient-4")}},
        UpdateExpression="SET #w = :w, #c = :c",
        ExpressionAttributeNames={"#w": WAITING_FOR, "#c": CALLBACK_ID},
        ExpressionAttributeValues={":w": {"S": "approved"}, ":c": {"S": callback}},
    )
    with pytest.raises(EventNotAwaitedError, match="no longer waits for event 'approved'"):
        approvals.publisher.send_event(JOB, "patient-4", "approved", {"by": "twice"})
    assert waiting.generation == 0


def _record_id(job_id: str) -> str:
    from sqs_jobs.worker.names import durable_record_id

    return durable_record_id(f"{JOB}:{job_id}")


def test_a_durable_steps_http_calls_carry_an_idempotency_key_of_their_own_step(clients: ClientFactory) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.functional.sample_jobs import http_steps

    seen: list[tuple[str, str]] = []
    failed_once: set[str] = set()

    class Api(BaseHTTPRequestHandler):  # a payments API: the first charge answers 503, then 200
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append((self.path, self.headers.get("Idempotency-Key", "")))
            status = 503 if self.path == "/charge" and self.path not in failed_once else 200
            failed_once.add(self.path)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    api = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    http_steps.URL[:] = [f"http://127.0.0.1:{api.server_address[1]}"]
    catalog = Catalog(
        queues=(
            QueueSpec(
                name="payments",
                max_attempts=3,
                backoff_base_s=1,
                backoff_cap_s=1,
                jobs=(JobSpec(name="settle", handler="tests.functional.sample_jobs.http_steps", durable=DURABLE),),
            ),
        )
    )
    harness = Harness.provisioned(clients, catalog)
    try:
        harness.publish("settle", "order-5")
        harness.publish("settle", "outside-6")
        assert harness.deliver("payments") is not None
        assert harness.durable_result("settle", "order-5").status.value == "SUCCEEDED"
        assert harness.durable_result("settle", "outside-6").status.value == "FAILED"
    finally:
        harness.close()
        api.shutdown()
        api.server_close()

    ordered = [(path, key) for path, key in seen if key.startswith("settle:order-5")]
    # The charge retried with its step's key (the API dedupes it), the receipt with another: one per step.
    assert ordered == [
        ("/charge", "settle:order-5:charge"),
        ("/charge", "settle:order-5:charge"),
        ("/receipt", "settle:order-5:receipt"),
    ]
    assert not [path for path, _ in seen if path == "/outside"]  # refused before it was sent
    [dead] = [d for d in harness.dead_letters("payments") if "outside-6" in d["Body"]]
    assert dead["MessageAttributes"]["jobs.error_type"]["StringValue"] == "DurableMisuseError"
