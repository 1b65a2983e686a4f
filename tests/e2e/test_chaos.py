"""Chaos through the local engine: `jobctl local --chaos` as a user runs it, and the chaos soak at CI size."""

from __future__ import annotations

import io
import json
import select
import signal
import subprocess
import time
from typing import Any

import boto3
import pytest

from jobctl.local.chaos import ChaosSettings
from jobctl.local.engine import free_port
from jobctl.soak import DEFAULT_CHAOS, SoakPlan, run_soak
from sqs_jobs.catalog import CATALOG
from tests.e2e.processes import jobctl_local

pytestmark = pytest.mark.e2e

# The floor for the soak in CI.
CI_SOAK_JOBS = 2000


def test_jobctl_local_with_chaos_fails_downstream_calls_and_keeps_the_job() -> None:
    port = free_port()
    with jobctl_local("--port", str(port), "--chaos", "transient=1,seed=3") as process:
        assert process.stdout is not None
        # Its banner: the engine's line, one per catalog queue, the invoicing API's, then the chaos
        banner = [process.stdout.readline() for _ in range(len(CATALOG.queues) + 3)]
        assert any("chaos: transient=1.0" in line for line in banner), banner
        endpoint = f"http://127.0.0.1:{port}"
        session = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
        ssm, sqs = session.client("ssm", endpoint_url=endpoint), session.client("sqs", endpoint_url=endpoint)
        session.client("dynamodb", endpoint_url=endpoint).put_item(
            TableName="SqsJobs-orders", Item={"order_id": {"S": "77"}, "email": {"S": "buyer@example.com"}}
        )
        url = ssm.get_parameter(Name="/SqsJobs/queues/orders/url")["Parameter"]["Value"]
        sqs.send_message(QueueUrl=url, MessageBody='{"job": "order_confirmation", "id": "77"}')
        # The worker logs to the engine's stdout: wait for its account of the failed attempt.
        failure = _wait_for_log(process, "job failed; retrying after backoff", timeout_s=30)
        assert failure["job"] == "order_confirmation" and failure["id"] == "77"
        assert failure["classification"] == "transient" and "Throttling" in failure["error"]
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
    plan = SoakPlan(jobs=CI_SOAK_JOBS, chaos=DEFAULT_CHAOS, seed=2026)
    report = run_soak(plan, worker_output=io.StringIO())
    text = "\n".join(report.lines())
    print(text)  # the report, in pytest's output of this test

    assert report.passed, text
    assert len(report.jobs) == CI_SOAK_JOBS
    # With a batch's records side by side on both example queues.
    assert report.records_in_parallel["orders"] > 1 and report.records_in_parallel["invoices"] > 1
    # The faults really happened, each kind, in both downstreams.
    for fault in ("transient.ses", "transient.invoicing", "crash", "duplicate"):
        assert report.injected.get(fault, 0) > 0, (fault, report.injected)
    # The event source's own counts agree with what chaos injected.
    assert set(report.engine_stats) == set(CATALOG.queue_names)
    assert sum(stats["crashes"] for stats in report.engine_stats.values()) == report.injected["crash"]
    assert sum(stats["duplicates"] for stats in report.engine_stats.values()) <= report.injected["duplicate"]
    broken = sum(job.permanent for job in report.jobs)
    assert broken > 0 and report.dead_lettered == broken
    assert isinstance(report.chaos, ChaosSettings) and report.chaos.seed == 2026
