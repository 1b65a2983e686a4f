"""`context.then(job, id)`: a job names its next step while it runs; it is published once the run succeeded, and
again (answered as a duplicate) when a redelivery is answered from the key's record, so a worker that died before
publishing it loses nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from functions.worker.clients import ClientFactory
from functions.worker.next_steps import THEN
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from tests.functional.conftest import Harness, attributes_of, key_record
from tests.functional.sample_jobs import stepper

HANDLER = "tests.functional.sample_jobs.stepper"
CATALOG = Catalog(
    queues=(
        QueueSpec(name="first", jobs=(JobSpec(name="step_one", handler=HANDLER, publishes=("step_two",)),)),
        QueueSpec(name="second", jobs=(JobSpec(name="step_two", handler=HANDLER),)),
    )
)


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    stepper.RUNS.clear()
    yield Harness.provisioned(clients, CATALOG)


def drain(harness: Harness, queue: str) -> None:
    while harness.deliver(queue) is not None:
        pass


def test_the_next_step_runs_once_after_the_step_that_named_it(harness: Harness) -> None:
    harness.send(json.dumps({"job": "step_one", "id": "7"}), queue="first")
    drain(harness, "first")
    drain(harness, "second")
    assert stepper.RUNS == ["step_one:7", "step_two:7"]
    # The step is kept with the run's result in the key's record.
    kept = json.loads(key_record(harness, "step_one:7")["data"])
    assert kept == {THEN: [["step_two", "7", None]], "result": "step_one done"}


def test_a_worker_that_dies_before_publishing_loses_no_step(harness: Harness, monkeypatch: Any) -> None:
    # Given a run that succeeded, and whose worker could not publish its next step (it died, or SQS refused)
    harness.send(json.dumps({"job": "step_one", "id": "8"}), queue="first")
    worker = harness.worker("first")
    from sqs_jobs.publisher import JobPublisher

    real_publish = JobPublisher.publish
    refused = [True]

    def publish(self: JobPublisher, *args: Any, **kwargs: Any) -> str:
        if refused[0]:
            raise ConnectionError("the worker died here")
        return real_publish(self, *args, **kwargs)

    monkeypatch.setattr(JobPublisher, "publish", publish)
    invocation = harness.deliver("first", worker=worker)
    assert invocation is not None and not invocation.deleted  # handed back
    assert harness.queue_counts("second") == (0, 0)
    # When its message comes again
    refused[0] = False
    harness.expire_visibility(invocation, queue="first")
    drain(harness, "first")
    drain(harness, "second")
    # Then it is answered from the key's record (not run again) and its next step is published from there, once
    assert stepper.RUNS == ["step_one:8", "step_two:8"]


def test_a_next_step_the_job_may_not_publish_is_a_permanent_failure_with_evidence(harness: Harness) -> None:
    harness.send(json.dumps({"job": "step_one", "id": "rogue-1"}), queue="first")
    drain(harness, "first")
    [letter] = harness.dead_letters("first")
    evidence = attributes_of(letter)
    assert evidence["jobs.error_type"] == "NextStepNotAllowedError"
    assert evidence["jobs.failure"] == "permanent"
    assert harness.queue_counts("second") == (0, 0)


def test_a_run_whose_completion_could_not_be_written_still_publishes_its_next_step(harness: Harness) -> None:
    from tests.functional.test_job_results import fail_completion_writes

    fail_completion_writes(harness, times=2, queue="first")
    harness.send(json.dumps({"job": "step_one", "id": "9"}), queue="first")
    drain(harness, "first")
    drain(harness, "second")
    assert stepper.RUNS == ["step_one:9", "step_two:9"]
