"""Unique and debounced jobs on the real worker (moto), decided when each copy is consumed
(lib/sqs_jobs/worker/uniqueness.py): which copies run, wait or are acknowledged unrun, what is counted and kept, and
that a retry, a fresh copy or a producer's attribute never changes it. Windows are judged by SQS's SentTimestamp
against the worker's clock, which the tests move ahead instead of waiting."""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sqs_jobs.cli.console.app import create_app
from sqs_jobs.cli.console.security import Guard
from sqs_jobs.cli.job_cancel import CancelOutcome, cancel_job, target_for
from sqs_jobs.cli.job_life import jobs_in_flight
from sqs_jobs.cli.job_lookup import JobLookup
from sqs_jobs.local.emulator import Invocation
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import CANCELLED_COPY, DEFERRED, DROPPED, RUNTIME_FAULT, RUNTIME_JOB
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.provenance import SENT_AT
from sqs_jobs.worker.runtime import Worker
from sqs_jobs.worker.uniqueness import iso_ms
from tests.functional.conftest import Harness, attributes_of, key_record, metric_values
from tests.functional.console_support import JobPageBackend
from tests.functional.sample_jobs import by_document, flaky
from tests.functional.test_job_lookup import _lookup

ROOT = Path(__file__).resolve().parents[2]
FLAKY = "tests.functional.sample_jobs.flaky"
FLOWS = QueueSpec(
    name="flows",
    max_attempts=3,
    jobs=(
        JobSpec(name="unique_flaky", handler=FLAKY, unique_for_s=60),
        JobSpec(name="brief_unique", handler=FLAKY, unique_for_s=1),
        JobSpec(name="by_document", handler="tests.functional.sample_jobs.by_document", unique_for_s=60),
        JobSpec(name="debounced", handler=FLAKY, debounce_s=30),
    ),
)
# Every second receive is a message's last: a debounced copy waiting there goes back as a fresh copy.
TIGHT = QueueSpec(
    name="flows_tight",
    max_attempts=1,
    max_receives=2,
    jobs=(JobSpec(name="tight_debounced", handler=FLAKY, debounce_s=30),),
)
CATALOG = Catalog(queues=(FLOWS, TIGHT))
PAST_THE_WINDOW_S = 31.0


@dataclass
class Clock:
    """The worker's time: the real one moved `ahead_s` ahead, or fixed `at` a moment."""

    ahead_s: float = 0.0
    at: float | None = None

    def __call__(self) -> float:
        return self.at if self.at is not None else time.time() + self.ahead_s


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    for counter in (flaky.FAILURES, flaky.SIDE_EFFECTS, by_document.RUNS):
        counter.clear()
    yield Harness.provisioned(clients, CATALOG)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def body(job: str, entity_id: str, key: str | None = None, **extra: str) -> str:
    return json.dumps({"job": job, "id": entity_id, **({"key": key} if key else {}), **extra})


def deliver(harness: Harness, clock: Clock, queue: str = "flows") -> Invocation:
    invocation = harness.deliver(queue, worker=harness.worker(queue, clock))
    assert invocation is not None
    return invocation


def counted(harness: Harness, metric: str, reason: str = "") -> float:
    """A metric's count, in total or for one reason."""
    documents = [doc for doc in harness.metrics() if metric in doc and doc.get("reason", "") == reason]
    return sum(sum(metric_values(doc, metric)) for doc in documents)


def sent_ms(invocation: Invocation, message_id: str) -> int:
    [record] = [record for record in invocation.event["Records"] if record["messageId"] == message_id]
    return int(record["attributes"]["SentTimestamp"])


def logged(harness: Harness, reason: str) -> list[dict[str, object]]:
    return [line for line in harness.log_lines() if line.get("reason") == reason and "message" in line]


# --- unique ----------------------------------------------------------------------------------------------------


def test_a_second_publish_within_the_window_is_dropped_and_a_retry_of_the_first_still_runs(
    harness: Harness, clock: Clock
) -> None:
    flaky.FAILURES["u-1"] = 1
    harness.send(body("unique_flaky", "u-1", key="v1"), queue="flows")
    first = deliver(harness, clock)  # v1 claims the window and fails once: back after its backoff
    assert first.failed_ids and flaky.SIDE_EFFECTS["u-1"] == 0

    harness.send(body("unique_flaky", "u-1", key="v2"), queue="flows")
    second = deliver(harness, clock)
    harness.expire_visibility(first, queue="flows")
    third = deliver(harness, clock)

    # v2, another publish sent within v1's window, was acknowledged unrun; v1's retry ran: it holds the claim.
    assert second.failed_ids == [] and len(second.deleted) == 1 and third.failed_ids == []
    assert flaky.SIDE_EFFECTS["u-1"] == 1
    assert key_record(harness, "unique_flaky:v1")["status"] == "COMPLETED"
    assert key_record(harness, "unique_flaky:v2") == {}
    assert counted(harness, DROPPED, "unique") == 1 and counted(harness, DROPPED) == 1
    [dropped] = logged(harness, "unique")
    assert (dropped["unique_key"], dropped["claimed_by_key"]) == ("unique_flaky:u-1", "unique_flaky:v1")
    assert harness.queue_counts("flows") == (0, 0) and harness.dead_letters("flows") == []


def test_of_a_burst_consumed_in_one_batch_one_runs(harness: Harness, clock: Clock) -> None:
    for version in range(10):
        harness.send(body("unique_flaky", "u-2", key=f"v{version}"), queue="flows")

    invocation = deliver(harness, clock)  # the records run side by side: their claims race

    assert invocation.failed_ids == [] and len(invocation.deleted) == 10
    assert flaky.SIDE_EFFECTS["u-2"] == 1
    assert counted(harness, DROPPED, "unique") == 9


def test_a_publish_after_the_window_runs_and_claims_a_new_one(harness: Harness, clock: Clock) -> None:
    harness.send(body("brief_unique", "u-3", key="v1"), queue="flows")
    deliver(harness, clock)
    time.sleep(1.05)  # the 1 s window is judged by the messages' SentTimestamp

    harness.send(body("brief_unique", "u-3", key="v2"), queue="flows")
    harness.send(body("brief_unique", "u-3", key="v3"), queue="flows")
    deliver(harness, clock)

    assert flaky.SIDE_EFFECTS["u-3"] == 2  # v1, then one of v2 and v3
    assert counted(harness, DROPPED, "unique") == 1


def test_a_producers_attribute_never_moves_its_message_out_of_a_window(harness: Harness, clock: Clock) -> None:
    harness.send(body("unique_flaky", "u-4", key="v1"), queue="flows")
    deliver(harness, clock)
    # A producer's `jobs.sent_at` a day later is its data: its message was sent when SQS says, within v1's window.
    a_day_later = str(int((time.time() + 86_400) * 1000))
    harness.send(
        body("unique_flaky", "u-4", key="v2"),
        queue="flows",
        MessageAttributes={SENT_AT: {"DataType": "Number", "StringValue": a_day_later}},
    )

    deliver(harness, clock)

    assert flaky.SIDE_EFFECTS["u-4"] == 1 and counted(harness, DROPPED, "unique") == 1


def test_unique_keys_are_the_jobs_own_and_each_tenants(harness: Harness, clock: Clock) -> None:
    # by_document is unique by the document it names, whatever the entity; each tenant's keys are its own.
    harness.send(body("by_document", "e-1", document="d-1"), queue="flows")
    harness.send(body("unique_flaky", "u-5", key="a", tenant="acme"), queue="flows")
    harness.send(body("unique_flaky", "u-5", key="b", tenant="globex"), queue="flows")
    deliver(harness, clock)
    harness.send(body("by_document", "e-2", document="d-1"), queue="flows")
    harness.send(body("unique_flaky", "u-5", key="c", tenant="acme"), queue="flows")

    deliver(harness, clock)

    assert by_document.RUNS == {"e-1": 1}
    assert flaky.SIDE_EFFECTS["u-5"] == 2  # acme's a and globex's b; acme's c dropped
    assert counted(harness, DROPPED, "unique") == 2


def test_a_unique_key_function_that_fails_dead_letters_the_record_unrun(harness: Harness, clock: Clock) -> None:
    harness.send(body("by_document", "e-3"), queue="flows")  # no document: its unique_key raises

    invocation = deliver(harness, clock)

    assert invocation.failed_ids == [] and by_document.RUNS == {}
    [letter] = harness.dead_letters("flows")
    evidence = attributes_of(letter)
    assert (evidence["jobs.error_type"], evidence["jobs.failure"]) == ("UniqueKeyError", "permanent")
    assert evidence["jobs.error_message"] == "job 'by_document' unique_key raised KeyError: 'document'"


def test_a_failing_state_store_is_the_runtimes_fault_and_the_record_comes_back(harness: Harness, clock: Clock) -> None:
    harness.send(body("unique_flaky", "u-6", key="v1"), queue="flows")
    settings = replace(harness.deployment.worker_settings("flows"), idempotency_table="no-such-table")
    worker = Worker(
        settings=settings,
        clients=harness.worker_clients("flows"),
        observability=Observability.create(output=harness.output),
        clock=clock,
    )

    invocation = harness.deliver("flows", worker=worker)

    assert invocation is not None and len(invocation.failed_ids) == 1
    assert flaky.SIDE_EFFECTS["u-6"] == 0 and harness.dead_letters("flows") == []
    assert counted(harness, RUNTIME_FAULT, "idempotency_store") == 1
    assert {doc["job"] for doc in harness.metrics() if RUNTIME_FAULT in doc} == {RUNTIME_JOB}
    [handed_back] = logged(harness, "runtime_fault")
    assert "unique/debounce state" in str(handed_back["error"])


# --- debounce --------------------------------------------------------------------------------------------------


def test_of_a_burst_only_the_last_runs_once_after_its_window(harness: Harness, clock: Clock) -> None:
    message_ids = []
    for _ in range(5):
        message_ids.append(harness.send(body("debounced", "d-1"), queue="flows"))
        time.sleep(0.003)  # distinct SentTimestamps: five publishes, not one delivered five times

    first = deliver(harness, clock)  # each registers; none runs; those a later one registered before are dropped
    assert flaky.SIDE_EFFECTS["d-1"] == 0
    assert message_ids[-1] in first.failed_ids  # the last waits out its window
    assert len(first.failed_ids) + len(first.deleted) == 5

    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(first, queue="flows")
    second = deliver(harness, clock)

    assert second.failed_ids == [] and flaky.SIDE_EFFECTS["d-1"] == 1
    assert counted(harness, DROPPED, "superseded") == 4
    assert counted(harness, DEFERRED, "debounce") == len(first.failed_ids)
    # The last one ran, under a key of its own first send (the publisher named none).
    last_sent = sent_ms(first, message_ids[-1])
    assert key_record(harness, f"debounced:d-1@{iso_ms(last_sent)}")["status"] == "COMPLETED"
    assert key_record(harness, "debounced:d-1") == {}
    assert harness.queue_counts("flows") == (0, 0)


def test_a_later_publish_arriving_while_an_earlier_one_waits_supersedes_it(harness: Harness, clock: Clock) -> None:
    earlier_id = harness.send(body("debounced", "d-2"), queue="flows")
    earlier = deliver(harness, clock)
    later_id = harness.send(body("debounced", "d-2"), queue="flows")
    later = deliver(harness, clock)
    assert earlier.failed_ids == [earlier_id] and later.failed_ids == [later_id]  # both wait

    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(earlier, queue="flows")
    harness.expire_visibility(later, queue="flows")
    deliver(harness, clock)

    assert flaky.SIDE_EFFECTS["d-2"] == 1
    assert counted(harness, DROPPED, "superseded") == 1
    assert key_record(harness, f"debounced:d-2@{iso_ms(sent_ms(later, later_id))}")["status"] == "COMPLETED"
    [superseded] = logged(harness, "superseded")
    assert superseded["latest_message"] == later_id


def test_a_second_burst_later_runs_again(harness: Harness, clock: Clock) -> None:
    for burst in range(2):
        clock.ahead_s = 0.0
        harness.send(body("debounced", "d-3"), queue="flows")
        waiting = deliver(harness, clock)
        clock.ahead_s = PAST_THE_WINDOW_S
        harness.expire_visibility(waiting, queue="flows")
        deliver(harness, clock)
        # Each burst runs once: the second is not taken for a duplicate of the first's default key.
        assert flaky.SIDE_EFFECTS["d-3"] == burst + 1


def test_a_key_the_publisher_named_is_the_runs_key_and_an_operation_runs_once(harness: Harness, clock: Clock) -> None:
    for _ in range(2):  # the same operation published again later: answered from its record, not run again
        clock.ahead_s = 0.0
        harness.send(body("debounced", "d-6", key="v7"), queue="flows")
        waiting = deliver(harness, clock)
        clock.ahead_s = PAST_THE_WINDOW_S
        harness.expire_visibility(waiting, queue="flows")
        deliver(harness, clock)

    assert flaky.SIDE_EFFECTS["d-6"] == 1
    assert key_record(harness, "debounced:v7")["status"] == "COMPLETED"


def test_the_winner_s_retry_runs_after_a_failed_run_even_once_a_later_publish_registered(
    harness: Harness, clock: Clock
) -> None:
    flaky.FAILURES["d-4"] = 1
    winner_id = harness.send(body("debounced", "d-4"), queue="flows")
    waiting = deliver(harness, clock)
    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(waiting, queue="flows")
    failed = deliver(harness, clock)  # it fires, and its run fails: back after its backoff
    assert failed.failed_ids == [winner_id] and flaky.SIDE_EFFECTS["d-4"] == 0

    clock.ahead_s = 0.0
    later_id = harness.send(body("debounced", "d-4"), queue="flows")
    later = deliver(harness, clock)  # a later publish registers and waits
    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(failed, queue="flows")
    retried = deliver(harness, clock)

    assert retried.failed_ids == [] and flaky.SIDE_EFFECTS["d-4"] == 1  # the winner's retry ran
    winner_key = f"debounced:d-4@{iso_ms(sent_ms(failed, winner_id))}"
    assert (key_record(harness, winner_key)["status"], key_record(harness, winner_key)["runs"]) == ("COMPLETED", 2)
    # The later publish still runs after its own window: it came after the winner's run began.
    harness.expire_visibility(later, queue="flows")
    deliver(harness, clock)
    assert flaky.SIDE_EFFECTS["d-4"] == 2
    assert key_record(harness, winner_key)["status"] == "COMPLETED"  # never deleted as a superseded winner's
    assert later_id not in {record["messageId"] for record in retried.event["Records"]}


def test_a_failed_winner_superseded_by_a_later_run_is_dropped_and_its_record_removed(
    harness: Harness, clock: Clock
) -> None:
    flaky.FAILURES["d-5"] = 1
    winner_id = harness.send(body("debounced", "d-5"), queue="flows")
    waiting = deliver(harness, clock)
    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(waiting, queue="flows")
    failed = deliver(harness, clock)
    winner_key = f"debounced:d-5@{iso_ms(sent_ms(failed, winner_id))}"
    assert key_record(harness, winner_key)["status"] == "FAILED"

    clock.ahead_s = 0.0
    harness.send(body("debounced", "d-5"), queue="flows")
    later = deliver(harness, clock)
    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(later, queue="flows")
    deliver(harness, clock)  # the later one fires and runs before the winner's retry comes back
    assert flaky.SIDE_EFFECTS["d-5"] == 1
    assert key_record(harness, winner_key) == {}  # not listed as retrying for ever

    harness.expire_visibility(failed, queue="flows")
    dropped = deliver(harness, clock)

    assert dropped.failed_ids == [] and flaky.SIDE_EFFECTS["d-5"] == 1
    assert counted(harness, DROPPED, "superseded") == 1
    assert jobs_in_flight(harness.clients("dynamodb"), harness.deployment.idempotency_table, ["flows"]).jobs == []
    assert harness.queue_counts("flows") == (0, 0)


def test_a_fresh_copy_of_a_waiting_publish_keeps_its_window(
    harness: Harness, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sqs_jobs.worker.settlement.SQS_MAX_DELAY_S", 0)  # the copy is visible at once
    original_id = harness.send(body("tight_debounced", "d-6"), queue="flows_tight")
    first = deliver(harness, clock, "flows_tight")
    first_sent = sent_ms(first, original_id)
    time.sleep(0.3)  # the copy's own SentTimestamp is later
    harness.expire_visibility(first, queue="flows_tight")
    last = deliver(harness, clock, "flows_tight")  # its last allowed receive: back as a fresh copy
    assert original_id in last.deleted and flaky.SIDE_EFFECTS["d-6"] == 0

    clock.at = first_sent / 1000 + 30.1  # the original's window has ended; one from the copy's send would not have
    copied = deliver(harness, clock, "flows_tight")

    assert copied.failed_ids == [] and flaky.SIDE_EFFECTS["d-6"] == 1
    assert key_record(harness, f"tight_debounced:d-6@{iso_ms(first_sent)}")["status"] == "COMPLETED"


def test_the_state_needs_no_grant_beyond_what_the_worker_has_on_the_idempotency_table(
    harness: Harness, clock: Clock
) -> None:
    # The worker role's actions on the table, as the stack grants them (lib/sqs_jobs/cdk/job_queue.py, read without the
    # CDK).
    tree = ast.parse((ROOT / "lib" / "sqs_jobs" / "cdk" / "job_queue.py").read_text())
    [granted] = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "IDEMPOTENCY_ACTIONS"
    ]
    called: set[str] = set()
    harness.worker_clients("flows").register(
        "before-call.dynamodb", lambda model, **_: called.add(f"dynamodb:{model.name}")
    )
    # A unique drop, a debounced wait, a superseded drop, a failed winner forgotten by a later one's run.
    harness.send(body("unique_flaky", "g-1", key="v1"), queue="flows")
    harness.send(body("unique_flaky", "g-1", key="v2"), queue="flows")
    deliver(harness, clock)
    flaky.FAILURES["g-2"] = 1
    harness.send(body("debounced", "g-2"), queue="flows")
    waiting = deliver(harness, clock)
    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(waiting, queue="flows")
    failed = deliver(harness, clock)
    clock.ahead_s = 0.0
    harness.send(body("debounced", "g-2"), queue="flows")
    later = deliver(harness, clock)
    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(later, queue="flows")
    deliver(harness, clock)
    harness.expire_visibility(failed, queue="flows")
    deliver(harness, clock)

    assert counted(harness, DROPPED, "unique") == 1 and counted(harness, DROPPED, "superseded") == 1
    assert {"dynamodb:UpdateItem", "dynamodb:DeleteItem"} <= called <= set(granted)


# --- jobctl job show -------------------------------------------------------------------------------------------


def _show(harness: Harness, job: str, entity_id: str, key: str | None = None, at: float | None = None) -> JobLookup:
    """`jobctl job show` on the flows queue, at `at` (epoch seconds) if given."""
    now = datetime.fromtimestamp(at, tz=UTC) if at is not None else None
    return _lookup(harness, job, entity_id, key, now=now, queue="flows")


def test_job_show_says_whose_window_it_is_and_until_when(harness: Harness, clock: Clock) -> None:
    assert _show(harness, "unique_flaky", "s-1").to_dict()["flow"]["found"] is False  # nothing consumed yet
    claimant_id = harness.send(body("unique_flaky", "s-1", key="v1"), queue="flows")
    claimed = deliver(harness, clock)
    sent = sent_ms(claimed, claimant_id)

    found = _show(harness, "unique_flaky", "s-1", key="v1")

    assert found.verdict == "completed" and found.idempotency_key == "unique_flaky:v1"
    assert found.flow is not None
    flow = found.to_dict()["flow"]
    assert (flow["kind"], flow["unique_key"], flow["found"]) == ("unique", "unique_flaky:s-1", True)
    assert (flow["publish_key"], flow["publish_message"]) == ("unique_flaky:v1", claimant_id)
    assert flow["window_end"] == datetime.fromtimestamp((sent + 60_000) / 1000, tz=UTC)
    assert flow["said"].startswith("unique unique_flaky:s-1: window open until ")
    assert f"claimed by the publish sent {iso_ms(sent).replace('Z', '+00:00')}" in flow["said"]
    later = _show(harness, "unique_flaky", "s-1", key="v1", at=sent / 1000 + 61)
    assert later.flow is not None and "window ended at " in later.flow.describe(later.looked_at)


def test_job_show_says_which_publish_waits_and_finds_the_run_of_the_one_that_fired(
    harness: Harness, clock: Clock
) -> None:
    latest_id = harness.send(body("debounced", "s-2"), queue="flows")
    waiting = deliver(harness, clock)
    run_key = f"debounced:s-2@{iso_ms(sent_ms(waiting, latest_id))}"

    before = _show(harness, "debounced", "s-2")

    assert before.verdict == "not found" and before.flow is not None and not before.flow.latest_fired
    assert (before.flow.publish_message, before.flow.latest_run_key) == (latest_id, run_key)
    assert f"then runs as {run_key} unless a later one comes" in before.flow.describe(before.looked_at)

    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(waiting, queue="flows")
    deliver(harness, clock)
    after = _show(harness, "debounced", "s-2")

    # Without --key, the record of the run the last firing copy made, under its own key.
    assert (after.verdict, after.idempotency_key) == ("completed", run_key)
    assert after.flow is not None and after.flow.latest_fired
    assert after.to_dict()["flow"]["fired_run_key"] == run_key
    assert "ran at its window's end" in after.flow.describe(after.looked_at)


def test_the_waiting_publish_s_run_is_cancelled_by_the_key_job_show_names(harness: Harness, clock: Clock) -> None:
    harness.send(body("debounced", "s-3"), queue="flows")
    waiting = deliver(harness, clock)
    shown = _show(harness, "debounced", "s-3").flow
    assert shown is not None and shown.latest_run_key is not None
    # `jobctl job cancel debounced s-3 --key <the part after "debounced:">`
    target = target_for(FLOWS, "debounced", "s-3", shown.latest_run_key.removeprefix("debounced:"))
    assert target.key == shown.latest_run_key
    cancelled = cancel_job(harness.clients("dynamodb"), harness.deployment.idempotency_table, target, "operator")
    assert cancelled.outcome is CancelOutcome.CANCELLED

    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(waiting, queue="flows")
    fired = deliver(harness, clock)

    assert fired.failed_ids == [] and flaky.SIDE_EFFECTS["s-3"] == 0
    assert counted(harness, CANCELLED_COPY) == 1


def test_the_consoles_job_page_shows_it_too(harness: Harness, clock: Clock, tmp_path: Path) -> None:
    latest_id = harness.send(body("debounced", "s-4"), queue="flows")
    deliver(harness, clock)
    guard = Guard(host="127.0.0.1", port=8000)
    backend = JobPageBackend(CATALOG, lambda job, entity_id, key: _show(harness, job, entity_id, key))
    app = create_app(backend, guard, tmp_path)  # type: ignore[arg-type]

    page = app.test_client().get(
        f"/jobs?job=debounced&id=s-4&token={guard.access_token}",
        base_url="http://127.0.0.1:8000",
        follow_redirects=True,
    )

    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "<dt>Debounce</dt>" in text and latest_id in text and "then runs as debounced:s-4@" in text


def test_a_debounced_publish_waiting_out_its_window_is_listed_in_flight_until_it_fires(
    harness: Harness, clock: Clock
) -> None:
    from sqs_jobs.cli.job_life import JobInFlight, jobs_in_flight

    def listed() -> list[JobInFlight]:
        found = jobs_in_flight(harness.clients("dynamodb"), harness.deployment.idempotency_table, ["flows"]).jobs
        return [job for job in found if job.job == "debounced"]

    sent_id = harness.send(body("debounced", "d-9"), queue="flows")
    waiting = deliver(harness, clock)

    [entry] = listed()  # jobctl job list's and the console's view: waiting out its window, due at its end
    window_end = (sent_ms(waiting, sent_id) + 30_000) / 1000
    assert (entry.queue, entry.state.value, entry.job_id, entry.runs) == ("flows", "retrying", "d-9", 0)
    assert entry.at is not None and entry.at.timestamp() == pytest.approx(window_end, abs=0.01)
    assert "debounce window" in entry.waiting_for and entry.to_dict()["waiting_for"] == entry.waiting_for

    clock.ahead_s = PAST_THE_WINDOW_S
    harness.expire_visibility(waiting, queue="flows")
    ran = deliver(harness, clock)

    assert ran.failed_ids == [] and flaky.SIDE_EFFECTS["d-9"] == 1
    assert listed() == []  # it fired: no longer waiting
