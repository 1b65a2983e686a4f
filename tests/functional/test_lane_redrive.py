"""A redrive sends each dead letter of a queue with priority lanes back to the lane its evidence names
(`jobs.source_queue`), and any other - no evidence, a producer's attribute of that name, another queue's - to the
default lane; the preview, the report and the verification count per lane. docs/priorities.md."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.console import backend as console_backend
from sqs_jobs.cli.console.app import create_app
from sqs_jobs.cli.console.backend import ConsoleBackend
from sqs_jobs.cli.console.security import ACCESS_COOKIE, Guard
from sqs_jobs.cli.discovery import find_queues
from sqs_jobs.cli.dlq import DeadLetterQueue, Filter, verify
from sqs_jobs.testing import JobHarness
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.test_priority_lanes import CATALOG

CATALOG_REF = "tests.functional.test_priority_lanes:CATALOG"


def _ids_on(harness: JobHarness, url: str) -> list[str]:
    sqs = harness.clients("sqs")
    found: list[str] = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        found += [json.loads(message["Body"])["id"] for message in messages]
    return sorted(found)


def _lane_url(harness: JobHarness, lane: str) -> str:
    return next(source.url for source in harness.deployment.queues["mail"].lanes if source.name == lane)


def _dead_letters_of_every_lane(harness: JobHarness) -> None:
    """One rejected job per lane, dead-lettered by the worker; and three the worker's evidence doesn't place."""
    harness.publish("send_mail", "reject-high", priority="high")
    harness.publish("send_mail", "reject-normal")
    harness.publish("send_mail", "reject-bulk", priority="bulk")
    harness.drain()
    mail = harness.deployment.queues["mail"]
    high_arn = next(source.arn for source in mail.lanes if source.name == "high")
    # A producer's own `jobs.source_queue` naming the high lane: not evidence (it didn't come from the worker role).
    harness.clients("sqs").send_message(
        QueueUrl=mail.dlq_url,
        MessageBody=json.dumps({"job": "send_mail", "id": "forged"}),
        MessageAttributes={deadletter.SOURCE_QUEUE: {"DataType": "String", "StringValue": high_arn}},
    )
    # Sent by the worker role (evidence), naming a queue that is none of this queue's lanes, and one without it.
    worker_sqs = harness.worker_clients("mail")("sqs")
    for entity_id, source in (("elsewhere", harness.deployment.queues["plain"].arn), ("nowhere", None)):
        attributes = {deadletter.ERROR_TYPE: {"DataType": "String", "StringValue": "OddError"}}
        if source is not None:
            attributes[deadletter.SOURCE_QUEUE] = {"DataType": "String", "StringValue": source}
        worker_sqs.send_message(
            QueueUrl=mail.dlq_url,
            MessageBody=json.dumps({"job": "send_mail", "id": entity_id}),
            MessageAttributes=attributes,
        )
    assert harness.queue_counts("mail", dead_letter=True) == (6, 0)


def test_each_dead_letter_goes_back_to_the_lane_its_evidence_names(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    _dead_letters_of_every_lane(harness)
    where = find_queues(clients("ssm"), "SqsJobs", CATALOG)["mail"]
    dead = DeadLetterQueue.of(clients("sqs"), where, receive_wait_s=0)

    report = dead.move(Filter())

    assert report.moved == 6 and not report.failed
    assert _ids_on(harness, _lane_url(harness, "high")) == ["reject-high"]
    assert _ids_on(harness, _lane_url(harness, "bulk")) == ["reject-bulk"]
    # The default lane: its own, and every letter whose evidence names none of the lanes (a forged one included).
    assert _ids_on(harness, _lane_url(harness, "normal")) == ["elsewhere", "forged", "nowhere", "reject-normal"]
    assert report.moved_to == {
        _lane_url(harness, "high"): 1,
        _lane_url(harness, "normal"): 4,
        _lane_url(harness, "bulk"): 1,
    }
    # Nothing went to the other queue the evidence named.
    assert _ids_on(harness, harness.deployment.queues["plain"].url) == []


def test_a_queue_without_lanes_redrives_to_its_own_queue(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="plain")
    harness.publish("plain_job", "reject-1")
    harness.drain()
    where = find_queues(clients("ssm"), "SqsJobs", CATALOG)["plain"]
    assert where.lanes == ()
    dead = DeadLetterQueue.of(clients("sqs"), where, receive_wait_s=0)

    assert dead.move(Filter()).moved == 1
    assert _ids_on(harness, where.url) == ["reject-1"]


def test_verify_waits_for_every_lane_the_redrive_sent_to(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    harness.publish("send_mail", "reject-high", priority="high")
    harness.drain()
    where = find_queues(clients("ssm"), "SqsJobs", CATALOG)["mail"]
    dead = DeadLetterQueue.of(clients("sqs"), where, receive_wait_s=0)
    since = datetime.now(UTC)
    report = dead.move(Filter())

    # Nobody consumes the high lane: the redriven job still waits there, though the default lane is empty.
    checked = verify(clients("sqs"), dead, report.moved_letters, since=since, timeout_s=0, sleep=lambda _: None)

    assert not checked.drained
    harness.drain()
    drained = verify(clients("sqs"), dead, report.moved_letters, since=since, timeout_s=0, sleep=lambda _: None)
    assert drained.drained and drained.returned_to_dlq == 1  # rejected again, back in the DLQ


def test_jobctl_dlq_redrive_previews_and_reports_per_lane(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    _dead_letters_of_every_lane(harness)
    base = ["--catalog", CATALOG_REF]

    preview = CliRunner().invoke(jobctl, [*base, "--output", "json", "dlq", "redrive", "mail", "--dry-run"])
    text = CliRunner().invoke(jobctl, [*base, "dlq", "redrive", "mail", "--dry-run"])
    moved = CliRunner().invoke(jobctl, [*base, "dlq", "redrive", "mail", "--yes", "--no-verify"])

    assert preview.exit_code == 0, preview.output
    payload = json.loads(preview.output)
    assert payload["lanes"] == {"high": 1, "normal": 4, "bulk": 1}
    assert {entry["id"]: entry["lane"] for entry in payload["would_move"]}["reject-high"] == "high"
    assert text.exit_code == 0, text.output
    assert "dry run: 6 message(s) would move back to mail (high: 1, normal: 4, bulk: 1)" in text.output
    assert moved.exit_code == 0, moved.output
    assert "moved 6 of 6 message(s) back to mail (high: 1, normal: 4, bulk: 1) (client side)" in moved.output
    assert _ids_on(harness, _lane_url(harness, "high")) == ["reject-high"]


def test_jobctl_dlq_redrive_all_moves_other_lanes_client_side(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    _dead_letters_of_every_lane(harness)

    moved = CliRunner().invoke(
        jobctl,
        ["--catalog", CATALOG_REF, "--output", "json", "dlq", "redrive", "mail", "--all", "--yes", "--no-verify"],
    )

    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.stdout)["lanes"] == {"high": 1, "normal": 4, "bulk": 1}
    assert json.loads(moved.stdout)["method"] == "client"
    assert "moving client side, each to its lane" in moved.stderr
    assert _ids_on(harness, _lane_url(harness, "bulk")) == ["reject-bulk"]


def test_a_queue_without_lanes_reports_its_redrive_as_before(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="plain")
    harness.publish("plain_job", "reject-1")
    harness.drain()

    preview = CliRunner().invoke(
        jobctl, ["--catalog", CATALOG_REF, "--output", "json", "dlq", "redrive", "plain", "--dry-run"]
    )

    payload = json.loads(preview.output)
    assert "lanes" not in payload and "lane" not in payload["would_move"][0]


def test_the_consoles_redrive_preview_and_result_count_per_lane(
    clients: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_backend, "VERIFY_TIMEOUT_S", 0)  # nobody consumes the lanes here
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    _dead_letters_of_every_lane(harness)
    guard = Guard(host="127.0.0.1", port=8080)
    backend = ConsoleBackend(clients, "SqsJobs", catalog=CATALOG)
    browser = create_app(backend, guard, tmp_path).test_client()
    browser.set_cookie(ACCESS_COOKIE, guard.access_token, domain="127.0.0.1")

    page = browser.get("/queues/mail/preview?action=redrive&all=1", base_url="http://127.0.0.1:8080")

    assert page.status_code == 200, page.text
    assert "<strong>high</strong>: 1, <strong>normal</strong>: 4, <strong>bulk</strong>: 1." in page.text
    selection = backend.select("mail")

    class Progress:
        def enter(self, phase: str) -> None:
            pass

        def advance(self, count: int) -> None:
            pass

    result = backend.redrive("mail", selection.ids, None, Progress())  # type: ignore[arg-type]
    assert result["lanes"] == {"high": 1, "normal": 4, "bulk": 1}
    assert result["verified"] is False  # the lanes still hold the redriven jobs
    assert _ids_on(harness, _lane_url(harness, "high")) == ["reject-high"]
