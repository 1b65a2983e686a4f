"""End to end through the local engine: moto server + the event source emulator + the real worker."""

from __future__ import annotations

import io
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner

from example.demo import run_demo
from functions.catalog import CATALOG
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.local.engine import LocalEngine, free_port
from sqs_jobs.worker.clients import new_session
from tests.e2e.processes import jobctl_local

pytestmark = pytest.mark.e2e


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(port=0, worker_output=io.StringIO(), catalog=CATALOG) as running:
        yield running


def test_demo_scenario_passes_on_the_engine(engine: LocalEngine) -> None:
    result = run_demo(engine)
    assert result.checks, "the demo made no checks"
    failed = [label for label, passed in result.checks if not passed]
    assert failed == []


def test_engine_stats_count_invocations_and_deletes(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    sqs = engine.clients()("sqs")
    sqs.send_message(QueueUrl=engine.deployment.queues["orders"].url, MessageBody="garbage")
    assert engine.wait_until_idle(timeout_s=30)
    stats = engine.stats()["orders"]
    assert stats["records"] >= 1  # the garbage, and the heartbeat canary's first beat
    assert stats["deleted"] == stats["records"]  # the garbage dead-lettered by the runtime, so acknowledged
    assert stats["invocation_errors"] == 0


def test_a_send_refused_for_an_attribute_name_leaves_the_queue_draining(engine: LocalEngine) -> None:
    # moto 5.2.5 stored such a message, and then every receive of the queue's pollers failed on it, forever
    assert engine.deployment is not None
    sqs = engine.clients()("sqs")
    orders = engine.deployment.queues["orders"]
    with pytest.raises(ClientError) as refused:
        sqs.send_message(
            QueueUrl=orders.url,
            MessageBody=json.dumps({"job": "order_confirmation", "id": "88"}),
            MessageAttributes={"trace id": {"DataType": "String", "StringValue": "x"}},
        )
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    sqs.send_message(QueueUrl=orders.url, MessageBody=json.dumps({"job": "order_confirmation", "id": "89"}))
    assert engine.wait_until_idle(timeout_s=30)
    dead = sqs.receive_message(QueueUrl=orders.dlq_url, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(message["Body"])["id"] for message in dead] == ["89"]  # no such order: it ran, only it
    assert engine.stats()["orders"]["invocation_errors"] == 0


def test_jobctl_enqueue_publishes_through_the_stack_parameters(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    env = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": engine.region}
    result = CliRunner().invoke(
        jobctl,
        ["--endpoint-url", engine.endpoint_url, "--output", "json", "enqueue", "orders", "order_confirmation", "77"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["job"] == "order_confirmation" and payload["id"] == "77"
    assert engine.wait_until_idle(timeout_s=30)
    # Order 77 doesn't exist: the job must have run and dead-lettered it.
    dlq = engine.clients()("sqs").receive_message(
        QueueUrl=engine.deployment.queues["orders"].dlq_url, MessageAttributeNames=["All"]
    )["Messages"]
    assert [json.loads(m["Body"])["id"] for m in dlq] == ["77"]


@pytest.mark.parametrize(
    ("args", "exit_code", "needle"),
    [
        (["enqueue", "nosuch", "order_confirmation", "1"], 2, "unknown queue 'nosuch'"),
        (["enqueue", "orders", "send_fax", "1"], 2, "accepted: order_confirmation"),
        (["enqueue", "orders", "order_confirmation", ""], 2, "field 'id' is empty"),
        # Could not check: the stack isn't there.
        (["--stack", "Nope", "enqueue", "orders", "order_confirmation", "1"], 3, "no SSM parameter /Nope/queues"),
        (["enqueue", "orders", "order_confirmation", "1", "--stack", "Nope"], 3, "no SSM parameter /Nope/queues"),
        (["enqueue", "orders"], 2, "Missing argument"),
    ],
)
def test_jobctl_errors_are_one_line_with_the_right_exit_code(
    engine: LocalEngine, args: list[str], exit_code: int, needle: str
) -> None:
    env = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": engine.region}
    result = CliRunner().invoke(jobctl, ["--endpoint-url", engine.endpoint_url, *args], env=env)
    assert result.exit_code == exit_code
    assert needle in result.output
    assert "Traceback" not in result.output


def test_jobctl_local_serves_any_boto3_client_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    with jobctl_local("--port", str(port)) as process:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert f"http://127.0.0.1:{port}" in banner, banner
        endpoint = f"http://127.0.0.1:{port}"
        session = new_session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
        sqs = session.client("sqs", endpoint_url=endpoint)
        url = session.client("ssm", endpoint_url=endpoint).get_parameter(Name="/SqsJobs/queues/orders/url")[
            "Parameter"
        ]["Value"]
        sqs.send_message(QueueUrl=url, MessageBody='{"job": "order_confirmation", "id": "404"}')
        dlq_url = url + "-dlq"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            attributes = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
            if attributes["Attributes"]["ApproximateNumberOfMessages"] == "1":
                break
            time.sleep(0.2)
        else:
            pytest.fail("the engine's worker never dead-lettered the missing order")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
