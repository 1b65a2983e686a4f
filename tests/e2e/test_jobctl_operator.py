"""jobctl's operator commands through the local engine: output, JSON shape, exit codes, filters, bad usage."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from functions.catalog import CATALOG
from sqs_jobs.local.engine import LocalEngine
from tests.e2e.jobctl_runs import as_json, engine_with_dead_letters, run

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    """Shared by the tests that only read or are refused: none of them changes the DLQ (the procedure that does is
    tests/e2e/test_jobctl_procedure.py, with an engine of its own)."""
    with engine_with_dead_letters() as running:
        yield running


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
