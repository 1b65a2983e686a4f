"""Where the features meet: key concurrency, cancel, batches and tenants, each beside a job's run and a fault on one
of the runtime's own AWS calls, on the real worker and moto (docs/key-life.md). Each test is one of the cases an
outside trial found breaking a promise; each failed before its fix."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqs_jobs.cli.job_cancel import CancelOutcome, CancelResult, CancelTarget, cancel_job, withdraw
from sqs_jobs.cli.job_life import jobs_in_flight
from sqs_jobs.envelope import Envelope
from sqs_jobs.flow_control import KeyConcurrency, key_concurrency_name
from sqs_jobs.local.chaos import Chaos, ChaosSettings
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.batch_members import routed_publisher
from sqs_jobs.worker.key_concurrency import slot_id
from sqs_jobs.worker.names import LifeState
from tests.functional.conftest import Harness, attributes_of, envelope, key_record
from tests.functional.sample_jobs import stepwise, tallied

pytestmark = pytest.mark.timeout(120)

LIMITED = QueueSpec(
    name="limited",
    function_timeout_s=20,
    max_attempts=3,
    jobs=(
        JobSpec(
            name="limited_job",
            handler="tests.functional.sample_jobs.tallied",
            time_limit_s=5,
            concurrency=KeyConcurrency(limit=1, per="customer"),
        ),
    ),
)


def throttle_once(harness: Harness, queue: str, event: str, matches: Callable[[dict[str, Any]], bool]) -> list[int]:
    """The queue's worker's next AWS call that `event` names and `matches` accepts is throttled, as DynamoDB or SQS
    throttles one; the list returned counts the calls refused."""
    refused: list[int] = []

    def throttle(params: dict[str, Any], **_: Any) -> None:
        if not refused and matches(params):
            refused.append(1)
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "injected: rate exceeded"}},
                event.rsplit(".", 1)[-1],
            )

    harness.worker_clients(queue).register(event, throttle)
    return refused


def _flow_item(params: dict[str, Any]) -> bool:
    return str(params.get("Key", {}).get("id", {}).get("S", "")).startswith("flow#")


# --- 1. giving back a key's slot fails after the run ---------------------------------------------------------------


@pytest.fixture
def limited(clients: Any) -> Iterator[Harness]:
    tallied.reset()
    yield Harness.provisioned(clients, Catalog(queues=(LIMITED,)))


def test_a_run_that_succeeded_is_not_run_again_when_giving_back_its_slot_fails(limited: Harness) -> None:
    # Given a job limited to one run per customer, and its slot's release throttled once
    refused = throttle_once(limited, "limited", "before-parameter-build.dynamodb.DeleteItem", _flow_item)
    limited.send(json.dumps({"job": "limited_job", "id": "o-1", "customer": "c1"}), queue="limited")

    # When its run succeeds
    invocation = limited.deliver("limited")

    # Then it is acknowledged as the success it was, its key completed, and it never runs again
    assert refused == [1]
    assert invocation is not None and invocation.failed_ids == []
    assert key_record(limited, "limited_job:o-1")["status"] == "COMPLETED"
    assert limited.deliver("limited") is None
    assert tallied.RUNS[("limited_job", "o-1")] == 1
    # and the release's failure is the runtime's fault, said as such
    faults = [d for d in limited.metrics() if "RuntimeFault" in d and d.get("reason") == "key_release"]
    assert faults


def test_a_permanent_failure_stays_permanent_when_giving_back_its_slot_fails(limited: Harness) -> None:
    # Given a run that fails permanently, and its slot's release throttled once
    throttle_once(limited, "limited", "before-parameter-build.dynamodb.DeleteItem", _flow_item)
    limited.send(json.dumps({"job": "limited_job", "id": "bad-1", "customer": "c1"}), queue="limited")

    invocation = limited.deliver("limited")

    # Then it is dead-lettered with its own error after its one run, never retried as a transient failure
    assert invocation is not None and invocation.failed_ids == []
    [dead] = limited.dead_letters("limited")
    evidence = attributes_of(dead)
    assert (evidence["jobs.failure"], evidence["jobs.error_type"], evidence["jobs.attempts"]) == (
        "permanent",
        "PermanentError",
        "1",
    )
    assert limited.deliver("limited") is None


# --- 7. a key's slot outlasts a cut run's call in flight -----------------------------------------------------------


class _SlowServer(ThreadingHTTPServer):
    """A real HTTP server that answers each request after `delay_s`, counting the requests it holds at once."""

    daemon_threads = True

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.served = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with server.lock:
                    server.active += 1
                    server.most = max(server.most, server.active)
                try:
                    time.sleep(server.delay_s)
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                finally:
                    with server.lock:
                        server.active -= 1
                        server.served += 1

            def log_message(self, *_: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


CALLING = QueueSpec(
    name="calling",
    function_timeout_s=4,
    max_attempts=5,
    jobs=(
        JobSpec(
            name="call",
            handler="tests.functional.sample_jobs.slow_call",
            time_limit_s=1,
            concurrency=KeyConcurrency(limit=1, per="customer"),
        ),
    ),
)


@pytest.mark.slow
def test_a_keys_slot_is_held_while_a_cut_runs_call_is_in_flight_past_its_invocation(clients: Any) -> None:
    harness = Harness.provisioned(clients, Catalog(queues=(CALLING,)))
    server = _SlowServer(delay_s=7.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # Given a run of c1 cut at its 1 s limit while its call waits on a server that answers after 7 s, in an
        # invocation that ends at 4 s
        harness.send(json.dumps({"job": "call", "id": "a", "customer": "c1", "url": server.url}), queue="calling")
        first = harness.deliver("calling", timeout_s=4)
        assert first is not None and len(first.failed_ids) == 1
        started = time.monotonic()
        # When another run of c1 is delivered after that invocation has ended, the call still in flight
        time.sleep(4.5)
        harness.send(json.dumps({"job": "call", "id": "b", "customer": "c1", "url": server.url}), queue="calling")
        second = harness.deliver("calling", timeout_s=4)
        # Then it is held (and so is the first one's retry, if it is due already): the downstream never has two of
        # c1's calls at once
        assert second is not None and second.deleted == []
        assert sorted(second.failed_ids) == sorted(record["messageId"] for record in second.event["Records"])
        assert time.monotonic() - started < 7.0, "the cut run's call ended before the check: the test proves nothing"
        slot = harness.clients("dynamodb").get_item(
            TableName=harness.deployment.idempotency_table,
            Key={"id": {"S": slot_id(key_concurrency_name("call"), "c1", 0)}},
        )
        assert "Item" in slot
        deadline = time.monotonic() + 15
        while server.served < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.most == 1
    finally:
        server.shutdown()
        server.server_close()


# --- 9, 10. cancel meets a failing run, and undo keeps the runs --------------------------------------------------

STEPS = QueueSpec(
    name="steps",
    max_attempts=3,
    jobs=(JobSpec(name="stepwise", handler="tests.functional.sample_jobs.stepwise"),),
)
OPERATOR = "arn:aws:sts::123456789012:assumed-role/operator/night-shift"


@pytest.fixture
def steps(clients: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    monkeypatch.setattr("sqs_jobs.worker.progress.CANCEL_CHECK_INTERVAL_S", 0.0)
    stepwise.reset()
    yield Harness.provisioned(clients, Catalog(queues=(STEPS,)))
    stepwise.reset()


def _cancel_target(job_id: str) -> CancelTarget:
    return CancelTarget(
        queue="steps", job="stepwise", job_id=job_id, key=f"stepwise:{job_id}", expiry_s=STEPS.idempotency_expiry_s
    )


def _cancel(harness: Harness, job_id: str) -> CancelResult:
    return cancel_job(
        harness.clients("dynamodb"), harness.deployment.idempotency_table, _cancel_target(job_id), OPERATOR
    )


def _undo(harness: Harness, job_id: str) -> CancelResult:
    return withdraw(harness.clients("dynamodb"), harness.deployment.idempotency_table, _cancel_target(job_id))


def test_a_cancel_asked_of_a_run_that_then_fails_holds_is_listed_and_can_be_undone(steps: Harness) -> None:
    # Given a run that is asked to stop, then fails on its own before it reports or calls again
    requested: list[CancelResult] = []

    def cancel_then_fail(job_id: str, step: int) -> None:
        requested.append(_cancel(steps, job_id))
        raise stepwise.StepFailedError("the downstream refused step 1")

    stepwise.BETWEEN.append(cancel_then_fail)
    steps.send(envelope("stepwise", "f-1"), queue="steps")
    first = steps.deliver("steps")
    assert [result.outcome for result in requested] == [CancelOutcome.REQUESTED]
    stepwise.BETWEEN.clear()

    # Then the key is cancelled, as the operator left it: its message is not retried, it is listed as cancelled,
    # and its record keeps its run and its error
    assert first is not None and first.failed_ids == []
    assert steps.queue_counts("steps") == (0, 0)
    record = key_record(steps, "stepwise:f-1")
    assert (record["status"], record["runs"], record["last_error_type"]) == ("CANCELLED", 1, "StepFailedError")
    [listed] = jobs_in_flight(steps.clients("dynamodb"), steps.deployment.idempotency_table, ["steps"]).jobs
    assert (listed.state, listed.job_id) == (LifeState.CANCELLED, "f-1")
    # When the operator undoes it, a new copy runs, as its second run
    assert _undo(steps, "f-1").outcome is CancelOutcome.WITHDRAWN
    steps.send(envelope("stepwise", "f-1"), queue="steps")
    assert steps.deliver("steps") is not None
    assert stepwise.STEPS["f-1"] == [1, 1, 2, 3]
    assert key_record(steps, "stepwise:f-1")["runs"] == 2


def test_an_undo_answered_before_the_runs_cancelled_write_lands_leaves_the_key_to_run(steps: Harness) -> None:
    # Given a run asked to stop that fails on its own before it sees the request, and the operator's undo answered
    # just before the worker's write that cancels the key lands (a slow write, seen in the 10,000-job soak)
    undone: list[CancelResult] = []

    def undo_first(params: dict[str, Any], **_: Any) -> None:
        if params.get("UpdateExpression", "").startswith("SET #status = :cancelled") and not undone:
            undone.append(_undo(steps, "w-1"))

    def cancel_then_fail(job_id: str, step: int) -> None:
        _cancel(steps, job_id)
        raise stepwise.StepFailedError("the downstream refused step 1")

    steps.worker_clients("steps").register("before-parameter-build.dynamodb.UpdateItem", undo_first)
    stepwise.BETWEEN.append(cancel_then_fail)
    steps.send(envelope("stepwise", "w-1"), queue="steps")
    first = steps.deliver("steps")
    stepwise.BETWEEN.clear()

    # Then the key is not cancelled behind the operator's back: its run's failure is written, and it retries
    assert [result.outcome for result in undone] == [CancelOutcome.WITHDRAWN]
    assert first is not None and len(first.failed_ids) == 1
    record = key_record(steps, "stepwise:w-1")
    assert (record["status"], record["runs"], record["last_error_type"]) == ("FAILED", 1, "StepFailedError")
    assert "cancel_requested_at" not in record
    steps.expire_visibility(first, "steps")
    assert (second := steps.deliver("steps")) is not None and second.failed_ids == []
    assert key_record(steps, "stepwise:w-1")["runs"] == 2


def test_cancel_then_undo_keeps_the_runs_a_key_has_used(steps: Harness) -> None:
    # Given a job that failed twice of its 3 attempts, its copy waiting for its next try
    stepwise.FAIL_IDS.add("r-1")
    steps.send(envelope("stepwise", "r-1"), queue="steps")
    for _ in range(2):
        invocation = steps.deliver("steps")
        assert invocation is not None and invocation.failed_ids
        steps.expire_visibility(invocation, queue="steps")
    assert key_record(steps, "stepwise:r-1")["runs"] == 2

    # When an operator cancels it and undoes the cancel before its copy comes back
    assert _cancel(steps, "r-1").outcome is CancelOutcome.CANCELLED
    assert _undo(steps, "r-1").outcome is CancelOutcome.WITHDRAWN
    assert key_record(steps, "stepwise:r-1")["runs"] == 2
    last = steps.deliver("steps")

    # Then its copy runs once more, its third and last run, and its dead letter says so
    assert last is not None and last.failed_ids == []
    [dead] = steps.dead_letters("steps")
    evidence = attributes_of(dead)
    assert (evidence["jobs.failure"], evidence["jobs.attempts"]) == ("retries_exhausted", "3")
    assert steps.deliver("steps") is None


def test_a_cancelled_runs_message_redelivered_after_an_undo_is_acknowledged_not_run_again(steps: Harness) -> None:
    # Given a run cancelled mid-way, dead-lettered as JobCancelledError by an environment that dies before its answer
    def cancel_mid_run(job_id: str, step: int) -> None:
        _cancel(steps, job_id)

    stepwise.BETWEEN.append(cancel_mid_run)
    message_id = steps.send(envelope("stepwise", "u-1"), queue="steps")
    crashed = steps.mapping("steps", chaos=Chaos(ChaosSettings(crash=1.0))).poll_once(steps.worker("steps").handle)
    stepwise.BETWEEN.clear()
    assert crashed is not None and crashed.crashed and crashed.deleted == []
    [dead] = steps.dead_letters("steps")
    assert attributes_of(dead)["jobs.error_type"] == "JobCancelledError"

    # When the operator undoes the cancel, and SQS hands the same message out again
    assert _undo(steps, "u-1").outcome is CancelOutcome.WITHDRAWN
    assert key_record(steps, "stepwise:u-1")["status"] == "FAILED"
    steps.expire_visibility(crashed, "steps")
    redelivered = steps.deliver("steps")

    # Then it is acknowledged without a run: its life ended with its one dead letter
    assert redelivered is not None and redelivered.deleted == [message_id]
    assert stepwise.STEPS["u-1"] == [1]
    assert steps.queue_counts("steps", dead_letter=True) == (0, 1)  # the one dead letter, read above

    # And a redrive of that dead letter runs it afresh, to its end
    steps.send(dead["Body"], queue="steps")
    assert steps.deliver("steps") is not None
    assert stepwise.STEPS["u-1"] == [1, 1, 2, 3]
    assert key_record(steps, "stepwise:u-1")["status"] == "COMPLETED"


# --- 5. what follows a batch member's dead letter holds -----------------------------------------------------------

BATCHED = Catalog(
    queues=(
        QueueSpec(
            name="members",
            max_attempts=3,
            jobs=(JobSpec(name="member", handler="tests.functional.sample_jobs.tallied", publishes=("batch_done",)),),
        ),
        QueueSpec(name="callbacks", jobs=(JobSpec(name="batch_done", handler="tests.functional.sample_jobs.tallied"),)),
    )
)
DONE = ("batch_done", "report-1")


@pytest.fixture
def batched(clients: Any) -> Iterator[Harness]:
    tallied.reset()
    yield Harness.provisioned(clients, BATCHED)


def _drain(harness: Harness, queue: str, rounds: int = 10) -> None:
    """Deliver until the queue is empty, making what was handed back visible again at once."""
    for _ in range(rounds):
        invocation = harness.deliver(queue)
        if invocation is None:
            return
        harness.expire_visibility(invocation, queue)


def _batch_item(params: dict[str, Any]) -> bool:
    return str(params.get("Key", {}).get("id", {}).get("S", "")).startswith("batch#")


def _dead_count(params: dict[str, Any]) -> bool:
    return _batch_item(params) and params.get("ExpressionAttributeNames", {}).get("#add") == "dead"


def _callbacks_run(harness: Harness) -> list[str]:
    _drain(harness, "callbacks")
    return [key for key in tallied.KEYS if key.startswith("batch_done:")]


@pytest.mark.parametrize(
    ("event", "matches"),
    [
        ("before-parameter-build.dynamodb.UpdateItem", _dead_count),
        ("before-parameter-build.sqs.SendMessage", lambda params: "callbacks" in str(params.get("QueueUrl", ""))),
    ],
    ids=["its count throttled", "its callback's publish throttled"],
)
def test_a_batch_whose_last_member_is_dead_lettered_publishes_on_complete_once_through_a_fault(
    batched: Harness, event: str, matches: Callable[[dict[str, Any]], bool]
) -> None:
    # Given a batch whose member bad-2 fails permanently, and one of the runtime's calls after its dead letter
    # throttled once
    refused = throttle_once(batched, "members", event, matches)
    batch_id = batched.stack_publisher().batch([("member", "1"), ("member", "bad-2")], on_complete=DONE)

    _drain(batched, "members")

    # Then on_complete ran exactly once, the member was dead-lettered once and never ran again, and its key's
    # record says so as after any dead letter (ENDING, cleared by its redelivery if its count came back), its
    # count no longer owed
    assert refused == [1]
    assert _callbacks_run(batched) == [f"batch_done:batch-{batch_id}-complete"]
    assert len(batched.dead_letters("members")) == 1
    assert tallied.RUNS[("member", "1")] == 1
    record = key_record(batched, "member:bad-2")
    assert record == {} or ("dead_lettered_at" in record and "ending_body" not in record)


def test_a_cancelled_members_count_throttled_once_still_completes_its_batch(batched: Harness) -> None:
    # Given a batch of two whose second member an operator cancelled before it ran, its count throttled once
    batch_id = batched.stack_publisher().batch([("member", "1"), ("member", "2")], on_complete=DONE)
    target = CancelTarget(
        queue="members",
        job="member",
        job_id="2",
        key="member:2",
        expiry_s=BATCHED.queue("members").idempotency_expiry_s,
    )
    assert cancel_job(batched.clients("dynamodb"), batched.deployment.idempotency_table, target, OPERATOR).outcome is (
        CancelOutcome.CANCELLED
    )
    refused = throttle_once(batched, "members", "before-parameter-build.dynamodb.UpdateItem", _dead_count)

    _drain(batched, "members")

    # Then the batch completes all the same: on_complete ran once, and the cancelled member never ran
    assert refused == [1]
    assert _callbacks_run(batched) == [f"batch_done:batch-{batch_id}-complete"]
    assert tallied.RUNS[("member", "2")] == 0


# --- 12. a key's identity includes its tenant ------------------------------------------------------------------


TENANTED = Catalog(
    queues=(
        QueueSpec(
            name="tenanted",
            max_attempts=3,
            jobs=(JobSpec(name="mail", handler="tests.functional.sample_jobs.tallied"),),
        ),
    )
)


@pytest.fixture
def tenanted(clients: Any) -> Iterator[Harness]:
    tallied.reset()
    yield Harness.provisioned(clients, TENANTED)


def _publish(harness: Harness, tenant: str | None, entity_id: str = "9001") -> None:
    body = {"job": "mail", "id": entity_id, **({"tenant": tenant} if tenant else {})}
    harness.send(json.dumps(body), queue="tenanted")


def test_two_tenants_jobs_for_the_same_id_both_run(tenanted: Harness) -> None:
    # Given two tenants publishing the same job for their own order 9001, and a producer without a tenant too
    for tenant in ("acme", "globex", None):
        _publish(tenanted, tenant)

    _drain(tenanted, "tenanted")

    # Then each ran once, under a key of its own
    assert sorted(tallied.KEYS) == ["mail:9001", "mail@acme 9001", "mail@globex 9001"]
    # and a copy of one tenant's job is still that tenant's duplicate
    _publish(tenanted, "acme")
    _drain(tenanted, "tenanted")
    assert len(tallied.KEYS) == 3


def test_a_key_without_a_tenant_cant_spell_a_tenants_key(tenanted: Harness) -> None:
    # Given a producer that sends, without a tenant, the key a tenant's job would have if keys were only joined
    tenanted.send(json.dumps({"job": "mail", "id": "1", "key": "acme 9001"}), queue="tenanted")
    tenanted.send(json.dumps({"job": "mail", "id": "1", "key": "acme:9001"}), queue="tenanted")
    _drain(tenanted, "tenanted")

    # When the tenant publishes its own job
    _publish(tenanted, "acme")
    _drain(tenanted, "tenanted")

    # Then it runs: nothing another producer sent stands for it
    assert "mail@acme 9001" in tallied.KEYS
    assert tallied.RUNS[("mail", "9001")] == 1


def _previous_runtimes_record(harness: Harness, key: str, **attributes: Any) -> None:
    """A key's record as the runtime before tenant-scoped keys left it (its key `<job>:<id>`, whatever the tenant)."""
    from sqs_jobs.worker.settings import idempotency_record_id

    item = {"id": {"S": idempotency_record_id(key)}, "expiration": {"N": str(int(time.time()) + 3600)}}
    for name, value in attributes.items():
        item[name] = {"N": str(value)} if isinstance(value, int) else {"S": value}
    harness.clients("dynamodb").put_item(TableName=harness.deployment.idempotency_table, Item=item)


def test_a_tenants_message_in_flight_across_the_upgrade_never_runs_a_key_that_completed(tenanted: Harness) -> None:
    # Given acme's job for 9001 completed before the upgrade, under the key `mail:9001`, and its copy still queued
    _previous_runtimes_record(tenanted, "mail:9001", status="COMPLETED", data="null")
    _publish(tenanted, "acme")

    _drain(tenanted, "tenanted")

    # Then the copy is its duplicate: it does not run again
    assert tallied.KEYS == []
    assert any("JobDuplicate" in document for document in tenanted.metrics())


def test_a_tenants_job_retrying_across_the_upgrade_counts_on_under_its_old_key(tenanted: Harness) -> None:
    # Given acme's job for 9001 failed twice of its 3 runs before the upgrade, under the key `mail:9001`
    _previous_runtimes_record(tenanted, "mail:9001", status="FAILED", runs=2, last_error_type="TimeoutError")
    tallied.FIXED.clear()
    _publish(tenanted, "acme", entity_id="9001")

    _drain(tenanted, "tenanted")

    # Then it runs once more, as its third run, under the key its earlier runs had (what a downstream saw)
    assert tallied.KEYS == ["mail:9001"]
    assert key_record(tenanted, "mail:9001")["runs"] == 3


def test_once_old_keys_can_no_longer_live_a_tenants_job_looks_for_none(tenanted: Harness) -> None:
    from sqs_jobs.worker.tenant_keys import MARKER_ID

    # Given tenant-scoped keys began longer ago than the queue's idempotency expiry
    since = time.time() - TENANTED.queue("tenanted").idempotency_expiry_s - 60
    tenanted.clients("dynamodb").put_item(
        TableName=tenanted.deployment.idempotency_table,
        Item={"id": {"S": MARKER_ID}, "since": {"N": f"{since:.3f}"}},
    )
    reads: list[str] = []
    tenanted.worker_clients("tenanted").register(
        "before-parameter-build.dynamodb.GetItem",
        lambda params, **_: reads.append(str(params["Key"]["id"]["S"])),
    )
    _publish(tenanted, "acme")

    _drain(tenanted, "tenanted")

    # Then the job runs under its tenant's key, and the only read is the marker's
    assert tallied.KEYS == ["mail@acme 9001"]
    assert reads == [MARKER_ID]


def test_a_cancel_of_a_key_without_a_tenant_never_holds_a_tenants_job(tenanted: Harness) -> None:
    # Given an operator cancelled mail 9001 published without a tenant, before it ever ran (found by the model)
    target = CancelTarget(
        queue="tenanted",
        job="mail",
        job_id="9001",
        key="mail:9001",
        expiry_s=TENANTED.queue("tenanted").idempotency_expiry_s,
    )
    assert cancel_job(
        tenanted.clients("dynamodb"), tenanted.deployment.idempotency_table, target, OPERATOR
    ).outcome is (CancelOutcome.CANCELLED)

    # When a tenant publishes its own mail for its 9001
    _publish(tenanted, "acme")
    _drain(tenanted, "tenanted")

    # Then it runs, under its tenant's key: the cancel was of another job's key
    assert tallied.KEYS == ["mail@acme 9001"]


# --- found by the model: a dead letter's message redelivered after its invocation died ------------------------------

PLAIN = QueueSpec(
    name="plain",
    max_attempts=3,
    jobs=(JobSpec(name="tallied_job", handler="tests.functional.sample_jobs.tallied", time_limit_s=5),),
)


@pytest.fixture
def plain(clients: Any) -> Iterator[Harness]:
    tallied.reset()
    yield Harness.provisioned(clients, Catalog(queues=(PLAIN,)))


def test_a_dead_lettered_message_redelivered_after_its_invocation_died_is_acknowledged_not_run_again(
    plain: Harness,
) -> None:
    # Given a job that fails permanently, dead-lettered by an environment that dies before its answer
    message_id = plain.send(envelope("tallied_job", "bad-1"), queue="plain")
    crashed = plain.mapping("plain", chaos=Chaos(ChaosSettings(crash=1.0))).poll_once(plain.worker("plain").handle)
    assert crashed is not None and crashed.crashed and crashed.deleted == []

    # When SQS hands the same message out again, its data fixed meanwhile
    tallied.FIXED.add("bad-1")
    plain.expire_visibility(crashed, "plain")
    redelivered = plain.deliver("plain")

    # Then it is acknowledged without a run, and the DLQ holds its one dead letter
    assert redelivered is not None and redelivered.deleted == [message_id]
    assert tallied.RUNS[("tallied_job", "bad-1")] == 0
    [dead] = plain.dead_letters("plain")
    assert attributes_of(dead)["jobs.attempts"] == "1"

    # And a redrive of that dead letter runs it, as a new life
    plain.send(dead["Body"], queue="plain")
    assert (redriven := plain.deliver("plain")) is not None and redriven.failed_ids == []
    assert tallied.RUNS[("tallied_job", "bad-1")] == 1
    assert key_record(plain, "tallied_job:bad-1")["status"] == "COMPLETED"


def test_a_job_the_runtime_publishes_twice_is_one_message_to_its_keys_dead_letter(plain: Harness) -> None:
    # Given a job the runtime publishes (a follow-up, a callback, a chain's next step), sent twice as a publish
    # retried after a fault sends it, with the worker's own credentials
    publisher = routed_publisher(
        {"tallied_job": ("plain", plain.deployment.queues["plain"].url)}, plain.worker_clients("plain")("sqs")
    )
    job = Envelope(job="tallied_job", id="bad-2")
    first = publisher.publish_many([job])

    # When the first copy is dead-lettered (it fails permanently), and the second is sent after it
    assert (dead_lettered := plain.deliver("plain")) is not None and dead_lettered.deleted == first
    tallied.FIXED.add("bad-2")
    second = publisher.publish_many([job])
    assert (duplicate := plain.deliver("plain")) is not None and duplicate.deleted == second

    # Then the second is that message again: acknowledged, not run as the key's second life
    assert tallied.RUNS[("tallied_job", "bad-2")] == 0
    assert len(plain.dead_letters("plain")) == 1

    # While a producer's publish of the same job is a new message, and runs
    plain.send(envelope("tallied_job", "bad-2"), queue="plain")
    plain.deliver("plain")
    assert tallied.RUNS[("tallied_job", "bad-2")] == 1


def test_a_dead_letters_record_write_throttled_once_still_answers_its_redelivery(plain: Harness) -> None:
    # Given the write that keeps a dead-lettered key's record (ENDING) throttled once
    refused = throttle_once(
        plain,
        "plain",
        "before-parameter-build.dynamodb.UpdateItem",
        lambda params: "#ending_message" in params.get("UpdateExpression", ""),
    )
    message_id = plain.send(envelope("tallied_job", "bad-3"), queue="plain")

    # When the job is dead-lettered by an environment that dies before its answer
    crashed = plain.mapping("plain", chaos=Chaos(ChaosSettings(crash=1.0))).poll_once(plain.worker("plain").handle)
    assert crashed is not None and crashed.crashed and refused == [1]
    plain.expire_visibility(crashed, "plain")
    redelivered = plain.deliver("plain")

    # Then its second try kept the record, and the redelivery is acknowledged with no second dead letter
    assert redelivered is not None and redelivered.deleted == [message_id]
    assert len(plain.dead_letters("plain")) == 1


def test_two_copies_of_a_published_job_whose_dead_letter_is_pending_send_one_dead_letter(plain: Harness) -> None:
    # Given a job the runtime publishes (a chain's next step, sent again after its batch mark failed), whose first
    # copy failed permanently while the DLQ refused its dead letter: its record keeps the dead letter pending
    dlq_url = plain.deployment.queues["plain"].dlq_url
    refused = throttle_once(
        plain, "plain", "before-parameter-build.sqs.SendMessage", lambda params: params["QueueUrl"] == dlq_url
    )
    publisher = routed_publisher(
        {"tallied_job": ("plain", plain.deployment.queues["plain"].url)}, plain.worker_clients("plain")("sqs")
    )
    job = Envelope(job="tallied_job", id="bad-4")
    first = publisher.publish_many([job])
    pending = plain.deliver("plain")
    assert pending is not None and pending.failed_ids == first and refused == [1]
    assert key_record(plain, "tallied_job:bad-4").get("pending_dead_letter")
    second = publisher.publish_many([job])
    plain.expire_visibility(pending, "plain")

    # When both copies come in one batch, run side by side (each DLQ send waits a moment for the other's)
    arrived = threading.Barrier(2)

    def meet(params: dict[str, Any], **_: Any) -> None:
        if params.get("QueueUrl") == dlq_url:
            with contextlib.suppress(threading.BrokenBarrierError):
                arrived.wait(timeout=1.0)

    plain.worker_clients("plain").register("before-parameter-build.sqs.SendMessage", meet)
    both = plain.deliver("plain")
    assert both is not None and sorted(r["messageId"] for r in both.event["Records"]) == sorted(first + second)
    plain.drain("plain")
    for _ in range(3):  # a copy handed back while the other held the key comes back for its answer
        plain.expire_visibility(both, "plain")
        if (again := plain.deliver("plain")) is None:
            break
        both = again

    # Then they are one message to the key's dead letter: one dead letter, and neither copy left on the queue
    assert len(plain.dead_letters("plain")) == 1
    assert plain.queue_counts("plain") == (0, 0)
    assert tallied.RUNS[("tallied_job", "bad-4")] == 0
