"""Chains on moto: each step an ordinary job run by the real worker, the next published once the one before it
succeeded; a dead-lettered step stops the chain, `jobctl chain show` says where, and its redrive continues it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from sqs_jobs.batches import CallbackNotPublishableError
from sqs_jobs.cli.chain_lookup import look_up_chain
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.dlq import DeadLetterQueue, Filter
from sqs_jobs.envelope import Envelope
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.provenance import Provenance
from tests.functional.conftest import Harness
from tests.functional.sample_jobs import tallied

HANDLER = "tests.functional.sample_jobs.tallied"
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="etl",
            max_attempts=2,
            jobs=(
                JobSpec(name="extract", handler=HANDLER, publishes=("transform",)),
                JobSpec(name="transform", handler=HANDLER, publishes=("load",)),
            ),
        ),
        QueueSpec(name="loading", jobs=(JobSpec(name="load", handler=HANDLER),)),
    )
)


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    tallied.reset()
    yield Harness.provisioned(clients, CATALOG)


def drain_all(harness: Harness) -> None:
    while any(harness.deliver(queue) is not None for queue in ("etl", "loading")):
        pass


def shown(chain_id: str) -> dict[str, Any]:
    result = CliRunner().invoke(jobctl, ["--output", "json", "chain", "show", chain_id])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def test_each_step_runs_once_in_order_after_the_one_before_it_succeeded(harness: Harness) -> None:
    chain_id = harness.stack_publisher().chain(
        [("extract", "f1"), Envelope("transform", "f1", key="f1-v2"), ("load", "f1")], description="import f1"
    )
    drain_all(harness)
    assert tallied.KEYS == ["extract:f1", "transform:f1-v2", "load:f1"]
    view = shown(chain_id)
    assert view["verdict"] == "done: all 3 steps succeeded"
    assert [step["state"] for step in view["steps"]] == ["succeeded"] * 3


def test_a_dead_lettered_step_stops_the_chain_and_its_redrive_continues_it(harness: Harness) -> None:
    # Given a chain whose second step fails permanently
    # (and another chain stopped at a step whose ID holds this one's)
    chain_id = harness.stack_publisher().chain([("extract", "f2"), ("transform", "bad-f2"), ("load", "f2")])
    harness.stack_publisher().chain([("extract", "f20"), ("transform", "bad-f20"), ("load", "f20")])
    drain_all(harness)
    # Then the chain stops there: the third step never ran, and jobctl says where and how to resume
    assert sorted(tallied.KEYS) == ["extract:f2", "extract:f20"]
    view = shown(chain_id)
    assert view["stopped_at_step"] == 2
    assert [step["state"] for step in view["steps"]] == ["succeeded", "dead-lettered", "waiting"]
    found = re.search(r"jobctl dlq redrive .* --match (\S+)`", str(view["resume"]))
    assert found is not None, view["resume"]
    # (jobctl's catalog is the app's: where it can't derive the step's key, it says both ways a step ends dead)
    assert "dead (dead-lettered, or cancelled before it ran" in view["verdict"]
    # With the catalog of the step's job, its record is read: no cancel there, so a dead letter to redrive
    table = harness.deployment.idempotency_table
    verdict = look_up_chain(harness.clients("dynamodb"), table, chain_id, catalog=CATALOG).verdict
    assert verdict.startswith("stopped at step 2 of 3 (transform:bad-f2), dead-lettered: fix it, then `jobctl dlq")
    assert f"redrive etl --match {found.group(1)}` continues the chain" in verdict
    # When the step is fixed and its dead letter redriven as the hint says: that step's only
    tallied.FIXED.add("bad-f2")
    local = harness.deployment.queues["etl"]
    dlq = DeadLetterQueue(
        harness.clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
    )
    assert dlq.move(Filter(match=found.group(1))).moved == 1
    drain_all(harness)
    # Then the chain goes on from there, each step once; the other chain stays stopped
    assert [key for key in tallied.KEYS if not key.endswith("f20")] == ["extract:f2", "transform:bad-f2", "load:f2"]
    assert "transform:bad-f20" not in tallied.KEYS
    assert shown(chain_id)["verdict"] == "done: all 3 steps succeeded"


def test_a_step_whose_job_may_not_publish_the_next_is_refused_before_anything_is_written(harness: Harness) -> None:
    refusal = r"^step 1's job 'extract' may not publish step 2's job 'load'"
    with pytest.raises(CallbackNotPublishableError, match=refusal):
        harness.stack_publisher().chain([("extract", "f3"), ("load", "f3")])
    with pytest.raises(TypeError, match=r"^chain step 2 is 'load'; accepted: a \(job, id\) pair"):
        harness.stack_publisher().chain([("extract", "f3"), "load"])  # type: ignore[list-item]
    assert harness.clients("dynamodb").scan(TableName=harness.deployment.idempotency_table)["Count"] == 0
    assert harness.queue_counts("etl") == (0, 0)


def test_a_run_of_a_steps_job_and_id_under_another_key_does_not_continue_the_chain(harness: Harness) -> None:
    # Given a chain stopped at its first step (dead-lettered)
    chain_id = harness.stack_publisher().chain([("extract", "bad-f5"), ("transform", "f5")])
    drain_all(harness)
    step = shown(chain_id)["steps"][0]
    assert step["state"] == "dead-lettered"
    # When another run of that job and ID, under another key and with the step's `batch` field, succeeds
    tallied.FIXED.add("bad-f5")
    copy = {"job": "extract", "id": "bad-f5", "key": "by-hand", "batch": f"{step['batch_id']}.0"}
    harness.send(json.dumps(copy), queue="etl")
    drain_all(harness)
    # Then it ran under its own key, and the chain stays stopped there: the next step was not published
    assert tallied.KEYS == ["extract:by-hand"]
    assert [step["state"] for step in shown(chain_id)["steps"]] == ["dead-lettered", "waiting"]


def test_a_step_cancelled_before_it_ran_is_shown_cancelled_with_how_to_run_it_after_all(harness: Harness) -> None:
    from sqs_jobs.batches import parse_member_field
    from sqs_jobs.cli.job_cancel import CancelOutcome, cancel_job, target_for, withdraw

    # Given a chain whose second step (its own key) an operator cancels before it runs
    steps: list[tuple[str, str] | Envelope] = [
        ("extract", "f6"),
        Envelope("transform", "f6", key="f6-v2"),
        ("load", "f6"),
    ]
    chain_id = harness.stack_publisher().chain(steps)
    dynamodb, table = harness.clients("dynamodb"), harness.deployment.idempotency_table
    target = target_for(CATALOG.queue("etl"), "transform", "f6", "f6-v2")
    operator = "arn:aws:iam::123456789012:user/ops\u202e"
    assert cancel_job(dynamodb, table, target, operator).outcome is CancelOutcome.CANCELLED
    drain_all(harness)
    # Then the step never ran and left no dead letter, and the chain stopped there
    assert tallied.KEYS == ["extract:f6"]
    assert harness.queue_counts("etl", dead_letter=True) == (0, 0)
    # And chain show says so (exit 0, as batch show's for a batch complete but not succeeded): cancelled, when, by
    # whom, and how to run it after all, never a redrive of a dead letter it doesn't have
    view = shown(chain_id)
    assert view["stopped_at_step"] == 2
    assert [step["state"] for step in view["steps"]] == ["succeeded", "cancelled", "waiting"]
    cancelled = view["steps"][1]
    assert cancelled["cancelled_by"] == operator and cancelled["cancelled_at"] is not None
    assert view["verdict"].startswith("stopped at step 2 of 3 (transform:f6), cancelled before it ran")
    assert "dlq redrive" not in view["resume"] and "no dead letter" in view["verdict"]
    assert "`jobctl job cancel transform f6 --key f6-v2 --undo`" in view["resume"]
    as_text = CliRunner().invoke(jobctl, ["chain", "show", chain_id])
    assert as_text.exit_code == 0, as_text.output
    assert "cancelled before it ran" in as_text.output and "\u202e" not in as_text.output
    # When the operator does as it says: undo the cancel, then publish the step again as its code says
    assert withdraw(dynamodb, table, target).outcome is CancelOutcome.WITHDRAWN
    [code] = re.findall(r"`(publisher\.publish_many\(.*?\))`", view["resume"])
    publish = {"publisher": harness.stack_publisher(), "Envelope": Envelope, "parse_member_field": parse_member_field}
    eval(code, publish)
    drain_all(harness)
    # Then the chain goes on from there, each step once
    assert tallied.KEYS == ["extract:f6", "transform:f6-v2", "load:f6"]
    assert shown(chain_id)["verdict"] == "done: all 3 steps succeeded"


def test_a_step_cancelled_while_it_ran_is_resumed_by_undoing_the_cancel_and_redriving_it() -> None:
    from datetime import UTC, datetime

    from sqs_jobs.cli.chain_lookup import Cancel, ChainView, Step

    # A step whose run an operator stopped (the key's record CANCELLED with a request): it has a dead letter
    cancel = Cancel(at=datetime(2026, 12, 4, 9, tzinfo=UTC), by="ops", while_running=True)
    batch_id = "a" * 32
    steps = (
        Step(0, "extract", "f7", "b" * 32, "succeeded", queue="etl"),
        Step(1, "transform", "f7", batch_id, "dead-lettered", cancel=cancel, queue="etl"),
        Step(2, "load", "f7", "c" * 32, "waiting", queue="loading"),
    )
    view = ChainView("d" * 32, "", steps)
    assert view.verdict.startswith(
        "stopped at step 2 of 3 (transform:f7), dead-lettered as JobCancelledError: cancelled while it ran (at "
        "2026-12-04T09:00:00+00:00 by ops)"
    )
    assert view.resume_hint == (
        "to run it after all, undo the cancel (`jobctl job cancel transform f7 --undo`), then "
        f"`jobctl dlq redrive etl --match {batch_id}` continues the chain"
    )
    assert view.to_dict()["steps"][1]["cancelled_by"] == "ops"
