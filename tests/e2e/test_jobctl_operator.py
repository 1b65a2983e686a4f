"""jobctl's operator commands through the local engine: output, JSON shape, exit codes, filters, bad usage."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from jobctl.cli import main as jobctl
from jobctl.local.engine import LocalEngine
from sqs_jobs.catalog import CATALOG

pytestmark = pytest.mark.e2e
MISSING = ("501", "502", "503")


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    """An engine whose orders DLQ holds three missing orders and one malformed message."""
    with LocalEngine(port=0, worker_output=io.StringIO()) as running:
        assert running.deployment is not None
        sqs = running.clients()("sqs")
        url = running.deployment.queues["orders"].url
        for order_id in MISSING:
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"job": "order_confirmation", "id": order_id}))
        sqs.send_message(QueueUrl=url, MessageBody="not json")
        assert running.wait_until_idle(timeout_s=30)
        yield running


def run(engine: LocalEngine, *args: str) -> Result:
    env = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": engine.region}
    env["COLUMNS"] = "200"  # a wide terminal, so tables show whole words
    return CliRunner().invoke(jobctl, ["--endpoint-url", engine.endpoint_url, *args], env=env)


def as_json(result: Result) -> Any:
    return json.loads(result.output)


def test_status_shows_the_signals_and_exits_1_while_the_dlq_is_not_empty(engine: LocalEngine) -> None:
    time.sleep(1)  # let the metrics agent publish the queue ages once more
    result = run(engine, "--output", "json", "status")
    assert result.exit_code == 1
    payload = as_json(result)
    queues = {queue["name"]: queue for queue in payload["queues"]}
    assert set(queues) == set(CATALOG.queue_names)
    orders = queues["orders"]
    for key in ("name", "url", "dlq_url", "backlog", "in_flight", "oldest_age_s", "dlq_depth", "healthy"):
        assert key in orders
    assert orders["dlq_depth"] == 4
    assert orders["healthy"] is False
    assert orders["failed"] == 4 and orders["failure_rate"] == 1.0
    assert orders["last_heartbeat_at"] is not None  # the canary's first beat went through
    assert queues["invoices"]["healthy"] is True
    assert payload["healthy"] is False


def test_status_of_a_healthy_queue_exits_0_and_prints_a_table(engine: LocalEngine) -> None:
    result = run(engine, "status", "invoices")
    assert result.exit_code == 0, result.output
    assert "invoices" in result.output and "healthy" in result.output


def test_dlq_list_groups_by_error_and_reads_without_consuming(engine: LocalEngine) -> None:
    result = run(engine, "--output", "json", "dlq", "list", "orders")
    assert result.exit_code == 0
    payload = as_json(result)
    assert payload["total"] == 4
    counts = {group["error_type"]: group["count"] for group in payload["groups"]}
    assert counts == {"OrderNotFoundError": 3, "EnvelopeNotJSONError": 1}
    assert as_json(run(engine, "--output", "json", "dlq", "list", "orders"))["total"] == 4  # still all there
    by_job = as_json(run(engine, "--output", "json", "dlq", "list", "orders", "--group-by", "job"))
    assert {group["job"]: group["count"] for group in by_job["groups"]} == {"order_confirmation": 3, "(unknown)": 1}


def test_dlq_show_prints_the_evidence_and_fails_for_an_unknown_id(engine: LocalEngine) -> None:
    sample = as_json(run(engine, "--output", "json", "dlq", "list", "orders"))["groups"][0]["sample_message_id"]
    shown = run(engine, "--output", "json", "dlq", "show", "orders", sample)
    assert shown.exit_code == 0
    details = as_json(shown)
    assert details["message_id"] == sample
    assert details["attempts"] == 1 and details["failure"] == "permanent"
    assert "Traceback" in details["traceback"]
    missing = run(engine, "dlq", "show", "orders", "no-such-message")
    assert missing.exit_code == 1
    assert "no message 'no-such-message'" in missing.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["dlq", "redrive", "orders", "--all", "--job", "order_confirmation"], "--all moves everything"),
        (["dlq", "discard", "orders", "--error-type", "X"], "add --yes"),
        (["dlq", "redrive", "orders", "--match", " "], "--match is empty"),
        (["dlq", "redrive", "orders", "--error-type", "OrderNotFoundError"], "add --yes"),
        (["dlq", "list", "orders", "--group-by", "hour"], "Invalid value"),
        (["dlq", "redrive", "orders", "--error-type", "EnvelopeNotJSONError", "--yes"], "not known to be idempotent"),
    ],
)
def test_bad_usage_exits_2_with_one_clear_line(engine: LocalEngine, args: list[str], needle: str) -> None:
    result = run(engine, *args)
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


def test_unknown_queue_is_bad_usage(engine: LocalEngine) -> None:
    result = run(engine, "dlq", "list", "nosuch")
    assert result.exit_code == 2
    assert "unknown queue 'nosuch'" in result.output


def test_redrive_dry_run_moves_nothing(engine: LocalEngine) -> None:
    result = run(
        engine, "--output", "json", "dlq", "redrive", "orders", "--error-type", "OrderNotFoundError", "--dry-run"
    )
    assert result.exit_code == 0
    payload = as_json(result)
    assert payload["dry_run"] is True and payload["matched"] == 3 and payload["moved"] == 0
    assert as_json(run(engine, "--output", "json", "dlq", "list", "orders"))["total"] == 4


def test_filtered_redrive_moves_only_the_matching_and_verifies_them(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    # The fix for one of the three: order 501 now exists.
    engine.clients()("dynamodb").put_item(
        TableName=engine.deployment.resources["orders_table"],
        Item={"order_id": {"S": "501"}, "email": {"S": "fixed@example.com"}},
    )
    result = run(
        engine,
        "--output",
        "json",
        "dlq",
        "redrive",
        "orders",
        "--error-type",
        "OrderNotFoundError",
        "--yes",
        "--verify-timeout",
        "60",
    )
    payload = as_json(result)
    assert payload["moved"] == 3 and payload["matched"] == 3 and payload["method"] == "client"
    assert payload["verified"] is True
    assert payload["returned_to_dlq"] == 2  # 502 and 503 still don't exist
    assert sorted(letter["id"] for letter in payload["returned"]) == ["502", "503"]
    assert result.exit_code == 1  # something came back: a problem to look at
    mails = [mail for mail in engine.sent_mail() if "fixed@example.com" in mail["destinations"]["ToAddresses"]]
    assert len(mails) == 1
    # The malformed message never matched the filter, so it never moved.
    left = as_json(run(engine, "--output", "json", "dlq", "list", "orders"))
    assert {g["error_type"]: g["count"] for g in left["groups"]} == {"OrderNotFoundError": 2, "EnvelopeNotJSONError": 1}


def test_discard_with_archive_keeps_a_faithful_copy(engine: LocalEngine, tmp_path: Path) -> None:
    archive = tmp_path / "discarded.jsonl"
    result = run(
        engine,
        "--output",
        "json",
        "dlq",
        "discard",
        "orders",
        "--error-type",
        "EnvelopeNotJSONError",
        "--yes",
        "--archive",
        str(archive),
    )
    assert result.exit_code == 0, result.output
    payload = as_json(result)
    assert payload["discarded"] == 1
    [line] = archive.read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["body"] == "not json"
    assert record["error_type"] == "EnvelopeNotJSONError"
    assert record["message_id"] == payload["messages"][0]["message_id"]
    assert "EnvelopeNotJSONError" not in json.dumps(as_json(run(engine, "--output", "json", "dlq", "list", "orders")))


def test_redrive_all_falls_back_to_client_side_on_the_local_engine(engine: LocalEngine) -> None:
    result = run(engine, "--output", "json", "dlq", "redrive", "orders", "--all", "--yes", "--no-verify")
    assert result.exit_code == 0, result.output
    assert "no StartMessageMoveTask: moving client side instead" in result.output
    payload = json.loads(result.output[result.output.index("{") :])
    assert payload["method"] == "client" and payload["moved"] == payload["matched"] == 2
