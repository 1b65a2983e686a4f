"""Delayed jobs and schedules on the running local engine, through jobctl, on a scheduler clock 120x real time."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner, Result

from functions.catalog import CATALOG
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.local.engine import LocalEngine
from sqs_jobs.local.scheduler import FastClock
from tests.e2e.jobctl_runs import put_order

pytestmark = pytest.mark.e2e

SPEED = 120.0  # 20 minutes pass in 10 seconds


@pytest.fixture(scope="module")
def running_engine() -> Iterator[LocalEngine]:
    with LocalEngine(port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600, catalog=CATALOG) as running:
        yield running


@pytest.fixture
def engine(running_engine: LocalEngine) -> LocalEngine:
    """The engine with its scheduler's clock set to now, running SPEED times faster from here."""
    assert running_engine.scheduler is not None
    running_engine.scheduler.clock = FastClock(SPEED)
    return running_engine


def run(engine: LocalEngine, *args: str) -> Result:
    env = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": engine.region}
    return CliRunner().invoke(jobctl, [*args, "--endpoint-url", engine.endpoint_url], env=env)


def _mails_to(engine: LocalEngine, address: str) -> int:
    return sum(1 for mail in engine.sent_mail() if address in mail["destinations"].get("ToAddresses", []))


def _wait_for(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return bool(condition())


def test_a_job_enqueued_in_20_minutes_arrives_then_and_not_before(engine: LocalEngine) -> None:
    assert engine.scheduler is not None
    put_order(engine, "801", "later@example.com")
    result = run(engine, "enqueue", "orders", "order_confirmation", "801", "--in", "20m", "--output", "json")
    assert result.exit_code == 0, result.output
    name = json.loads(result.stdout)["schedule"]
    assert name.startswith("once-orders.")  # its queue's, which a publisher's grant covers
    listed = json.loads(run(engine, "schedules", "list", "--output", "json").stdout)["schedules"]
    [pending] = [row for row in listed if row["name"] == name]
    assert pending["kind"] == "one-time" and pending["job"] == "order_confirmation" and pending["id"] == "801"
    due = datetime.fromisoformat(pending["next_run"])

    # Until the scheduler's clock reaches the due time, nothing is sent.
    while engine.scheduler.clock() < due - timedelta(seconds=SPEED):
        assert _mails_to(engine, "later@example.com") == 0
        time.sleep(0.1)
    assert _wait_for(lambda: _mails_to(engine, "later@example.com") == 1, timeout_s=30)
    [firing] = [firing for firing in engine.scheduler.fired if firing.schedule == name]
    assert firing.delivered and firing.scheduled_time == due and firing.fired_at >= due
    remaining = json.loads(run(engine, "schedules", "list", "--output", "json").stdout)["schedules"]
    assert name not in {row["name"] for row in remaining}  # deleted after it fired


def test_a_cancelled_job_never_arrives(engine: LocalEngine) -> None:
    put_order(engine, "802", "never@example.com")
    result = run(engine, "enqueue", "orders", "order_confirmation", "802", "--in", "20m", "--output", "json")
    name = json.loads(result.stdout)["schedule"]
    cancelled = run(engine, "schedules", "cancel", name)
    assert cancelled.exit_code == 0 and f"cancelled {name}" in cancelled.stdout
    time.sleep(20 * 60 / SPEED + 3)
    assert _mails_to(engine, "never@example.com") == 0
    again = run(engine, "schedules", "cancel", name)
    assert again.exit_code == 1 and "already fired, or was cancelled" in again.stderr


def test_the_weekly_review_is_listed_with_its_next_run(engine: LocalEngine) -> None:
    listed = json.loads(run(engine, "schedules", "list", "--output", "json").stdout)["schedules"]
    [review] = [row for row in listed if row["name"] == "dlq_review-weekly"]
    assert review["kind"] == "recurring" and review["expression"] == "cron(0 9 ? * MON *)"
    assert review["queue"].endswith("-maintenance") and review["id"] == "(the scheduled time)"
    assert review["next_run"] is not None and review["next_run"].endswith("09:00:00+00:00")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--in", "soon"], "'soon' is not a duration; accepted: e.g. 90s, 10m, 2h, 1d2h30m"),
        (["--at", "2026-12-24T09:00:00"], "has no time zone"),
        (["--at", "2001-01-01T00:00:00Z"], "is in the past"),
        (["--in", "400d"], "at most 365 days ahead"),
        (["--in", "2h", "--delay", "5"], "give at most one of --delay, --in and --at, not --delay and --in"),
    ],
)
def test_bad_times_are_refused_in_one_line(engine: LocalEngine, args: list[str], needle: str) -> None:
    result = run(engine, "enqueue", "orders", "order_confirmation", "9", *args)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr


def test_cancelling_a_recurring_schedule_is_refused(engine: LocalEngine) -> None:
    result = run(engine, "schedules", "cancel", "dlq_review-weekly")
    assert result.exit_code == 2 and "recurring schedules come from the catalog" in result.stderr
