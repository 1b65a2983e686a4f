"""`context.then(job, id)` on moto with the real worker: a run's follow-ups are published once it has succeeded,
never when it fails, and after a crash or a failed publish by its duplicate, from the key's record; each runs once."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.key_life import FOLLOW_UPS
from sqs_jobs.worker.names import FOLLOW_UP_PUBLISHED
from sqs_jobs.worker.settings import idempotency_record_id
from tests.functional.conftest import Harness
from tests.functional.sample_jobs import follows_up, late_finisher

HANDLER = "tests.functional.sample_jobs.follows_up"
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="fetching",
            max_attempts=2,
            jobs=(
                JobSpec(name="fetch", handler=HANDLER, publishes=("parse",)),
                JobSpec(
                    name="late_fetch",
                    handler="tests.functional.sample_jobs.late_finisher",
                    time_limit_s=1,
                    publishes=("parse",),
                ),
            ),
        ),
        QueueSpec(name="parsing", jobs=(JobSpec(name="parse", handler=HANDLER),)),
    )
)


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    follows_up.reset()
    yield Harness.provisioned(clients, CATALOG)


def fetch(harness: Harness, entity_id: str, **fields: str) -> None:
    harness.send(json.dumps({"job": "fetch", "id": entity_id, **fields}), queue="fetching")


def drain(harness: Harness) -> None:
    while any(harness.deliver(queue) is not None for queue in ("fetching", "parsing")):
        pass


def key_record(harness: Harness, key: str) -> dict[str, Any]:
    table = harness.deployment.idempotency_table
    item = harness.clients("dynamodb").get_item(TableName=table, Key={"id": {"S": idempotency_record_id(key)}})
    return dict(item["Item"])


def published(harness: Harness) -> dict[str, int]:
    """FollowUpPublished counted under fetch, in all and per follow-up job (EMF documents of the worker)."""
    counts: dict[str, int] = {}
    for metric in harness.metrics():
        if FOLLOW_UP_PUBLISHED in metric and metric.get("job") == "fetch":
            reason = metric.get("reason", "(all)")
            value = metric[FOLLOW_UP_PUBLISHED]
            counts[reason] = counts.get(reason, 0) + (sum(value) if isinstance(value, list) else value)
    return counts


def test_a_succeeded_runs_follow_ups_are_published_once_and_each_runs_once(harness: Harness) -> None:
    fetch(harness, "f1", then="parse:f1,parse:f1-appendix,parse:f1")  # the same one twice is one follow-up

    drain(harness)

    assert follows_up.RUNS == {("fetch", "f1"): 1, ("parse", "f1"): 1, ("parse", "f1-appendix"): 1}
    kept = json.loads(key_record(harness, "fetch:f1")[FOLLOW_UPS]["S"])
    assert kept == [{"job": "parse", "id": "f1"}, {"job": "parse", "id": "f1-appendix"}]
    assert published(harness) == {"(all)": 2, "parse": 2}


def test_a_failed_run_publishes_nothing_and_its_retry_that_succeeds_publishes_once(harness: Harness) -> None:
    fetch(harness, "f2", then="parse:f2", fail="transient")
    harness.deliver("fetching")

    assert harness.queue_counts("parsing") == (0, 0)
    assert FOLLOW_UPS not in key_record(harness, "fetch:f2")


def test_a_publish_that_fails_brings_the_record_back_and_its_duplicate_publishes_from_the_record(
    harness: Harness,
) -> None:
    # The worker's SQS refuses the first send to the follow-up's queue: the run has completed, its message not.
    refused: list[str] = []

    def refuse_once(**_: Any) -> None:
        if not refused:
            refused.append("SendMessageBatch")
            raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, "SendMessageBatch")

    worker = harness.worker("fetching")
    harness.worker_clients("fetching").register("before-call.sqs.SendMessageBatch", refuse_once)
    fetch(harness, "f3", then="parse:f3")
    invocation = harness.deliver("fetching", worker=worker)
    assert invocation is not None and refused == ["SendMessageBatch"]
    assert harness.queue_counts("parsing") == (0, 0)
    assert key_record(harness, "fetch:f3")["status"]["S"] == "COMPLETED"

    harness.expire_visibility(invocation, "fetching")
    drain(harness)

    # The redelivery was answered from the key's record (the job ran once) and published what the record keeps.
    assert follows_up.RUNS == {("fetch", "f3"): 1, ("parse", "f3"): 1}
    assert harness.queue_counts("fetching") == (0, 0)


def test_a_redelivered_duplicate_publishes_again_and_the_follow_up_is_answered_from_its_own_key(
    harness: Harness,
) -> None:
    fetch(harness, "f4", then="parse:f4")
    drain(harness)
    fetch(harness, "f4", then="parse:f4")  # a producer's second publish, or a redrive: a duplicate

    drain(harness)

    assert follows_up.RUNS == {("fetch", "f4"): 1, ("parse", "f4"): 1}
    assert published(harness) == {"(all)": 2, "parse": 2}


def test_a_follow_up_the_jobs_publishes_does_not_list_ends_in_the_dlq_naming_the_fix(harness: Harness) -> None:
    fetch(harness, "f5", then="fetch:f6")  # fetch lists only parse

    # A configuration error: retried (a deploy may list it) until the key's runs are spent.
    for _ in range(CATALOG.queue("fetching").max_attempts):
        invocation = harness.deliver("fetching")
        assert invocation is not None
        harness.expire_visibility(invocation, "fetching")

    [letter] = harness.dead_letters("fetching")
    attributes = {name: value["StringValue"] for name, value in letter["MessageAttributes"].items()}
    assert attributes["jobs.error_type"] == "FollowUpNotPublishableError"
    assert "add it to its JobSpec.publishes (listed: parse)" in attributes["jobs.error_message"]
    assert ("fetch", "f6") not in follows_up.RUNS


def test_a_run_cut_after_its_work_was_done_keeps_its_follow_ups_for_the_retry_answered_from_its_record(
    harness: Harness,
) -> None:
    late_finisher.SIDE_EFFECTS.clear()
    harness.send(json.dumps({"job": "late_fetch", "id": "f7", "then": "parse:f7"}), queue="fetching")
    worker = harness.worker("fetching")
    first = harness.deliver("fetching", worker=worker)
    assert first is not None and len(first.failed_ids) == 1  # cut at its limit
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if key_record(harness, "late_fetch:f7")["status"]["S"] == "COMPLETED":
            break
        time.sleep(0.05)
    assert FOLLOW_UPS in key_record(harness, "late_fetch:f7")

    harness.expire_visibility(first, "fetching")
    drain(harness)

    assert late_finisher.SIDE_EFFECTS["f7"] == 1
    assert follows_up.RUNS == {("parse", "f7"): 1}


def test_a_run_whose_completion_could_not_be_written_publishes_its_follow_ups_all_the_same(harness: Harness) -> None:
    from tests.functional.test_job_results import fail_completion_writes

    # Both completion writes fail: the run is acknowledged all the same, and its record keeps no follow-ups.
    fail_completion_writes(harness, times=2, queue="fetching")
    fetch(harness, "f8", then="parse:f8")

    drain(harness)

    assert follows_up.RUNS == {("fetch", "f8"): 1, ("parse", "f8"): 1}
    assert FOLLOW_UPS not in key_record(harness, "fetch:f8")
