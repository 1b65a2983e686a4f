"""Deadlines that hold: a record's time is judged from the invocation's start (a cold start's build included),
and the runtime's own AWS calls fit the time the invocation has left."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from moto.dynamodb.models import DynamoDBBackend
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

import sqs_jobs.worker.entry
from sqs_jobs.local.emulator import EventSourceMapping
from sqs_jobs.local.moto_locks import serialize_moto
from sqs_jobs.local.moto_senders import record_senders
from sqs_jobs.local.provision import provision
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import CALL_BOUNDS, ClientFactory, call_bound, new_session
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.runtime import Worker
from sqs_jobs.worker.settings import WorkerSettings
from tests.functional.conftest import Harness, envelope
from tests.functional.sample_jobs import flaky

SLOW_BUILD_S = 2.0
FUNCTION_TIMEOUT_S = 8
# A job at the longest time limit the catalog accepts for the function timeout: 8 s less the settle margin and
# the invocation's start.
AT_THE_LIMIT = QueueSpec(
    name="limit",
    function_timeout_s=FUNCTION_TIMEOUT_S,
    jobs=(JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky", time_limit_s=5),),
)
CATALOG = Catalog(queues=(AT_THE_LIMIT,))


@pytest.fixture
def limit(clients: ClientFactory) -> Iterator[Harness]:
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    flaky.ATTEMPTS_SEEN.clear()
    yield Harness.provisioned(clients, CATALOG)


@pytest.mark.slow
def test_a_slow_cold_start_never_dead_letters_a_good_job_as_unservable(
    limit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the Lambda entry point on a fresh environment, whose first build of the worker takes 2 s
    assert AT_THE_LIMIT.max_time_limit_s == 5
    settings = limit.deployment.worker_settings("limit")
    built: list[Worker] = []

    def slow_build(settings: WorkerSettings, clients: ClientFactory | None = None) -> Worker:
        time.sleep(SLOW_BUILD_S)
        worker = Worker(
            settings=settings,
            clients=limit.worker_clients("limit"),
            observability=Observability.create(output=limit.output),
        )
        built.append(worker)
        return worker

    monkeypatch.setattr(sqs_jobs.worker.entry, "_worker", None)
    monkeypatch.setattr(sqs_jobs.worker.entry, "build_worker", slow_build)
    monkeypatch.setattr(WorkerSettings, "from_environ", lambda environ: settings)
    limit.send(envelope("flaky", "1"), queue="limit")
    mapping = limit.mapping("limit")

    # When its first invocation (the function's 8 s) delivers a job at the catalog's longest limit (5 s)
    first = mapping.poll_once(sqs_jobs.worker.entry.handler)

    # Then the job is not dead-lettered as unservable: the build used the time, so it is handed back unrun...
    assert first is not None and len(first.failed_ids) == 1
    assert limit.dead_letters("limit") == []
    [handed_back] = [line for line in limit.log_lines() if line.get("reason") == "no_time" and "message" in line]
    assert handed_back["time_limit_s"] == AT_THE_LIMIT.max_time_limit_s
    # ...and the next invocation, warm, runs it
    limit.expire_visibility(first, "limit")
    second = mapping.poll_once(sqs_jobs.worker.entry.handler)
    assert second is not None and second.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == [1]
    assert len(built) == 1


@pytest.mark.parametrize("time_left_s", [0.3, 0.9, 1.6, 2.0, 4.9, 5.0, 13.9, 14.0, 25.0, 26.0, 88.0, 600.0])
def test_a_runtime_call_gets_the_most_generous_bound_that_ends_in_time(time_left_s: float) -> None:
    bound = call_bound(time_left_s)
    shortest = min(CALL_BOUNDS, key=lambda candidate: candidate.worst_s)
    if time_left_s >= shortest.worst_s:
        assert bound in CALL_BOUNDS and bound.worst_s <= time_left_s
        assert all(other.worst_s <= bound.worst_s or other.worst_s > time_left_s for other in CALL_BOUNDS)
    else:
        # Less than the shortest bound: one attempt, sharing what is left (at least a quarter second each).
        assert bound.attempts == 1 and bound.connect_s == bound.read_s
        assert bound.worst_s <= max(time_left_s, 0.5)


def test_the_runtimes_clients_carry_the_bound_and_the_jobs_keep_theirs(clients: ClientFactory) -> None:
    runtime = clients.within("dynamodb", 3.0)
    config: Any = runtime.meta.config
    bound = call_bound(3.0)
    assert (config.connect_timeout, config.read_timeout) == (bound.connect_s, bound.read_s)
    assert config.retries["total_max_attempts"] == bound.attempts
    assert clients.within("dynamodb", 3.0) is runtime  # one client per bound
    jobs: Any = clients("dynamodb").meta.config
    assert (jobs.connect_timeout, jobs.read_timeout) == (5, 20)


# --- the runtime's own calls, on real sockets: a moto server whose DynamoDB answers slowly ------------------------

SLOW_STORE_S = 6.0
SLOW = QueueSpec(
    name="slow",
    function_timeout_s=FUNCTION_TIMEOUT_S,
    parallel_records=1,
    jobs=(JobSpec(name="slow_flaky", handler="tests.functional.sample_jobs.flaky", time_limit_s=2),),
)


@pytest.fixture
def moto_server() -> Iterator[str]:
    serialize_moto()
    record_senders()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def slowly(operation: Any) -> Any:
    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_STORE_S)
        return operation(*args, **kwargs)

    return slow


@pytest.mark.slow
def test_with_a_slow_idempotency_store_the_invocation_still_answers_before_its_deadline(
    moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky.ATTEMPTS_SEEN.clear()
    session = new_session(region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    clients = ClientFactory(session=session, endpoint_url=moto_server)
    catalog = Catalog(queues=(SLOW,))
    deployment = provision(clients, catalog=catalog)
    worker_session = deployment.worker_session(clients("sts"), "slow", "slow-worker")
    output = io.StringIO()
    worker = Worker(
        settings=deployment.worker_settings("slow"),
        clients=ClientFactory(session=worker_session, endpoint_url=moto_server),
        observability=Observability.create(output=output),
    )
    queue = deployment.queues["slow"]
    clients("sqs").send_message(QueueUrl=queue.url, MessageBody=envelope("slow_flaky", "1"))
    # Every write to the idempotency table takes 6 s to answer (the server thread waits; the socket stays open)
    for operation in ("put_item", "update_item"):
        monkeypatch.setattr(DynamoDBBackend, operation, slowly(getattr(DynamoDBBackend, operation)))
    mapping = EventSourceMapping(
        queue=queue, sqs_client=clients("sqs"), handler_factory=lambda: worker.handle, function_name="slow-worker"
    )

    started = time.monotonic()
    invocation = mapping.poll_once(worker.handle)
    elapsed_s = time.monotonic() - started

    # The run's start write gave up within the time it had (the function's 8 s less the 2 s limit and the settle
    # margin), the record went back as the runtime's fault, and the answer came before the deadline
    assert invocation is not None and not invocation.timed_out
    assert elapsed_s < FUNCTION_TIMEOUT_S - 1
    assert len(invocation.failed_ids) == 1
    lines = [json.loads(line) for line in output.getvalue().splitlines() if line.startswith("{")]
    assert [line["reason"] for line in lines if line.get("message") == "handed back unrun; visible again later"] == [
        "runtime_fault"
    ]
    # Nothing multiplied: the one message, back after its backoff
    attributes = clients("sqs").get_queue_attributes(QueueUrl=queue.url, AttributeNames=["All"])["Attributes"]
    assert (
        int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"]) == 1
    )
    assert flaky.ATTEMPTS_SEEN == []
