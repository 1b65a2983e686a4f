"""A job's progress: written to its key's record while its run holds the key, at most every few seconds, read by
jobctl's lookup; a report of a run that no longer holds the key changes nothing and never fails the job."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from sqs_jobs.cli.job_lookup import IdempotencyRecord
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.progress import ProgressReporter
from sqs_jobs.worker.settings import idempotency_record_id
from tests.functional.conftest import Harness, envelope
from tests.functional.sample_jobs import progressive

QUEUE = QueueSpec(
    name="progressing", jobs=(JobSpec(name="progressive", handler="tests.functional.sample_jobs.progressive"),)
)
CATALOG = Catalog(queues=(QUEUE,))


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    progressive.SEEN.clear()
    progressive.WRITTEN.clear()
    yield Harness.provisioned(clients, CATALOG)


def test_a_running_jobs_progress_is_in_its_record_as_an_operator_reads_it(harness: Harness) -> None:
    harness.send(envelope("progressive", "42"), queue="progressing")

    invocation = harness.deliver("progressing")

    assert invocation is not None and invocation.failed_ids == []
    # The first report is written at once; the next, within 5 s of it, is throttled; the last (3 of 3) is not.
    assert progressive.WRITTEN["42"] == [True, False, True]
    first, *_ = progressive.SEEN["42"]
    record = IdempotencyRecord.from_item(first, expiry_s=3600)
    assert record.status == "INPROGRESS"
    assert record.progress is not None
    assert (record.progress.done, record.progress.total, record.progress.note, record.progress.run) == (
        1.0,
        3.0,
        "first rows",
        1,
    )
    assert record.progress.describe().startswith("1 of 3 (33%): first rows (run 1, at ")


def _record(clients: ClientFactory, table: str, record_id: str, status: str, runs: int) -> None:
    clients("dynamodb").put_item(
        TableName=table,
        Item={
            "id": {"S": record_id},
            "status": {"S": status},
            "runs": {"N": str(runs)},
            "expiration": {"N": str(int(datetime.now(UTC).timestamp()) + 3600)},
        },
    )


def test_a_report_of_a_run_that_no_longer_holds_its_key_changes_nothing(harness: Harness) -> None:
    clients = harness.clients
    table = harness.deployment.worker_settings("progressing").idempotency_table
    record_id = idempotency_record_id("progressive:7")
    _record(clients, table, record_id, "INPROGRESS", runs=2)
    unwritten: list[str] = []

    # Run 1 was cut; run 2 holds the key now.
    stale = ProgressReporter(lambda: clients("dynamodb"), table, record_id, 1, on_unwritten=unwritten.append)
    assert stale.report(5, 10, "late") is False
    assert unwritten == ["the run no longer holds its key"]
    current = ProgressReporter(lambda: clients("dynamodb"), table, record_id, 2)
    assert current.report(6, note="rows") is True
    item = clients("dynamodb").get_item(TableName=table, Key={"id": {"S": record_id}})["Item"]
    assert item["progress_done"] == {"N": "6"} and item["progress_run"] == {"N": "2"}
    assert "progress_total" not in item
    # A completed key takes no more progress.
    _record(clients, table, record_id, "COMPLETED", runs=0)
    clock = [100.0]
    after = ProgressReporter(lambda: clients("dynamodb"), table, record_id, 2, clock=lambda: clock[0])
    assert after.report(7) is False


def test_progress_takes_numbers_only() -> None:
    reporter = ProgressReporter(lambda: None, "t", "r", 1)
    with pytest.raises(TypeError, match="takes numbers"):
        reporter.report("half")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes numbers"):
        reporter.report(1, True)
