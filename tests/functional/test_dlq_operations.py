"""DLQ triage on real SQS semantics (moto): reading without consuming, selective moves, crash safety, discard."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cli.dlq import BadFilterError, DeadLetterQueue, DlqError, Filter, group, queue_busy, verify
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import NO_EVIDENCE, DeadLetterFailure
from sqs_jobs.worker.provenance import Provenance
from tests.functional.conftest import Harness, narrowed

MISSING = ("9001", "9002", "9003")


# Only what these tests use: a fraction of the whole catalog's provisioning, per test.
@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, narrowed(CATALOG, "orders"))


def envelope(entity_id: str) -> str:
    return json.dumps({"job": "order_confirmation", "id": entity_id})


@pytest.fixture
def dlq(harness: Harness) -> DeadLetterQueue:
    """A DLQ holding three missing orders, two malformed messages and one moved by SQS without evidence."""
    for entity_id in MISSING:
        harness.send(envelope(entity_id))
    harness.send("not json")
    harness.send('{"job": "order_confirmation", "id": 5}')
    while harness.deliver() is not None:
        pass
    local = harness.deployment.queues["orders"]
    harness.clients("sqs").send_message(
        QueueUrl=local.dlq_url,
        MessageBody=envelope("7777"),
        MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
    )
    return DeadLetterQueue(harness.clients("sqs"), local.dlq_url, local.url, runtime(harness), receive_wait_s=0)


def runtime(harness: Harness) -> Provenance:
    """The orders worker's role: the only sender whose `jobs.*` attributes are evidence."""
    return Provenance.of([harness.deployment.queues["orders"].worker_role_id])


def bodies_in(harness: Harness, dead_letter: bool) -> list[str]:
    local = harness.deployment.queues["orders"]
    url = local.dlq_url if dead_letter else local.url
    found: list[str] = []
    while True:
        batch = harness.clients("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60)
        messages: list[dict[str, Any]] = batch.get("Messages", [])
        if not messages:
            return sorted(found)
        found.extend(message["Body"] for message in messages)


def test_peek_reads_everything_and_consumes_nothing(harness: Harness, dlq: DeadLetterQueue) -> None:
    letters = dlq.peek()
    assert len(letters) == 6
    assert harness.queue_counts(dead_letter=True) == (6, 0)  # all visible again at once
    assert len(dlq.peek()) == 6  # and readable again


def test_grouping_by_error_counts_each_kind(dlq: DeadLetterQueue) -> None:
    groups = group(dlq.peek(), "error")
    by_type: dict[str, list[int]] = {}
    for entry in groups:
        by_type.setdefault(entry["error_type"], []).append(entry["count"])
    assert by_type["EnvelopeNotJSONError"] == [1]
    assert by_type["EnvelopeFieldError"] == [1]
    assert by_type[NO_EVIDENCE] == [1]
    assert by_type["OrderNotFoundError"] == [3]  # one group, though each message names its own order
    first = groups[0]
    assert {"count", "first_seen", "last_seen", "sample_message_id", "error_message"} <= set(first)


def test_grouping_by_job_and_day(dlq: DeadLetterQueue) -> None:
    by_job = {g["job"]: g["count"] for g in group(dlq.peek(), "job")}
    assert by_job == {"order_confirmation": 5, "(unknown)": 1}
    today = datetime.now(UTC).date().isoformat()
    [day] = group(dlq.peek(), "day")
    assert (day["day"], day["count"]) == (today, 6)
    with pytest.raises(BadFilterError, match="accepted: error, job, tenant, day"):
        group(dlq.peek(), "hour")


def test_a_dead_letter_without_evidence_still_names_its_job_and_keeps_its_attributes(dlq: DeadLetterQueue) -> None:
    [bare] = [letter for letter in dlq.peek() if letter.entity_id == "7777"]
    assert bare.job == "order_confirmation"
    assert bare.error_type == NO_EVIDENCE
    assert bare.publisher_attributes == {"tenant": {"DataType": "String", "StringValue": "acme"}}
    assert bare.failed_at is not None  # when SQS took it in


def test_move_by_error_type_moves_only_the_matching_messages(harness: Harness, dlq: DeadLetterQueue) -> None:
    report = dlq.move(Filter(error_type="OrderNotFoundError"))
    assert report.moved == 3 and report.matched == 3 and report.failed == []
    assert bodies_in(harness, dead_letter=False) == sorted(envelope(i) for i in MISSING)
    left = dlq.peek()
    assert len(left) == 3
    assert {letter.error_type for letter in left} == {
        "EnvelopeNotJSONError",
        "EnvelopeFieldError",
        NO_EVIDENCE,
    }


def test_move_restores_the_publishers_attributes_and_drops_the_evidence(harness: Harness, dlq: DeadLetterQueue) -> None:
    dlq.move(Filter(match="7777"))
    local = harness.deployment.queues["orders"]
    [message] = harness.clients("sqs").receive_message(QueueUrl=local.url, MessageAttributeNames=["All"])["Messages"]
    assert message["Body"] == envelope("7777")
    assert message["MessageAttributes"] == {"tenant": {"DataType": "String", "StringValue": "acme"}}


def test_move_honours_job_match_and_limit(harness: Harness, dlq: DeadLetterQueue) -> None:
    assert dlq.move(Filter(job="no_such_job")).moved == 0
    report = dlq.move(Filter(match="does not exist"), limit=2)
    assert report.moved == 2
    assert harness.queue_counts(dead_letter=True) == (4, 0)
    assert harness.queue_counts() == (2, 0)


def test_empty_filter_values_are_refused() -> None:
    with pytest.raises(BadFilterError, match="--error-type is empty"):
        Filter(error_type=" ")


def test_a_redrive_interrupted_half_way_loses_nothing(
    harness: Harness, dlq: DeadLetterQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqs = harness.clients("sqs")
    real_delete = sqs.delete_message_batch
    calls = {"n": 0}

    def crash_on_second_delete(**kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("operator pressed Ctrl-C")
        return real_delete(**kwargs)

    monkeypatch.setattr(sqs, "delete_message_batch", crash_on_second_delete)
    small_batches = DeadLetterQueue(sqs, dlq.dlq_url, dlq.source_url, dlq.provenance, receive_wait_s=0)
    monkeypatch.setattr("sqs_jobs.cli.dlq.SQS_BATCH_MAX", 2)
    with pytest.raises(KeyboardInterrupt):
        small_batches.move(Filter())
    monkeypatch.setattr(sqs, "delete_message_batch", real_delete)
    # Every original body is somewhere: copied, still in the DLQ, or both (a harmless duplicate).
    everywhere = set(bodies_in(harness, dead_letter=False)) | set(bodies_in_all(harness))
    originals = {envelope(i) for i in (*MISSING, "7777")} | {"not json", '{"job": "order_confirmation", "id": 5}'}
    assert originals <= everywhere


def bodies_in_all(harness: Harness) -> list[str]:
    """The DLQ's bodies including those a crashed scan left invisible."""
    local = harness.deployment.queues["orders"]
    sqs = harness.clients("sqs")
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[DEFAULT_ACCOUNT_ID][sqs.meta.region_name].queues[local.dlq_url.rsplit("/", 1)[1]]
    return [message.body for message in queue._messages]


def test_discard_with_archive_keeps_a_faithful_copy(harness: Harness, dlq: DeadLetterQueue, tmp_path: Path) -> None:
    path = tmp_path / "discarded.jsonl"
    with path.open("w", encoding="utf-8") as archive:
        discarded = dlq.discard(Filter(error_type="EnvelopeNotJSONError"), archive=archive)
    assert [letter.body for letter in discarded] == ["not json"]
    [line] = path.read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["body"] == "not json"
    assert record["error_type"] == "EnvelopeNotJSONError"
    assert record["failure"] == DeadLetterFailure.PERMANENT
    assert "Traceback" in record["traceback"]
    assert harness.queue_counts(dead_letter=True) == (5, 0)


def test_discard_of_nothing_matching_changes_nothing(harness: Harness, dlq: DeadLetterQueue) -> None:
    assert dlq.discard(Filter(job="nope")) == []
    assert harness.queue_counts(dead_letter=True) == (6, 0)


def test_find_shows_one_message_with_its_evidence(dlq: DeadLetterQueue) -> None:
    target = next(letter for letter in dlq.peek() if letter.entity_id == "9001")
    found = dlq.find(target.message_id)
    assert found is not None
    shown = found.to_dict()
    assert shown["error_type"] == "OrderNotFoundError"
    assert shown["attempts"] == 1
    assert shown["source_queue"].endswith(":SqsJobs-orders")
    assert dlq.find("no-such-id") is None


def test_find_stops_at_the_message_and_leaves_every_letter_visible(harness: Harness, dlq: DeadLetterQueue) -> None:
    receives: list[str] = []
    dlq._sqs.meta.events.register("before-call.sqs.ReceiveMessage", lambda **_: receives.append("receive"))
    target = dlq.peek()[0]
    receives.clear()

    assert dlq.find(target.message_id) is not None
    # One receive holds all six: the scan ends there, without the empty polls that prove a DLQ read to its end.
    assert receives == ["receive"]
    assert harness.queue_counts(dead_letter=True) == (6, 0)
    assert dlq.find("no-such-id") is None
    assert len(receives) > 2


def test_verify_counts_the_redriven_jobs_that_fail_again(harness: Harness, dlq: DeadLetterQueue) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    harness.put_order("9001", email="found@example.com")  # the fix: one of the three orders now exists
    report = dlq.move(Filter(error_type="OrderNotFoundError"))
    while harness.deliver() is not None:
        pass
    result = verify(harness.clients("sqs"), dlq, report.moved_letters, since=since, timeout_s=5, poll_s=0.1)
    assert result.drained
    assert result.returned_to_dlq == 2
    assert sorted(letter.entity_id for letter in result.returned) == ["9002", "9003"]
    assert harness.mails_to("found@example.com") == 1


def test_verify_reports_a_queue_that_did_not_drain(harness: Harness, dlq: DeadLetterQueue) -> None:
    report = dlq.move(Filter(error_type="OrderNotFoundError"))
    ticks = iter(range(100))
    result = verify(
        harness.clients("sqs"),
        dlq,
        report.moved_letters,
        since=datetime.now(UTC),
        timeout_s=3,
        clock=lambda: float(next(ticks)),
        sleep=lambda _: None,
    )
    assert not result.drained
    assert queue_busy(harness.clients("sqs"), dlq.source_url) == 3


def test_deleting_fails_loudly_when_sqs_refuses(dlq: DeadLetterQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    letters = dlq.peek()
    monkeypatch.setattr(
        dlq._sqs, "delete_message_batch", lambda **_: {"Failed": [{"Id": "0", "Code": "x", "SenderFault": True}]}
    )
    with pytest.raises(DlqError, match="could not delete 1"):
        dlq.delete(letters[:1])


def test_a_redrive_restores_binary_attributes_as_bytes(harness: Harness) -> None:
    # The runtime packs the publisher's attributes as JSON, binary values as base64 text; the copy a redrive
    # sends must carry the original bytes again, not their base64 spelling.
    payload = bytes(range(256))
    harness.send(
        json.dumps({"job": "order_confirmation", "id": "9100"}),
        MessageAttributes={"blob": {"DataType": "Binary", "BinaryValue": payload}},
    )
    harness.deliver()
    local = harness.deployment.queues["orders"]
    dead = DeadLetterQueue(harness.clients("sqs"), local.dlq_url, local.url, runtime(harness), receive_wait_s=0)
    assert dead.move(Filter(match="9100")).moved == 1
    [message] = harness.clients("sqs").receive_message(QueueUrl=local.url, MessageAttributeNames=["All"])["Messages"]
    assert message["MessageAttributes"]["blob"]["BinaryValue"] == payload


FIFO_CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="ordered",
            fifo=True,
            jobs=(JobSpec(name="ordered_job", handler="tests.functional.sample_jobs.flaky"),),
        ),
    ),
)


def test_a_fifo_dlq_is_redriven_into_the_same_message_groups(clients: ClientFactory) -> None:
    # Given two dead letters of a FIFO queue, from two message groups
    fifo = Harness.provisioned(clients, FIFO_CATALOG)
    local = fifo.deployment.queues["ordered"]
    for group_id in ("order-1", "order-2"):
        fifo.send("not json", queue="ordered", MessageGroupId=group_id, MessageDeduplicationId=group_id)
    while fifo.deliver("ordered") is not None:
        pass
    dead = DeadLetterQueue(
        clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
    )
    assert sorted(letter.group_id or "" for letter in dead.peek()) == ["order-1", "order-2"]
    # When they are redriven client side, each goes back into its own group (SQS refuses a FIFO send without one)
    report = dead.move(Filter())
    assert (report.moved, report.failed) == (2, [])
    received = clients("sqs").receive_message(
        QueueUrl=local.url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["MessageGroupId"]
    )["Messages"]
    assert sorted(message["Attributes"]["MessageGroupId"] for message in received) == ["order-1", "order-2"]


def test_attributes_a_producer_named_like_evidence_are_never_shown_as_evidence(harness: Harness) -> None:
    # A producer that may send to the DLQ (or whose message SQS's redrive moved there) sets `jobs.*` itself.
    local = harness.deployment.queues["orders"]
    forged = {
        deadletter.ERROR_TYPE: {"DataType": "String", "StringValue": "ForgedError"},
        deadletter.ATTEMPTS: {"DataType": "Number", "StringValue": "10"},
    }
    harness.clients("sqs").send_message(QueueUrl=local.dlq_url, MessageBody=envelope("8888"), MessageAttributes=forged)
    dead = DeadLetterQueue(harness.clients("sqs"), local.dlq_url, local.url, runtime(harness), receive_wait_s=0)
    [letter] = dead.peek()
    assert letter.error_type == NO_EVIDENCE
    assert letter.to_dict()["attempts"] is None
    assert letter.publisher_attributes == forged  # the producer's data, kept and redriven as it came
    assert dead.move(Filter()).moved == 1
    [message] = harness.clients("sqs").receive_message(QueueUrl=local.url, MessageAttributeNames=["All"])["Messages"]
    assert message["MessageAttributes"] == forged
