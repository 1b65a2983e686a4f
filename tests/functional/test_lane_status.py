"""`jobctl status`, its JSON and the console's queue page show each priority lane's queue: its backlog, in flight,
delayed and oldest message's age, and a lane's own alarms' problems; a queue without lanes looks as before.
docs/priorities.md."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.console.app import create_app
from sqs_jobs.cli.console.backend import ConsoleBackend
from sqs_jobs.cli.console.security import ACCESS_COOKIE, Guard
from sqs_jobs.cli.discovery import find_queues
from sqs_jobs.cli.status import queue_status
from sqs_jobs.testing import JobHarness
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.test_priority_lanes import CATALOG

CATALOG_REF = "tests.functional.test_priority_lanes:CATALOG"
# What `jobctl status --output json` says of a queue without lanes: the same keys as before lanes.
QUEUE_KEYS = {
    "name",
    "url",
    "dlq_url",
    "backlog",
    "in_flight",
    "delayed",
    "oldest_age_s",
    "dlq_depth",
    "succeeded",
    "failed",
    "failure_rate",
    "window_s",
    "last_success_at",
    "last_heartbeat_at",
    "paused",
    "circuit_opened",
    "retry_attempt_max",
    "noisy_tenants",
    "quiet_oldest_age_s",
    "hold_share_max",
    "limits",
    "healthy",
    "problems",
}


def _lanes_with_work(harness: JobHarness, now: datetime) -> None:
    """high: 2 waiting, 1 of them taken; normal: 1; bulk: 3, its oldest 30 minutes old (as CloudWatch says)."""
    harness.publish("send_mail", "h1", priority="high")
    harness.publish("send_mail", "h2", priority="high")
    harness.publish("send_mail", "n1")
    for entity_id in ("b1", "b2", "b3"):
        harness.publish("send_mail", entity_id, priority="bulk")
    mail = harness.deployment.queues["mail"]
    high = next(lane for lane in mail.lanes if lane.name == "high")
    harness.clients("sqs").receive_message(QueueUrl=high.url, MaxNumberOfMessages=1, VisibilityTimeout=600)
    bulk = next(lane for lane in mail.lanes if lane.name == "bulk")
    harness.clients("cloudwatch").put_metric_data(
        Namespace="AWS/SQS",
        MetricData=[
            {
                "MetricName": "ApproximateAgeOfOldestMessage",
                "Dimensions": [{"Name": "QueueName", "Value": bulk.url.rsplit("/", 1)[-1]}],
                "Value": 1800.0,
                "Timestamp": now - timedelta(minutes=1),
            }
        ],
    )


def test_the_status_of_a_queue_with_lanes_reads_each_lane(clients: ClientFactory) -> None:
    now = datetime.now(UTC)
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    _lanes_with_work(harness, now)
    locations = find_queues(clients("ssm"), "SqsJobs", CATALOG)

    status = queue_status(clients("sqs"), clients("cloudwatch"), CATALOG.queue("mail"), locations["mail"], now=now)
    plain = queue_status(clients("sqs"), clients("cloudwatch"), CATALOG.queue("plain"), locations["plain"], now=now)

    lanes = {lane.name: (lane.backlog, lane.in_flight, lane.oldest_age_s) for lane in status.lanes}
    assert lanes == {"high": (1, 1, None), "normal": (1, 0, None), "bulk": (3, 0, 1800.0)}
    assert [lane.name for lane in status.lanes] == ["high", "normal", "bulk"]  # the most urgent first
    # The queue's own figures are its default lane's, as before.
    assert (status.backlog, status.in_flight) == (1, 0)
    alarms = CATALOG.queue("mail").alarms
    assert f"lane bulk: oldest message has waited 1800s (alarm above {alarms.oldest_message_age_s}s)" in (
        status.problems
    )
    assert [lane["name"] for lane in status.to_dict()["lanes"]] == ["high", "normal", "bulk"]
    assert plain.lanes == [] and set(plain.to_dict()) == QUEUE_KEYS


def test_jobctl_status_shows_each_lane_in_its_table_and_json(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    _lanes_with_work(harness, datetime.now(UTC))
    base = ["--catalog", CATALOG_REF, "status"]

    as_json = CliRunner().invoke(jobctl, ["--catalog", CATALOG_REF, "--output", "json", "status"])
    table = CliRunner().invoke(jobctl, [*base, "mail"], env={"COLUMNS": "400"})
    plain = CliRunner().invoke(jobctl, [*base, "plain"], env={"COLUMNS": "400"})

    queues = {queue["name"]: queue for queue in json.loads(as_json.stdout)["queues"]}
    assert [(lane["name"], lane["backlog"], lane["in_flight"]) for lane in queues["mail"]["lanes"]] == [
        ("high", 1, 1),
        ("normal", 1, 0),
        ("bulk", 3, 0),
    ]
    assert set(queues["plain"]) == QUEUE_KEYS
    assert "priority lanes" in table.stdout
    [bulk] = [line for line in table.stdout.splitlines() if " bulk " in line]
    assert [part.strip() for part in bulk.split("│")[1:6]] == ["mail", "bulk", "3", "0", "30.0 min"]
    assert "priority lanes" not in plain.stdout and "lane" not in plain.stdout


def test_the_consoles_queue_page_shows_each_lane(clients: ClientFactory, tmp_path: Path) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    _lanes_with_work(harness, datetime.now(UTC))
    guard = Guard(host="127.0.0.1", port=8080)
    browser = create_app(ConsoleBackend(clients, "SqsJobs", catalog=CATALOG), guard, tmp_path).test_client()
    browser.set_cookie(ACCESS_COOKIE, guard.access_token, domain="127.0.0.1")

    mail = browser.get("/queues/mail", base_url="http://127.0.0.1:8080")
    plain = browser.get("/queues/plain", base_url="http://127.0.0.1:8080")

    assert mail.status_code == 200, mail.text
    assert '<tr data-lane="bulk"><th scope="row">bulk</th><td class="num">3</td><td class="num">0</td>' in mail.text
    assert '<tr data-lane="high"><th scope="row">high</th><td class="num">1</td><td class="num">1</td>' in mail.text
    assert plain.status_code == 200 and "Priority lanes" not in plain.text
