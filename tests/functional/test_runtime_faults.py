"""Chaos's runtime fault on the real worker and moto: every AWS call the runtime makes after a job's success (its
key's slot given back, its follow-ups published, its message handed back) answers throttling, and still the job
never runs again and nothing it asked for is dropped (docs/chaos.md, docs/key-life.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from sqs_jobs.flow_control import KeyConcurrency
from sqs_jobs.local.chaos import Chaos, ChaosSettings
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import FLOW_SLOT_PREFIX
from tests.functional.conftest import Harness, key_record
from tests.functional.sample_jobs import follows_up

HANDLER = "tests.functional.sample_jobs.follows_up"
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="fetching",
            max_attempts=2,
            jobs=(
                JobSpec(
                    name="fetch",
                    handler=HANDLER,
                    publishes=("parse",),
                    concurrency=KeyConcurrency(limit=1, per="customer"),
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


def faults_from_the_success(harness: Harness, queue: str) -> Chaos:
    """Chaos on the queue's worker, its runtime fault on for every call of the runtime's own from the run's return
    (its key's slot given back, the first thing after it) but its completion write: both tries of that one failing
    is the documented case where a key may run again (docs/key-life.md, "No run after a success")."""
    chaos = Chaos(ChaosSettings(seed=1))
    clients = harness.worker_clients(queue)
    chaos.register_aws(clients)

    def switch(rate: float) -> None:
        chaos.settings = replace(chaos.settings, runtime=rate)

    def before(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if str(params.get("Key", {}).get("id", {}).get("S", "")).startswith(FLOW_SLOT_PREFIX):
            switch(1.0)  # the slot's release: the run has returned
        elif '"COMPLETED"' in json.dumps(params, default=str) and chaos.settings.runtime:
            context["completion"] = True
            switch(0.0)

    def after(context: dict[str, Any], **_: Any) -> None:
        if context.get("completion"):
            switch(1.0)

    clients.register("before-parameter-build.dynamodb", before)
    clients.register("after-call.dynamodb", after)
    return chaos


def test_after_a_success_every_runtime_call_throttled_repeats_nothing_and_drops_nothing(harness: Harness) -> None:
    # Given a limited job that asks for a follow-up, and every runtime call after its completion write throttled
    chaos = faults_from_the_success(harness, "fetching")
    body = {"job": "fetch", "id": "f1", "customer": "c1", "then": "parse:f1"}
    harness.send(json.dumps(body), queue="fetching")

    # When its run succeeds
    invocation = harness.deliver("fetching")

    # Then the faults met what follows the success: the slot's release and the follow-up's publish
    injected = chaos.injected()
    assert injected.get("runtime.dynamodb.DeleteItem", 0) >= 1, injected
    assert any(name.startswith("runtime.sqs.SendMessage") for name in injected), injected
    assert key_record(harness, "fetch:f1")["status"] == "COMPLETED"
    assert follows_up.RUNS == {("fetch", "f1"): 1}
    assert invocation is not None

    # When the faults end and the message comes back after its visibility timeout
    chaos.settings = replace(chaos.settings, runtime=0.0)
    harness.expire_visibility(invocation, "fetching")
    while any(harness.deliver(queue) is not None for queue in ("fetching", "parsing")):
        pass

    # Then the job never ran again, its follow-up ran once, and nothing is left or dead-lettered
    assert follows_up.RUNS == {("fetch", "f1"): 1, ("parse", "f1"): 1}
    for queue in ("fetching", "parsing"):
        assert harness.queue_counts(queue) == (0, 0)
        assert harness.queue_counts(queue, dead_letter=True) == (0, 0)
