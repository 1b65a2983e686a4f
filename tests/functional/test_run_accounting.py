"""Runs are counted where they happen: in the key's idempotency record (lib/sqs_jobs/worker/run_ledger.py), not by
SQS's receive count. A receive that runs nothing spends no run, a run that never reports back still counts, and
SQS's redrive policy (maxReceiveCount = QueueSpec.receive_limit) never moves a message before the runtime has
dead-lettered it with evidence."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig

from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.run_ledger import RunLedger
from sqs_jobs.worker.settings import IDEMPOTENCY_KEY_PREFIX, idempotency_record_id
from tests.functional.conftest import Harness, attributes_of, envelope, key_record
from tests.functional.sample_jobs import flaky, late_finisher, nap

STANDARD = QueueSpec(
    name="standard",
    max_attempts=3,
    jobs=(JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky"),),
)
# FIFO, with a limit on receives small enough to reach in a test.
ORDERED = QueueSpec(
    name="ordered",
    fifo=True,
    max_attempts=3,
    max_receives=4,
    jobs=(JobSpec(name="ordered_flaky", handler="tests.functional.sample_jobs.flaky"),),
)
# FIFO and short invocations, one record at a time: a 1.5 s nap leaves the records after it no time.
ORDERED_TIGHT = QueueSpec(
    name="ordered_tight",
    fifo=True,
    function_timeout_s=5,
    parallel_records=1,
    max_attempts=1,
    max_receives=2,
    jobs=(
        JobSpec(name="fifo_nap", handler="tests.functional.sample_jobs.nap", time_limit_s=2),
        JobSpec(name="fifo_flaky", handler="tests.functional.sample_jobs.flaky", time_limit_s=2),
    ),
)
# A job cut at its 1 s limit after its work was done.
LATE = QueueSpec(
    name="late",
    function_timeout_s=10,
    jobs=(JobSpec(name="late_finisher", handler="tests.functional.sample_jobs.late_finisher", time_limit_s=1),),
)
CATALOG = Catalog(queues=(STANDARD, ORDERED, ORDERED_TIGHT, LATE))


@pytest.fixture
def accounting(clients: ClientFactory) -> Iterator[Harness]:
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    flaky.ATTEMPTS_SEEN.clear()
    nap.FAILURES.clear()
    yield Harness.provisioned(clients, CATALOG)


def crashed_runs(harness: Harness, key: str, runs: int) -> None:
    """What `runs` runs of `key` leave when each one's environment dies: started (counted), never ended, their
    in-progress records past their invocations' deadlines."""
    ledger = RunLedger(harness.deployment.idempotency_table, lambda _: harness.clients("dynamodb"))
    ledger.configure(IdempotencyConfig(event_key_jmespath="key"), key_prefix=IDEMPOTENCY_KEY_PREFIX)
    for _ in range(runs):
        ledger.prepare(max_runs=100, time_left=lambda: 5.0)
        ledger.save_inprogress(data={"key": key}, remaining_time_in_millis=0)
        time.sleep(0.005)  # its deadline is now in the past


def send_group(harness: Harness, queue: str, job: str, *entity_ids: str) -> list[str]:
    url = harness.deployment.queues[queue].url
    sqs = harness.clients("sqs")
    return [
        str(sqs.send_message(QueueUrl=url, MessageBody=envelope(job, entity_id), MessageGroupId="g")["MessageId"])
        for entity_id in entity_ids
    ]


def receives_of(invocation: Any) -> dict[str, int]:
    return {
        json.loads(record["body"])["id"]: int(record["attributes"]["ApproximateReceiveCount"])
        for record in invocation.event["Records"]
    }


def test_a_run_that_never_reported_back_counts(accounting: Harness) -> None:
    # Given a run of the key that started and died with its environment
    crashed_runs(accounting, "flaky:1", 1)
    # When the message is delivered (its first receive, as far as this test's queue knows)
    accounting.send(envelope("flaky", "1"), queue="standard")
    invocation = accounting.deliver("standard")
    # Then it runs as the key's second attempt
    assert invocation is not None and invocation.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == [2]
    record = key_record(accounting, "flaky:1")
    assert (record["status"], record["runs"]) == ("COMPLETED", 2)


def test_a_key_whose_last_run_never_reported_back_is_dead_lettered_with_evidence_and_a_redrive_starts_afresh(
    accounting: Harness,
) -> None:
    crashed_runs(accounting, "flaky:1", STANDARD.max_attempts)
    accounting.send(envelope("flaky", "1"), queue="standard")
    invocation = accounting.deliver("standard")
    # Not run a fourth time: dead-lettered, with what the record knows
    assert invocation is not None and invocation.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == []
    [dead] = accounting.dead_letters("standard")
    evidence = attributes_of(dead)
    assert evidence["jobs.error_type"] == "RunNeverReportedError"
    assert evidence["jobs.failure"] == "retries_exhausted"
    assert evidence["jobs.attempts"] == str(STANDARD.max_attempts)
    assert "never reported back" in evidence["jobs.error_message"]
    # The record says which message was dead-lettered (ENDING); a redrive (the same body as a new message) clears
    # it and runs as attempt 1, in the same delivery
    record = key_record(accounting, "flaky:1")
    assert record["ending_message"] == invocation.event["Records"][0]["messageId"] and "dead_lettered_at" in record
    accounting.send(dead["Body"], queue="standard")
    redriven = accounting.deliver("standard")
    assert redriven is not None and redriven.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == [1]
    assert key_record(accounting, "flaky:1")["status"] == "COMPLETED"


def test_a_failed_run_is_kept_in_the_record_for_the_next_delivery(accounting: Harness) -> None:
    flaky.FAILURES["1"] = 1
    accounting.send(envelope("flaky", "1"), queue="standard")
    first = accounting.deliver("standard")
    assert first is not None and len(first.failed_ids) == 1
    record = key_record(accounting, "flaky:1")
    assert (record["status"], record["runs"]) == ("FAILED", 1)
    assert (record["last_error_type"], record["last_failure"]) == ("ConnectionRefusedError", "transient")
    assert record["first_failed_at"] == record["last_failed_at"]
    assert "in_progress_expiration" not in record
    accounting.expire_visibility(first, "standard")
    accounting.deliver("standard")
    assert flaky.ATTEMPTS_SEEN == [1, 2]
    done = key_record(accounting, "flaky:1")
    assert (done["status"], done["runs"]) == ("COMPLETED", 2)
    assert "first_failed_at" not in done  # a key reused after its record expires starts clean


def test_fifo_records_behind_a_failing_one_keep_their_runs_and_go_on_once_it_is_dead_lettered(
    accounting: Harness,
) -> None:
    # Given a group whose head always fails, with two messages behind it
    flaky.FAILURES["head"] = 99
    send_group(accounting, "ordered", "ordered_flaky", "head", "second", "third")
    # When the head runs out of runs (each delivery receives the whole group)
    for attempt in range(1, ORDERED.max_attempts + 1):
        invocation = accounting.deliver("ordered")
        assert invocation is not None
        assert receives_of(invocation) == {"head": attempt, "second": attempt, "third": attempt}
        if attempt < ORDERED.max_attempts:
            assert len(invocation.failed_ids) == 3  # the head retried, the rest skipped behind it
            accounting.expire_visibility(invocation, "ordered")
    # Then on its last run the head is dead-lettered and the rest of the group goes on in the same invocation,
    # each as its first run, although SQS has delivered each of them three times
    assert invocation is not None and invocation.failed_ids == []
    assert [json.loads(m["Body"])["id"] for m in accounting.dead_letters("ordered")] == ["head"]
    assert list(flaky.SIDE_EFFECTS) == ["second", "third"]
    assert flaky.ATTEMPTS_SEEN == [1, 2, 3, 1, 1]


def test_fifo_a_hand_back_is_not_taken_for_a_failure_and_on_the_last_receive_is_dead_lettered_with_evidence(
    accounting: Harness,
) -> None:
    # The nap uses up the invocation; the record after it in its group has no time left
    send_group(accounting, "ordered_tight", "fifo_nap", "1.5")
    send_group(accounting, "ordered_tight", "fifo_flaky", "1")
    worker = accounting.worker("ordered_tight")
    first = accounting.deliver("ordered_tight", worker=worker)
    assert first is not None and len(first.failed_ids) == 1  # handed back, not failed
    assert flaky.ATTEMPTS_SEEN == []
    lines = [line for line in accounting.log_lines() if line.get("id") == "1"]
    assert [line["message"] for line in lines] == ["handed back unrun; visible again later"]
    assert lines[0]["reason"] == "no_time"
    counts = [doc for doc in accounting.metrics() if doc.get("job") == "fifo_flaky" and "reason" not in doc]
    assert all("JobFailed" not in doc and "JobRetried" not in doc for doc in counts)
    assert key_record(accounting, "fifo_flaky:1") == {}  # no run spent
    # Its second receive is the queue's last (max_receives 2): in an invocation that starts with too little time
    # for it (3.5 s of the function's 5), it can't go back
    accounting.expire_visibility(first, "ordered_tight")
    second = accounting.deliver("ordered_tight", worker=worker, timeout_s=3.5)
    assert second is not None and second.failed_ids == []
    [dead] = accounting.dead_letters("ordered_tight")
    evidence = attributes_of(dead)
    assert json.loads(dead["Body"])["id"] == "1"
    assert (evidence["jobs.error_type"], evidence["jobs.failure"]) == ("ReceivesExhaustedError", "receives_exhausted")
    assert "no_time" in evidence["jobs.error_message"]


def test_fifo_a_record_skipped_on_its_last_receive_is_dead_lettered_with_evidence_not_moved_bare(
    accounting: Harness,
) -> None:
    # Given a head that fails on every run and whose dead letters the DLQ refuses: it is reported failed even on
    # the queue's last receive, and the message skipped behind it can't go back (SQS would move it bare)
    flaky.FAILURES["head"] = 99
    send_group(accounting, "ordered", "ordered_flaky", "head", "behind")
    refused: list[int] = []

    def refuse_the_heads_dead_letters(params: dict[str, Any], **_: Any) -> None:
        if params["QueueUrl"].endswith("-dlq.fifo") and json.loads(params["MessageBody"])["id"] == "head":
            refused.append(1)
            raise ConnectionResetError("the DLQ endpoint reset the connection")

    accounting.worker_clients("ordered").register(
        "provide-client-params.sqs.SendMessage", refuse_the_heads_dead_letters
    )
    for _ in range(ORDERED.receive_limit):
        invocation = accounting.deliver("ordered")
        assert invocation is not None
        accounting.expire_visibility(invocation, "ordered")
    # The head's last run (its 3rd receive) failed and its dead letter was refused, kept pending in its record;
    # on the 4th receive, the last, dead-lettering it from its record was refused again...
    assert len(refused) == 2
    assert key_record(accounting, "ordered_flaky:head")["pending_dead_letter"] == "retries_exhausted"
    assert receives_of(invocation) == {"head": ORDERED.receive_limit, "behind": ORDERED.receive_limit}
    # ...and the message behind it, on its last receive, was dead-lettered with evidence, never run
    [behind] = [m for m in accounting.dead_letters("ordered") if json.loads(m["Body"])["id"] == "behind"]
    evidence = attributes_of(behind)
    assert (evidence["jobs.error_type"], evidence["jobs.failure"]) == ("ReceivesExhaustedError", "receives_exhausted")
    assert "skipped behind a failed message" in evidence["jobs.error_message"]
    assert "behind" not in flaky.SIDE_EFFECTS


def test_a_run_cut_after_its_work_was_done_is_recorded_completed_so_its_retry_does_nothing_again(
    accounting: Harness,
) -> None:
    late_finisher.SIDE_EFFECTS.clear()
    accounting.send(envelope("late_finisher", "1"), queue="late")
    worker = accounting.worker("late")
    first = accounting.deliver("late", worker=worker)
    # Cut at its limit: retried, as any cut run is
    assert first is not None and len(first.failed_ids) == 1
    # Its code then ends untouched: nothing after the cut, so its key is completed. (Waited for by its log line,
    # written after the run leaves the runner's cut runs: a loaded machine may take a while.)
    deadline = time.monotonic() + 30
    ended_lines: list[dict[str, Any]] = []
    while not ended_lines and time.monotonic() < deadline:
        time.sleep(0.05)
        ended_lines = [
            line for line in accounting.log_lines() if line.get("message") == "run cut at its time limit has ended"
        ]
    [ended] = ended_lines
    assert (ended["outcome"], ended["interruptions"], ended["recorded_completed"]) == ("returned", 0, True)
    record = key_record(accounting, "late_finisher:1")
    assert (record["status"], record["runs"]) == ("COMPLETED", 1)
    # And the retry is a duplicate: the side effect stays one
    accounting.expire_visibility(first, "late")
    second = accounting.deliver("late", worker=worker)
    assert second is not None and second.failed_ids == []
    assert late_finisher.SIDE_EFFECTS["1"] == 1
    assert [line["message"] for line in accounting.log_lines() if line.get("message") == "duplicate skipped"]


def _expire(harness: Harness, key: str, **old_format: int) -> None:
    """The key's record past its expiry (DynamoDB's TTL deletes it within days; until then every reader takes it
    as gone); `old_format`: attributes to set as a runtime before 0.3.0 left a completion."""
    assignments = ["#expiry = :past", *(f"#{name} = :{name}" for name in old_format)]
    harness.clients("dynamodb").update_item(
        TableName=harness.deployment.idempotency_table,
        Key={"id": {"S": idempotency_record_id(key)}},
        UpdateExpression="SET " + ", ".join(assignments),
        ExpressionAttributeNames={"#expiry": "expiration", **{f"#{name}": name for name in old_format}},
        ExpressionAttributeValues={
            ":past": {"N": str(int(time.time()) - 1)},
            **{f":{name}": {"N": str(value)} for name, value in old_format.items()},
        },
    )


@pytest.mark.parametrize(
    "old_format", [{}, {"runs": 0, "completed_run": 3}], ids=["completed since 0.3.0", "completed before 0.3.0"]
)
def test_a_key_reused_after_its_completion_expired_runs_afresh_even_if_it_had_completed_on_its_last_run(
    accounting: Harness, old_format: dict[str, int]
) -> None:
    # Given a key that completed on its last run (3 of 3): the completion keeps that number
    crashed_runs(accounting, "flaky:7", 2)
    accounting.send(envelope("flaky", "7"), queue="standard")
    assert (done := accounting.deliver("standard")) is not None and done.failed_ids == []
    assert (key_record(accounting, "flaky:7")["status"], key_record(accounting, "flaky:7")["runs"]) == ("COMPLETED", 3)
    # When its record has expired and the key is published again
    _expire(accounting, "flaky:7", **old_format)
    flaky.ATTEMPTS_SEEN.clear()
    accounting.send(envelope("flaky", "7"), queue="standard")
    again = accounting.deliver("standard")
    # Then it runs as the first run of a new life, nothing dead-lettered, and completes with that number
    assert again is not None and again.failed_ids == [] and flaky.ATTEMPTS_SEEN == [1]
    assert flaky.SIDE_EFFECTS["7"] == 2
    record = key_record(accounting, "flaky:7")
    assert (record["status"], record["runs"], "completed_run" in record) == ("COMPLETED", 1, False)
    assert accounting.dead_letters("standard") == []


def test_a_counting_start_that_finds_an_expired_completion_starts_its_key_afresh(accounting: Harness) -> None:
    """A start that isn't a first delivery (a redelivery, a message a previous runtime counted) counts on with its
    UpdateItem, which refuses an expired completion; the ledger then starts the key at run 1."""
    crashed_runs(accounting, "flaky:8", 2)
    accounting.send(envelope("flaky", "8"), queue="standard")
    assert (done := accounting.deliver("standard")) is not None and done.failed_ids == []
    _expire(accounting, "flaky:8")
    ledger = RunLedger(accounting.deployment.idempotency_table, lambda _: accounting.clients("dynamodb"))
    ledger.configure(IdempotencyConfig(event_key_jmespath="key"), key_prefix=IDEMPOTENCY_KEY_PREFIX)
    ledger.prepare(max_runs=3, time_left=lambda: 5.0, first_delivery=False)

    ledger.save_inprogress(data={"key": "flaky:8"}, remaining_time_in_millis=60_000)

    started = ledger.started()
    assert started is not None and started.number == 1
    record = key_record(accounting, "flaky:8")
    assert (record["status"], record["runs"]) == ("INPROGRESS", 1)
