"""Chaos through the local engine: `jobctl local --chaos` as a user runs it, and the chaos soak at CI size."""

from __future__ import annotations

import io
import json
import select
import signal
import subprocess
import time
from dataclasses import replace
from typing import Any

import pytest

from example.soak import (
    BATCH_COMPLETE_ID,
    BATCH_SUCCESS_ID,
    DEFAULT_CHAOS,
    LIMITED_JOB,
    ODD_RESULT_JOB,
    SoakJob,
    SoakPlan,
    run_soak,
)
from example.soak_jobs import odd_results
from functions.catalog import CATALOG
from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.local.chaos import ChaosSettings
from sqs_jobs.local.engine import LocalEngine, free_port, running_engine
from sqs_jobs.specs import Catalog
from sqs_jobs.worker.clients import new_session
from sqs_jobs.worker.deadletter import ERROR_TYPE
from sqs_jobs.worker.errors import JobCancelledError
from tests.e2e.processes import jobctl_local

pytestmark = pytest.mark.e2e

# The floor for the soak in CI.
CI_SOAK_JOBS = 2000


def test_jobctl_local_with_chaos_fails_downstream_calls_and_keeps_the_job() -> None:
    port = free_port()
    with jobctl_local("--port", str(port), "--chaos", "transient=1,seed=3") as process:
        assert process.stdout is not None
        # Its banner: the engine's line, one per catalog queue, one per resource, then the chaos
        banner = [process.stdout.readline() for _ in range(1 + len(CATALOG.queues) + len(CATALOG.resources) + 1)]
        assert any("chaos: transient=1.0" in line for line in banner), banner
        # Then, for a catalog with durable jobs, where a service's Lambda client sends their events.
        callbacks = process.stdout.readline()
        assert "durable executions' callbacks (a publisher's lambda_client endpoint_url): http://" in callbacks
        endpoint = f"http://127.0.0.1:{port}"
        session = new_session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
        ssm, sqs = session.client("ssm", endpoint_url=endpoint), session.client("sqs", endpoint_url=endpoint)
        # A service finds the table where the stack publishes it: its resource parameter.
        orders = ssm.get_parameter(Name="/SqsJobs/resources/orders_table")["Parameter"]["Value"]
        session.client("dynamodb", endpoint_url=endpoint).put_item(
            TableName=orders, Item={"order_id": {"S": "77"}, "email": {"S": "buyer@example.com"}}
        )
        url = ssm.get_parameter(Name="/SqsJobs/queues/orders/url")["Parameter"]["Value"]
        sqs.send_message(QueueUrl=url, MessageBody='{"job": "order_confirmation", "id": "77"}')
        # The worker logs to the engine's stdout: wait for its account of the failed attempt.
        failure = _wait_for_log(process, "job failed; retrying after backoff", timeout_s=30)
        assert failure["job"] == "order_confirmation" and failure["id"] == "77"
        # Its first call (the order's read) already met its service's throttling
        assert failure["classification"] == "transient" and "ProvisionedThroughputExceeded" in failure["error"]
        # Every SES call was throttled: no mail, and the job is neither lost nor dead-lettered.
        assert session.client("ses", endpoint_url=endpoint).get_send_quota()["SentLast24Hours"] == 0
        names: list[Any] = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        # Still there, waiting out its backoff (the heartbeat canary's first beat may be there too).
        assert sum(int(count) for count in counts.values()) >= 1
        dlq = sqs.get_queue_attributes(QueueUrl=url + "-dlq", AttributeNames=names)["Attributes"]
        assert dlq["ApproximateNumberOfMessages"] == "0"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def _wait_for_log(process: subprocess.Popen[str], message: str, timeout_s: float) -> dict[str, Any]:
    """The first JSON log line of the process whose message is `message`."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = process.stdout.readline()
        if not line:
            break  # the process ended
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("message") == message:
                return dict(record)
    pytest.fail(f"no {message!r} log line within {timeout_s}s")


@pytest.mark.timeout(900)
def test_chaos_soak_keeps_every_promise() -> None:
    # The limited job at 6 % (make soak's 2 %): about 25 slow first runs. A slow run is cut with a call in flight
    # only if none of its four quote calls met a fault (about 4 in 10) and no cancel was drawn for it: at 3 % a
    # run saw 3 such cuts, and one under make test's load saw none.
    plan = SoakPlan(jobs=CI_SOAK_JOBS, chaos=DEFAULT_CHAOS, seed=2026, limited_share=0.06)
    report = run_soak(plan, worker_output=io.StringIO())
    text = "\n".join(report.lines())
    print(text)  # the report, in pytest's output of this test

    assert report.passed, text
    # The planned jobs, and the batch's callbacks (its members are among the planned: checked as every job is).
    callbacks = [job for job in report.jobs if job.id in (BATCH_COMPLETE_ID, BATCH_SUCCESS_ID)]
    assert len(report.jobs) - len(callbacks) == CI_SOAK_JOBS
    assert SoakJob(ODD_RESULT_JOB, BATCH_COMPLETE_ID) in callbacks
    # With a batch's records side by side on the example queues, the FIFO one included.
    assert all(report.records_in_parallel[queue] > 1 for queue in ("orders", "invoices", "order_updates"))
    # The faults really happened, each kind: on the jobs' AWS calls of every service they use and their HTTP
    # calls, the invoicing API's own, the deliveries, the environments, the store; and what the plan puts in.
    faults = ["transient.ses", "transient.dynamodb", "transient.s3", "transient.http", "transient.invoicing"]
    faults += ["crash", "duplicate", "slow_start", "slow_store", "drip.invoicing", "big_attributes", "fifo.groups"]
    for fault in faults:
        assert report.injected.get(fault, 0) > 0, (fault, report.injected)
    # The runtime's own calls were throttled, DynamoDB's and SQS's
    for service in ("dynamodb", "sqs"):
        assert any(name.startswith(f"runtime.{service}.") for name in report.injected), report.injected
    # The operator cancelled keys and undid some; the limited job's runs were cut with a call in flight
    assert report.injected["cancel"] > 0 and report.injected["undo"] > 0
    said = [outcome for outcomes in report.observed.cancel_outcomes.values() for outcome in outcomes]
    assert "cancelled" in said and "withdrawn" in said, said
    assert report.observed.cut_calls[LIMITED_JOB] > 0
    assert len({run.customer for run in report.observed.limited_runs}) < report.injected["limited"]
    # Durable jobs ran, and those whose code is not deterministic each ended in one dead letter (check())
    statuses = {record.status for record in report.observed.durable_records.values()}
    assert report.injected["durable.drifting"] > 0 and statuses == {"SUCCEEDED", "FAILED"}, statuses
    # Some waited for their confirmation, each sent as a service sends it and taken once (check() counts them).
    assert (
        report.injected["durable.awaiting"] > 0 and report.observed.confirmations == report.injected["durable.awaiting"]
    )
    results = {name.removeprefix("result.") for name in report.injected if name.startswith("result.")}
    assert results & odd_results.DROPPED and results - odd_results.DROPPED, results
    # Dead letters of messages with big non-ASCII attributes were read back with them (the check compares them).
    assert report.dead_letters_with_big_attributes > 0
    # The event source's own counts agree with what chaos injected.
    assert set(report.engine_stats) == set(CATALOG.queue_names)
    assert sum(stats["crashes"] for stats in report.engine_stats.values()) == report.injected["crash"]
    assert sum(stats["duplicates"] for stats in report.engine_stats.values()) <= report.injected["duplicate"]
    # The DLQ holds each broken job (but one the operator cancelled before it ran), and nothing else but the runs
    # a cancel stopped (JobCancelledError): how many of those there are depends on the timing of the cancels.
    broken = [job for job in report.jobs if job.permanent]
    by_data = [
        ref
        for ref, letters in report.observed.dead_letters.items()
        if any(letter.get(ERROR_TYPE) != JobCancelledError.__name__ for letter in letters)
    ]
    assert broken and set(by_data) <= {job.ref for job in broken}, by_data
    assert len(by_data) >= len([job for job in broken if job.cancel is None]), (len(by_data), len(broken))
    assert isinstance(report.chaos, ChaosSettings) and report.chaos.seed == 2026


# One queue on the soak's clock: 8 s invocations, a 4 s time limit (half the timeout), two environments.
SHORT = Catalog(
    resources=APP_RESOURCES, queues=(replace(CATALOG.queue("orders"), function_timeout_s=8, max_concurrency=2),)
)


def _order(engine: LocalEngine, order_id: str) -> None:
    assert engine.deployment is not None
    item = {"order_id": {"S": order_id}, "email": {"S": f"{order_id}@example.com"}}
    engine.clients()("dynamodb").put_item(TableName=engine.deployment.resources["orders_table"], Item=item)
    url = engine.deployment.queues["orders"].url
    engine.clients()("sqs").send_message(
        QueueUrl=url, MessageBody=json.dumps({"job": "order_confirmation", "id": order_id})
    )


def test_a_slow_cold_start_hands_its_first_batch_back_unrun_and_the_job_runs_once_after() -> None:
    output = io.StringIO()
    chaos = ChaosSettings(slow_start=1.0, slow_start_s=4.0, seed=1)
    with running_engine(port=0, catalog=SHORT, chaos=chaos, worker_output=output) as engine:
        _order(engine, "88")
        assert engine.wait_until_idle(timeout_s=60)
        mails = [mail for mail in engine.sent_mail() if mail["subject"] == "Your order 88 is confirmed"]
        assert engine.chaos is not None and engine.chaos.injected()["slow_start"] == 2  # each new environment
    lines = [json.loads(line) for line in output.getvalue().splitlines() if line.startswith("{")]
    # The build took 4 of the invocation's 8 s: too little left for the 4 s limit and its margin, so the batch
    # went back unrun (never dead-lettered as unservable), and the warm environment ran the job once.
    handed_back = [line for line in lines if line.get("message") == "handed back unrun; visible again later"]
    assert handed_back and all(line["reason"] == "no_time" for line in handed_back)
    assert not [line for line in lines if line.get("message") == "job dead-lettered"]
    assert len(mails) == 1


def test_a_slow_idempotency_store_answers_its_writes_late_on_the_socket_and_only_them() -> None:
    chaos = ChaosSettings(slow_store=1.0, slow_store_s=1.0, seed=1)
    with running_engine(port=0, catalog=SHORT, chaos=chaos, worker_output=io.StringIO()) as engine:
        assert engine.deployment is not None
        dynamodb = engine.clients()("dynamodb")
        started = time.monotonic()
        dynamodb.put_item(TableName=engine.deployment.resources["orders_table"], Item={"order_id": {"S": "1"}})
        assert time.monotonic() - started < 0.5  # another table: at once
        started = time.monotonic()
        dynamodb.put_item(TableName=engine.deployment.idempotency_table, Item={"id": {"S": "probe"}})
        assert time.monotonic() - started >= 1.0  # the idempotency table: a second late...
        assert "Item" in dynamodb.get_item(TableName=engine.deployment.idempotency_table, Key={"id": {"S": "probe"}})
        # ...and a job still runs once, its start and completion each answered a second late
        _order(engine, "89")
        assert engine.wait_until_idle(timeout_s=60)
        assert [mail["subject"] for mail in engine.sent_mail()].count("Your order 89 is confirmed") == 1
        assert engine.chaos is not None and engine.chaos.injected()["slow_store"] >= 3
