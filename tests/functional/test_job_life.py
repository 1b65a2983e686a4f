"""The job's life as an operator sees it (sqs_jobs.cli.job_life): a running key is listed with since when, by which
worker and its progress; a failed one as retrying with its runs, last error and when it is due; a completed one not
at all. Read from the sparse index the runtime's own writes keep, never by scanning the table."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import pytest

from sqs_jobs.cli.job_life import InFlight, jobs_in_flight
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import LIFE, LIFE_SHARDS, LifeState
from sqs_jobs.worker.run_ledger import LedgerEntry, RunIdentity, RunLedger, StartedRun
from sqs_jobs.worker.settings import idempotency_record_id
from tests.functional.conftest import Harness, envelope, key_record
from tests.functional.sample_jobs import stepwise

# Every run listed from its start (list_running_after_s=0), as a queue whose runs an operator watches.
QUEUE = QueueSpec(
    name="steps",
    jobs=(JobSpec(name="stepwise", handler="tests.functional.sample_jobs.stepwise"),),
    backoff_base_s=30,
    list_running_after_s=0,
)
OTHER = QueueSpec(name="others", jobs=(JobSpec(name="other_steps", handler="tests.functional.sample_jobs.stepwise"),))
# A run is listed once it has lasted LONG_S (a new key's first run; the default is 5 s).
LONG_S = 0.4
LATE = QueueSpec(
    name="late",
    jobs=(JobSpec(name="late_steps", handler="tests.functional.sample_jobs.stepwise"),),
    list_running_after_s=LONG_S,
)
CATALOG = Catalog(queues=(QUEUE, OTHER, LATE))


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    stepwise.reset()
    yield Harness.provisioned(clients, CATALOG)
    stepwise.reset()


def _in_flight(harness: Harness, queues: tuple[str, ...] = ("steps",), **options: object) -> InFlight:
    return jobs_in_flight(
        harness.clients("dynamodb"),
        harness.deployment.idempotency_table,
        queues,
        **options,  # type: ignore[arg-type]
    )


def test_a_running_job_is_listed_with_since_when_by_whom_and_its_progress(harness: Harness) -> None:
    seen: list[InFlight] = []
    stepwise.BETWEEN.append(lambda job_id, step: seen.append(_in_flight(harness)) if step == 2 else None)
    harness.send(envelope("stepwise", "r-1"), queue="steps")
    before = datetime.now(UTC)

    invocation = harness.deliver("steps")

    assert invocation is not None and invocation.failed_ids == []
    [during] = seen
    [running] = during.of(LifeState.RUNNING)
    assert (running.queue, running.job, running.job_id, running.key, running.runs) == (
        "steps",
        "stepwise",
        "r-1",
        "stepwise:r-1",
        1,
    )
    assert running.started_at is not None and before - timedelta(seconds=1) <= running.started_at <= datetime.now(UTC)
    # Which worker: the Lambda log stream and the request ID of the invocation that runs it.
    stream, request_id = running.run_by.split(" ")
    assert stream == f"local/{request_id}" and len(request_id) == 36
    assert running.progress is not None and (running.progress.done, running.progress.total) == (1, 3)
    assert not running.stalled
    # One query per state and shard, whatever the table holds.
    assert during.queries == len(LifeState) * LIFE_SHARDS
    # Completed: no longer in flight, and out of the index.
    assert _in_flight(harness).jobs == []
    assert LIFE not in key_record(harness, "stepwise:r-1")


def test_a_failed_job_is_listed_as_retrying_with_its_error_and_when_it_is_due(harness: Harness) -> None:
    stepwise.FAIL_IDS.add("f-1")
    harness.send(envelope("stepwise", "f-1"), queue="steps")
    failed_at = datetime.now(UTC)

    invocation = harness.deliver("steps")

    assert invocation is not None and invocation.failed_ids
    [retrying] = _in_flight(harness, states=[LifeState.RETRYING]).jobs
    assert (retrying.job_id, retrying.runs, retrying.last_error_type) == ("f-1", 1, "StepFailedError")
    assert retrying.last_error == "step 1 of f-1 refused"
    # Due when its message is visible again: after the backoff the worker chose (base 30 s, full jitter).
    assert retrying.at is not None and failed_at <= retrying.at <= failed_at + timedelta(seconds=31)
    assert _in_flight(harness, states=[LifeState.RUNNING]).jobs == []

    # Its next run succeeds: it leaves the lists.
    stepwise.FAIL_IDS.clear()
    harness.expire_visibility(invocation, queue="steps")
    assert harness.deliver("steps") is not None
    assert _in_flight(harness).jobs == []


def test_lists_search_by_job_and_by_id_or_key_across_queues(harness: Harness) -> None:
    stepwise.FAIL_IDS.update({"order-17", "order-18", "invoice-9"})
    for job_id in ("order-17", "order-18"):
        harness.send(envelope("stepwise", job_id), queue="steps")
    harness.send(envelope("other_steps", "invoice-9"), queue="others")
    assert harness.deliver("steps") is not None
    assert harness.deliver("others") is not None

    both = ("steps", "others")
    assert sorted(job.job_id for job in _in_flight(harness, both).jobs) == ["invoice-9", "order-17", "order-18"]
    assert [job.job_id for job in _in_flight(harness, both, job="other_steps").jobs] == ["invoice-9"]
    assert [job.job_id for job in _in_flight(harness, both, text="ORDER-17").jobs] == ["order-17"]
    assert [job.job_id for job in _in_flight(harness, both, text="other_steps:").jobs] == ["invoice-9"]
    assert _in_flight(harness, both, job="stepwise", text="invoice").jobs == []


def test_a_list_reads_at_most_its_page_per_shard_and_says_so(harness: Harness) -> None:
    ids = [f"many-{number}" for number in range(12)]
    stepwise.FAIL_IDS.update(ids)
    for job_id in ids:
        harness.send(envelope("stepwise", job_id), queue="steps")
    while len(_in_flight(harness).jobs) < len(ids):
        assert harness.deliver("steps") is not None

    page = _in_flight(harness, per_shard=1)

    assert page.truncated
    assert 0 < len(page.jobs) <= LIFE_SHARDS
    assert not _in_flight(harness).truncated


class Listed(NamedTuple):
    """What the operator's list showed at each step of one run, each page with the seconds since the job was sent
    that its read had ended by, and how long the whole run took from the send."""

    pages: list[tuple[float, InFlight]]
    run_s: float

    def before(self, seconds: float) -> list[InFlight]:
        return [page for ended_s, page in self.pages if ended_s < seconds]


def _listed_during(harness: Harness, job_id: str, step_s: float) -> Listed:
    """Run `late_steps` for `job_id`, `step_s` a step, and list the late queue at each step."""
    pages: list[tuple[float, InFlight]] = []
    sent = time.monotonic()

    def between(seen_id: str, step: int) -> None:
        if seen_id == job_id:
            page = _in_flight(harness, ("late",))
            pages.append((time.monotonic() - sent, page))
            time.sleep(step_s)

    stepwise.BETWEEN.append(between)
    harness.send(envelope("late_steps", job_id), queue="late")
    invocation = harness.deliver("late")
    assert invocation is not None and invocation.failed_ids == []
    stepwise.BETWEEN.remove(between)
    return Listed(pages, time.monotonic() - sent)


def _until(attempt: Callable[[str], Listed], holds: Callable[[Listed], bool], prefix: str) -> tuple[str, Listed]:
    """Run `attempt` with a fresh job ID until its timing premise `holds` (a loaded machine can stall a step past
    LONG_S); fails if it never does in five tries, so the test's claim is never skipped."""
    for number in range(5):
        job_id = f"{prefix}-{number}"
        listed = attempt(job_id)
        if holds(listed):
            return job_id, listed
    pytest.fail(f"no run of {prefix} met its timing premise in five tries: {listed}")


def test_a_short_run_is_never_listed_and_its_record_never_enters_the_index(harness: Harness) -> None:
    writes: list[str] = []
    for operation in ("PutItem", "UpdateItem"):
        harness.worker_clients("late").register(
            f"before-call.dynamodb.{operation}", lambda params, **_: writes.append(str(params))
        )

    def attempt(job_id: str) -> Listed:
        writes.clear()
        return _listed_during(harness, job_id, step_s=0.0)

    # Short: the whole run, from the send, took less than LONG_S.
    job_id, listed = _until(attempt, lambda listed: listed.run_s < LONG_S, "quick")

    assert [page.jobs for _, page in listed.pages] == [[], [], []]
    assert LIFE not in key_record(harness, f"late_steps:{job_id}")
    # Neither its start nor its completion named the index's attributes: no index write was billed.
    assert len(writes) >= 2 and not any(LIFE in write for write in writes), writes


def test_a_run_that_lasts_is_listed_as_running_since_its_start_then_leaves_the_list(harness: Harness) -> None:
    before = datetime.now(UTC)

    # The run started after the send: a page read within LONG_S of the send came before it could be listed. Step 3
    # comes at least 3 LONG_S after the send (margin for the listing's own thread).
    job_id, listed = _until(
        lambda job_id: _listed_during(harness, job_id, step_s=LONG_S * 1.5),
        lambda listed: bool(listed.before(LONG_S)),
        "slow",
    )

    assert all(page.jobs == [] for page in listed.before(LONG_S))
    [running] = listed.pages[2][1].of(LifeState.RUNNING)
    assert (running.job, running.job_id, running.runs) == ("late_steps", job_id, 1)
    assert running.started_at is not None and before - timedelta(seconds=1) <= running.started_at
    assert running.started_at <= datetime.now(UTC)
    # Completed: out of the index again.
    assert _in_flight(harness, ("late",)).jobs == []
    assert LIFE not in key_record(harness, f"late_steps:{job_id}")


def test_a_late_listing_never_brings_a_finished_runs_key_back(harness: Harness) -> None:
    """The listing is conditional on the record still being that run's, in progress: sent after the completion
    (a listing delayed past it), it changes nothing."""
    _listed_during(harness, "quick-2", step_s=0.0)
    assert LIFE not in key_record(harness, "late_steps:quick-2")
    ledger = RunLedger(harness.deployment.idempotency_table, lambda _: harness.clients("dynamodb"), list_at_start=False)
    ledger.prepare(max_runs=3, time_left=lambda: 5.0, identity=RunIdentity(queue="late", job="late_steps"))
    record_id = idempotency_record_id("late_steps:quick-2")
    # The run as the ledger knew it when it started: a new key's first run, unlisted.
    ledger._scope().started = StartedRun(
        number=1, before=LedgerEntry(record_id=record_id), listed=False, identity=RunIdentity(queue="late")
    )

    sent = ledger.list_running(5.0)
    assert sent is not None
    sent.join(5)
    assert not sent.is_alive() and LIFE not in key_record(harness, "late_steps:quick-2")
    # Once is enough: a second call sends nothing.
    assert ledger.list_running(5.0) is None
