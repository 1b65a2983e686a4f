"""A batch's records side by side (QueueSpec.parallel_records), on real SQS semantics (moto): at most that many at
once, partial batch responses and idempotency per record as before, FIFO order kept per message group."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.conftest import Harness, envelope
from tests.functional.sample_jobs import flaky, gather

WIDE = QueueSpec(
    name="wide",
    parallel_records=4,
    function_timeout_s=20,
    jobs=(
        JobSpec(name="gather", handler="tests.functional.sample_jobs.gather", time_limit_s=5),
        JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky", time_limit_s=5),
    ),
)
GROUPS = QueueSpec(
    name="groups",
    fifo=True,
    parallel_records=4,
    function_timeout_s=20,
    jobs=(JobSpec(name="grouped", handler="tests.functional.sample_jobs.gather", time_limit_s=5),),
)
CATALOG = Catalog(queues=(WIDE, GROUPS))


@pytest.fixture
def parallel(clients: ClientFactory) -> Iterator[Harness]:
    gather.reset()
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    flaky.ATTEMPTS_SEEN.clear()
    yield Harness.provisioned(clients, CATALOG)


def send_fifo(harness: Harness, job: str, entity_id: str, group: str) -> None:
    harness.send(envelope(job, entity_id), queue="groups", MessageGroupId=group)


def test_a_batch_runs_at_most_parallel_records_at_once_and_all_of_them(parallel: Harness) -> None:
    for n in range(10):
        parallel.send(envelope("gather", f"g{n}"), queue="wide")
    invocation = parallel.deliver("wide")
    assert invocation is not None and len(invocation.event["Records"]) == 10
    assert invocation.failed_ids == []
    assert gather.MOST["all"] == WIDE.records_in_parallel == 4
    assert parallel.queue_counts("wide") == (0, 0)


def test_one_record_at_a_time_when_the_queue_says_so(clients: ClientFactory) -> None:
    serial = QueueSpec(name="serial", parallel_records=1, jobs=WIDE.jobs)
    catalog = Catalog(queues=(serial,))
    harness = Harness.provisioned(clients, catalog)
    gather.reset()
    for n in range(3):
        harness.send(envelope("gather", f"s{n}"), queue="serial")
    invocation = harness.deliver("serial")
    assert invocation is not None and invocation.failed_ids == []
    assert gather.MOST["all"] == 1


def test_the_partial_batch_response_names_exactly_the_records_that_failed(parallel: Harness) -> None:
    flaky.FAILURES.update({"t1": 1, "t2": 1})
    ids = {"ok1": "flaky", "t1": "flaky", "reject-1": "flaky", "ok2": "flaky", "t2": "flaky", "fail-x": "gather"}
    for entity_id, job in ids.items():
        parallel.send(envelope(job, entity_id), queue="wide")
    invocation = parallel.deliver("wide")
    assert invocation is not None
    by_id = {json.loads(r["body"])["id"]: r["messageId"] for r in invocation.event["Records"]}
    # Transient failures are retried (reported failed); the permanent one is dead-lettered and acknowledged.
    assert sorted(invocation.failed_ids) == sorted(by_id[i] for i in ("t1", "t2", "fail-x"))
    assert sorted(invocation.deleted) == sorted(by_id[i] for i in ("ok1", "ok2", "reject-1"))
    assert [json.loads(m["Body"])["id"] for m in parallel.dead_letters("wide")] == ["reject-1"]
    assert flaky.SIDE_EFFECTS == {"ok1": 1, "ok2": 1}


def test_two_records_of_one_key_in_one_batch_run_it_once(parallel: Harness) -> None:
    # Side by side, the idempotency record still lets exactly one of them run the job.
    for _ in range(2):
        parallel.send(envelope("flaky", "same"), queue="wide")
    invocation = parallel.deliver("wide")
    assert invocation is not None and len(invocation.event["Records"]) == 2
    assert flaky.SIDE_EFFECTS == {"same": 1}
    outcomes = [line["message"] for line in parallel.log_lines() if line.get("id") == "same" and "message" in line]
    assert outcomes.count("job done") == 1
    assert "duplicate skipped" in outcomes or any("handed back" in outcome for outcome in outcomes)


def test_fifo_groups_run_side_by_side_and_each_group_in_order(parallel: Harness) -> None:
    for group in ("a", "b", "c"):
        for n in range(3):
            send_fifo(parallel, "grouped", f"{group}-{n}", group)
    invocation = parallel.deliver("groups")
    assert invocation is not None and len(invocation.event["Records"]) == 9
    assert invocation.failed_ids == []
    assert {group: gather.MOST[group] for group in "abc"} == {"a": 1, "b": 1, "c": 1}  # one at a time per group
    assert gather.MOST["all"] == 3  # the groups beside each other
    assert {group: gather.STARTED[group] for group in "abc"} == {g: [f"{g}-{n}" for n in range(3)] for g in "abc"}


def test_a_fifo_group_stops_at_its_first_failure_while_the_others_carry_on(parallel: Harness) -> None:
    send_fifo(parallel, "grouped", "fail-0", "fail")
    send_fifo(parallel, "grouped", "fail-later-1", "fail")
    send_fifo(parallel, "grouped", "ok-0", "ok")
    send_fifo(parallel, "grouped", "ok-1", "ok")
    invocation = parallel.deliver("groups")
    assert invocation is not None
    by_id = {json.loads(r["body"])["id"]: r["messageId"] for r in invocation.event["Records"]}
    assert sorted(invocation.failed_ids) == sorted([by_id["fail-0"], by_id["fail-later-1"]])
    assert gather.STARTED["fail"] == ["fail-0"]  # the record after the failure never ran
    assert gather.STARTED["ok"] == ["ok-0", "ok-1"]
