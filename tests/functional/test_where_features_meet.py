"""Where the features meet: key concurrency, cancel, batches and tenants, each beside a job's run and a fault on one
of the runtime's own AWS calls, on the real worker and moto (docs/key-life.md). Each test is one of the cases an
outside trial found breaking a promise; each failed before its fix."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.exceptions import ClientError

from functions.worker.key_concurrency import slot_id
from sqs_jobs.flow_control import KeyConcurrency, key_concurrency_name
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from tests.functional.conftest import Harness, attributes_of, key_record
from tests.functional.sample_jobs import tallied

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
        # Then it is held: the downstream never has two of c1's calls at once
        assert second is not None and len(second.failed_ids) == 1
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
