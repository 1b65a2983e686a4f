"""`jobctl queue pause|resume`, `jobctl job show` and `jobctl console` on the local engine, as an operator runs them."""

from __future__ import annotations

import http.cookiejar
import io
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from functions.catalog import CATALOG
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.local.engine import LocalEngine
from tests.e2e.jobctl_runs import publish, put_order
from tests.e2e.processes import ROOT, cli_env

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600, catalog=CATALOG) as running:
        yield running


def run(engine: LocalEngine, *args: str) -> Result:
    env = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": engine.region}
    return CliRunner().invoke(jobctl, [*args, "--endpoint-url", engine.endpoint_url], env=env)


def as_json(result: Result) -> Any:
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_pause_shows_in_status_and_resume_clears_it(engine: LocalEngine) -> None:
    paused = run(engine, "queue", "pause", "orders", "--output", "json")
    assert paused.exit_code == 0, paused.output
    assert as_json(paused) == {
        "queue": "orders",
        "paused": True,
        "mappings": [
            {
                "uuid": json.loads(paused.stdout)["mappings"][0]["uuid"],
                "function": "SqsJobs-orders-worker",
                "state": "Disabled",
            }
        ],
    }
    status = run(engine, "status", "orders", "--output", "json")
    assert status.exit_code == 1  # a paused queue is a finding
    [orders] = as_json(status)["queues"]
    assert orders["paused"] is True
    assert "paused: its worker takes no jobs until `jobctl queue resume orders`" in orders["problems"]

    resumed = run(engine, "queue", "resume", "orders")
    assert resumed.exit_code == 0 and "resumed orders (SqsJobs-orders-worker: Enabled)" in resumed.stdout
    assert as_json(run(engine, "status", "orders", "--output", "json"))["queues"][0]["paused"] is False


def test_job_show_finds_a_completed_and_a_dead_lettered_job(engine: LocalEngine) -> None:
    put_order(engine, "71", "b@example.com")
    publish(engine, "orders", "order_confirmation", "71", "72")  # 72 doesn't exist: dead-lettered
    assert engine.wait_until_idle(timeout_s=30)

    done = run(engine, "job", "show", "order_confirmation", "71", "--output", "json")
    assert done.exit_code == 0, done.output
    assert as_json(done)["verdict"] == "completed" and as_json(done)["record"]["status"] == "COMPLETED"

    dead = run(engine, "job", "show", "order_confirmation", "72")
    assert dead.exit_code == 0, dead.output
    assert "order_confirmation:72 on orders: dead-lettered" in dead.stdout and "OrderNotFoundError" in dead.stdout

    text = run(engine, "job", "show", "order_confirmation", "73", "--output", "text", "--query", "verdict")
    assert text.stdout.strip() == "not found"


def test_job_cancel_lists_the_job_and_its_copy_never_runs_until_undone(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    clients = engine.clients()
    put_order(engine, "81")

    cancelled = run(engine, "job", "cancel", "order_confirmation", "81", "--yes")
    assert cancelled.exit_code == 0, cancelled.output
    assert (
        "order_confirmation:81 on orders (key order_confirmation:81): cancelled: no copy of it runs" in cancelled.stdout
    )
    assert "no run of key 'order_confirmation:81' seen yet" in cancelled.stdout
    listed = run(engine, "job", "list", "orders", "--state", "cancelled", "--output", "json")
    assert listed.exit_code == 0, listed.output
    [entry] = [job for job in as_json(listed)["jobs"] if job["id"] == "81"]
    assert (entry["state"], entry["job"]) == ("cancelled", "order_confirmation") and entry["cancelled_by"]
    table = run(engine, "job", "list", "--job", "order_confirmation", "--search", "81")
    assert "cancelled: 1" in table.stdout and "order_confirmation" in table.stdout

    publish(engine, "orders", "order_confirmation", "81")
    assert engine.wait_until_idle(timeout_s=30)
    shown = run(engine, "job", "show", "order_confirmation", "81", "--output", "json")
    assert as_json(shown)["verdict"] == "cancelled", shown.output
    counts = clients("sqs").get_queue_attributes(
        QueueUrl=engine.deployment.queues["orders"].url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert counts == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}

    undone = run(engine, "job", "cancel", "order_confirmation", "81", "--undo", "--yes", "--output", "json")
    assert as_json(undone)["outcome"] == "withdrawn"
    publish(engine, "orders", "order_confirmation", "81")
    assert engine.wait_until_idle(timeout_s=30)
    assert as_json(run(engine, "job", "show", "order_confirmation", "81", "--output", "json"))["verdict"] == "completed"
    # A completed job is not cancelled, and says so with exit code 1.
    late = run(engine, "job", "cancel", "order_confirmation", "81", "--yes")
    assert late.exit_code == 1 and "nothing to cancel" in late.stdout


def test_stats_counts_runs_processed_and_failed_per_period(engine: LocalEngine) -> None:
    def totals() -> dict[str, int]:
        result = run(engine, "stats", "orders", "--hours", "1", "--period", "5", "--output", "json")
        assert result.exit_code == 0, result.output
        [orders] = as_json(result)["queues"]
        # Every count is in exactly one row of the table, and in its job's total.
        for column, total in orders["totals"].items():
            assert sum(bucket[column] for bucket in orders["buckets"]) == total
            assert sum(job[column] for job in orders["by_job"].values()) == total
        assert len(orders["buckets"]) == 12  # an hour in 5-minute rows
        return dict(orders["totals"])

    before = totals()
    put_order(engine, "91")
    publish(engine, "orders", "order_confirmation", "91", "92")  # 92 doesn't exist: failed and dead-lettered
    assert engine.wait_until_idle(timeout_s=30)

    # The workers' metrics reach CloudWatch a moment after their invocation (the engine's agent forwards them).
    expected = {"processed": 1, "failed": 1, "retried": 0, "dead_lettered": 1, "cancelled": 0}
    deadline = time.monotonic() + 20
    while True:
        after = totals()
        counted = {column: after[column] - before[column] for column in after}
        if counted == expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert counted == expected
    table = run(engine, "stats", "orders", "--hours", "1").stdout
    assert "orders: last 1 h, 15 min a row" in table and "total" in table


def test_job_cancel_asks_first_and_refuses_without_a_terminal(engine: LocalEngine) -> None:
    result = run(engine, "job", "cancel", "order_confirmation", "82")
    assert result.exit_code == 2 and "not confirmed: add --yes" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["job", "show", "no_such_job", "1"], 2, "unknown job 'no_such_job'; accepted: "),
        # A job whose key needs the publisher's: asked for, in one line, not a traceback.
        (["job", "show", "order_update_mail", "1001"], 2, "give the key the publisher chose with --key"),
        (["job", "cancel", "order_update_mail", "1001", "--yes"], 2, "give the key the publisher chose with --key"),
        (["queue", "pause", "nope"], 2, "unknown queue"),
        (["console", "--host", "0.0.0.0"], 2, "add --allow-host NAME"),
    ],
)
def test_bad_usage_exits_2_with_one_line(engine: LocalEngine, args: list[str], code: int, needle: str) -> None:
    result = run(engine, *args)
    assert result.exit_code == code, result.output
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_jobctl_console_serves_the_overview_until_interrupted(engine: LocalEngine) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "sqs_jobs.cli", "--endpoint-url", engine.endpoint_url, "console", "--port", "0"],
        cwd=ROOT,
        env={**cli_env(), "AWS_REGION": engine.region},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)\?token=(\S+)", first)
        assert match, first
        # As a browser: the printed URL's token becomes a cookie, and the redirect drops it from the URL.
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        with browser.open(match.group(0), timeout=30) as page:
            body = page.read().decode()
        assert page.status == 200 and 'data-queue="orders"' in body and 'data-queue="invoices"' in body
        assert page.url == match.group(1)
        with pytest.raises(urllib.error.HTTPError) as refused:  # without the token or the cookie: 401
            urllib.request.urlopen(match.group(1), timeout=30)
        assert refused.value.code == 401
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
