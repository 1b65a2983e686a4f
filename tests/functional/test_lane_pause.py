"""`jobctl queue pause|resume` of a queue with priority lanes switches every lane's event source mapping (what the
local engine's pollers read, `MappingSwitch`), and `status` says which lanes are paused. docs/priorities.md."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sqs_jobs.cli import queue_control
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.console.app import create_app
from sqs_jobs.cli.console.backend import ConsoleBackend
from sqs_jobs.cli.console.security import ACCESS_COOKIE, Guard
from sqs_jobs.cli.discovery import find_queues
from sqs_jobs.cli.status import QueueStatus, queue_status
from sqs_jobs.local.emulator import MappingSwitch
from sqs_jobs.testing import JobHarness
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.test_priority_lanes import CATALOG

CATALOG_REF = "tests.functional.test_priority_lanes:CATALOG"


def _status(clients: ClientFactory, queue: str = "mail") -> QueueStatus:
    where = find_queues(clients("ssm"), "SqsJobs", CATALOG)[queue]
    return queue_status(
        clients("sqs"), clients("cloudwatch"), CATALOG.queue(queue), where, lambda_client=clients("lambda")
    )


def _enabled(clients: ClientFactory) -> dict[str | None, bool]:
    """What each lane's pollers on the local engine read: whether its mapping is enabled."""
    mail = find_queues(clients("ssm"), "SqsJobs", CATALOG)["mail"]
    return {lane.name: MappingSwitch(clients("lambda"), lane.arn, refresh_s=0).enabled() for lane in mail.sources}


def test_jobctl_queue_pause_and_resume_switch_every_lane(clients: ClientFactory) -> None:
    JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    base = ["--catalog", CATALOG_REF, "--output", "json", "queue"]

    paused = CliRunner().invoke(jobctl, [*base, "pause", "mail"])

    assert paused.exit_code == 0, paused.output
    mappings = json.loads(paused.stdout)["mappings"]
    assert sorted((m["lane"], m["state"]) for m in mappings) == [
        ("bulk", "Disabled"),
        ("high", "Disabled"),
        ("normal", "Disabled"),
    ]
    assert _enabled(clients) == {"high": False, "normal": False, "bulk": False}
    status = _status(clients)
    assert status.paused is True and [lane.paused for lane in status.lanes] == [True, True, True]
    assert "paused: its worker takes no jobs until `jobctl queue resume mail`" in status.problems
    assert not any(problem.startswith("lane ") for problem in status.problems)

    resumed = CliRunner().invoke(jobctl, [*base, "resume", "mail"])

    assert resumed.exit_code == 0, resumed.output
    assert {m["state"] for m in json.loads(resumed.stdout)["mappings"]} == {"Enabled"}
    assert _enabled(clients) == {"high": True, "normal": True, "bulk": True}
    assert _status(clients).paused is False


def test_a_lane_paused_alone_is_that_lanes_problem(clients: ClientFactory, tmp_path: Path) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    high = next(lane for lane in harness.deployment.queues["mail"].lanes if lane.name == "high")
    queue_control.pause(clients("lambda"), high.arn)  # by hand, as `aws lambda update-event-source-mapping` would

    status = _status(clients)

    assert status.paused is False
    assert {lane.name: lane.paused for lane in status.lanes} == {"high": True, "normal": False, "bulk": False}
    assert "lane high paused: its jobs wait until `jobctl queue resume mail`" in status.problems
    assert status.to_dict()["lanes"][0]["paused"] is True
    table = CliRunner().invoke(jobctl, ["--catalog", CATALOG_REF, "status", "mail"], env={"COLUMNS": "400"})
    rows = [[cell.strip() for cell in line.split("│")[1:7]] for line in table.stdout.splitlines()]
    assert ["mail", "high", "0", "0", "0 s", "paused"] in rows
    guard = Guard(host="127.0.0.1", port=8080)
    browser = create_app(ConsoleBackend(clients, "SqsJobs", catalog=CATALOG), guard, tmp_path).test_client()
    browser.set_cookie(ACCESS_COOKIE, guard.access_token, domain="127.0.0.1")
    page = browser.get("/queues/mail", base_url="http://127.0.0.1:8080").text
    assert '<tr data-lane="high">' in page and "<td>paused</td></tr>" in page


def test_the_consoles_pause_switches_every_lane(clients: ClientFactory) -> None:
    JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    backend = ConsoleBackend(clients, "SqsJobs", catalog=CATALOG)

    assert len(backend.pause("mail")) == 3
    assert _enabled(clients) == {"high": False, "normal": False, "bulk": False}
    backend.resume("mail")
    assert _enabled(clients) == {"high": True, "normal": True, "bulk": True}


def test_a_queue_without_lanes_pauses_as_before(clients: ClientFactory) -> None:
    JobHarness.provisioned(clients, CATALOG, default_queue="plain")

    paused = CliRunner().invoke(jobctl, ["--catalog", CATALOG_REF, "--output", "json", "queue", "pause", "plain"])

    [mapping] = json.loads(paused.stdout)["mappings"]
    assert set(mapping) == {"uuid", "function", "state"} and mapping["state"] == "Disabled"
    assert _status(clients, "plain").paused is True
