"""A batch on a queue with priority lanes, as a new team writes it with the testing API: its members published to
a lane, a dead member redriven to its lane, and its callback found by the job and ID it was published as (jobctl
job show) and read back by its key (JobPublisher.result). docs/workflows.md, docs/priorities.md, docs/testing.md."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sqs_jobs.batches import COMPLETE, SUCCESS, batch_item_id, callback_key
from sqs_jobs.contract import UnknownPriorityError
from sqs_jobs.results import JobState
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.testing import JobHarness
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.sample_jobs import tallied

HANDLER = "tests.functional.sample_jobs.tallied"
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="renders",
            priorities=("urgent", "routine"),
            jobs=(JobSpec(name="render", handler=HANDLER, publishes=("rendered", "digest")),),
        ),
        QueueSpec(
            name="notices",
            jobs=(JobSpec(name="rendered", handler=HANDLER), JobSpec(name="digest", handler=HANDLER)),
        ),
    )
)


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[JobHarness]:
    tallied.reset()
    yield JobHarness.provisioned(clients, CATALOG)


def lane_bodies(harness: JobHarness, lane: str) -> list[dict[str, str]]:
    url = next(source.url for source in harness.deployment.queues["renders"].lanes if source.name == lane)
    messages = harness.clients("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    return [json.loads(message["Body"]) for message in messages.get("Messages", [])]


def drain_all(harness: JobHarness) -> None:
    harness.drain("renders")
    harness.drain("notices")


def test_a_batchs_members_go_to_the_lane_it_names_and_a_lane_it_lacks_writes_nothing(harness: JobHarness) -> None:
    publisher = harness.publisher()
    publisher.batch([("render", "a"), ("render", "b")], on_complete=("digest", "d-1"), priority="urgent")
    assert sorted(body["id"] for body in lane_bodies(harness, "urgent")) == ["a", "b"]
    assert lane_bodies(harness, "routine") == []

    refused = r"^batch entry 0 \(job 'render', id 'c'\): unknown priority 'asap' .*urgent, routine"
    with pytest.raises(UnknownPriorityError, match=refused):
        publisher.batch([("render", "c")], on_complete=("digest", "d-2"), priority="asap")
    # Refused before anything was written or sent: the one batch above is all the table holds.
    items = harness.clients("dynamodb").scan(TableName=harness.deployment.idempotency_table)["Items"]
    assert len([item for item in items if item["id"]["S"].startswith("batch#") and item.get("size")]) == 1
    assert sorted(body["id"] for body in lane_bodies(harness, "urgent")) == ["a", "b"]


def test_a_dead_member_is_redriven_to_its_lane_and_the_callbacks_are_read_by_their_job_and_id(
    harness: JobHarness,
) -> None:
    from sqs_jobs.cli.dlq import DeadLetterQueue
    from sqs_jobs.cli.job_lookup import find_job
    from sqs_jobs.worker.provenance import Provenance

    publisher = harness.publisher()
    batch_id = publisher.batch(
        [("render", "ok-1"), ("render", "bad-1")],
        on_success=("rendered", "r-9"),
        on_complete=("digest", "r-9"),
        priority="urgent",
    )
    drain_all(harness)
    # The digest ran; the success callback is not due: read by its job and ID, it is pending and not yet published.
    complete, success = (callback_key(batch_id, kind) for kind in (COMPLETE, SUCCESS))
    assert publisher.result("digest", "r-9", key=complete).state is JobState.SUCCEEDED
    assert publisher.result("rendered", "r-9", key=success).state is JobState.PENDING
    local = harness.deployment.queues["notices"]
    shown = find_job(
        spec=CATALOG.queue("notices"),
        job="rendered",
        entity_id="r-9",
        key=None,
        dynamodb=harness.clients("dynamodb"),
        table=harness.deployment.idempotency_table,
        dead_letter_queue=DeadLetterQueue(
            harness.clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
        ),
    )
    assert shown.explanation().startswith(f"not published yet: the success callback of batch {batch_id}")
    # A test reads the dead letter's evidence, then redrives it, as an operator would
    [letter] = harness.dead_letters("renders")
    assert json.loads(letter["Body"])["id"] == "bad-1"
    tallied.FIXED.add("bad-1")
    assert harness.redrive("renders") == 1
    assert [body["id"] for body in lane_bodies(harness, "urgent")] == ["bad-1"]  # back on its own lane
    drain_all(harness)
    # Then the success callback ran, and its result is read by the job and ID it was published as
    assert publisher.result("rendered", "r-9", key=success).state is JobState.SUCCEEDED
    # Read by the job and ID alone, it is another job, never published: the callback's result is not given for it
    assert publisher.result("rendered", "r-9").state is JobState.PENDING
    assert tallied.RUNS[("rendered", "r-9")] == 1 and tallied.RUNS[("digest", "r-9")] == 1
    item = harness.clients("dynamodb").get_item(
        TableName=harness.deployment.idempotency_table, Key={"id": {"S": batch_item_id(batch_id)}}
    )["Item"]
    assert "dead" not in item and len(item["succeeded"]["NS"]) == 2


def test_the_harness_sends_to_a_lane_and_peeks_at_whichever_lane_holds_the_message(harness: JobHarness) -> None:
    harness.send(json.dumps({"job": "render", "id": "p-1"}), queue="renders", lane="urgent")
    assert harness.queue_counts("renders") == (1, 0)
    assert json.loads(harness.peek("renders")["Body"])["id"] == "p-1"
    assert lane_bodies(harness, "urgent") != []
    with pytest.raises(UnknownPriorityError, match=r"unknown priority 'asap' for queue 'renders'; its lanes are"):
        harness.send("{}", queue="renders", lane="asap")
    harness.send(json.dumps({"job": "render", "id": "p-2"}), queue="renders")  # the routine lane's: after
    assert json.loads(harness.peek("renders")["Body"])["id"] == "p-1"
    harness.drain("renders")
    with pytest.raises(AssertionError, match=r"peek: nothing waits on 'renders'"):
        harness.peek("renders")
