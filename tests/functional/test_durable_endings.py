"""How a durable job's execution ends, on moto and AWS's durable execution testing SDK: every ending leaves a final
durable record and one dead letter with true evidence (or, after a success, its follow-ups and batch counts), and
what follows a success or a dead letter is retried until it holds, whatever fails on the way (docs/workflows.md,
"How a durable execution ends")."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from functions.worker.clients import ClientFactory
from functions.worker.observability import Observability
from functions.worker.runtime import Worker
from sqs_jobs.batches import batch_item_id
from sqs_jobs.specs import Catalog
from tests.functional.conftest import Harness, envelope
from tests.functional.test_durable_jobs import IMPORTS, JOB, QUEUE, Durables, durables_of


def with_durable(catalog: Catalog, **changes: Any) -> Catalog:
    """The imports catalog with its durable job's `Durable` changed."""
    queue = catalog.queue(QUEUE)
    job = queue.job(JOB)
    assert job.durable is not None
    jobs = tuple(
        replace(spec, durable=replace(job.durable, **changes)) if spec.name == JOB else spec for spec in queue.jobs
    )
    return replace(catalog, queues=(replace(queue, jobs=jobs),))


@dataclass
class Run:
    """The imports queue's durable job running `run(envelope, context)` instead of the import."""

    durables: Durables

    @property
    def harness(self) -> Harness:
        return self.durables.harness

    def worker(self, starter: Any = None) -> Worker:
        return Worker(
            settings=self.harness.deployment.worker_settings(QUEUE),
            clients=self.harness.worker_clients(QUEUE),
            observability=Observability.create(output=self.harness.output),
            durable_starter=starter or self.durables.functions,
        )

    def publish(self, import_id: str, starter: Any = None) -> None:
        self.harness.send(envelope(JOB, import_id), queue=QUEUE)
        assert self.harness.deliver(QUEUE, worker=self.worker(starter)) is not None

    def ended(self, import_id: str) -> Any:
        """The newest execution of the key, once it ended."""
        newest = max(
            (
                e
                for e in self.durables.functions.executions(JOB)
                if e.start_input.input and import_id in e.start_input.input
            ),
            key=lambda e: e.start_input.execution_name,
        )
        return self.durables.wait(newest.durable_execution_arn)

    def batch_counts(self, batch_id: str) -> dict[str, list[str]]:
        item = self.harness.clients("dynamodb").get_item(
            TableName=self.harness.deployment.idempotency_table, Key={"id": {"S": batch_item_id(batch_id)}}
        )["Item"]
        return {kind: sorted(item[kind]["NS"]) for kind in ("succeeded", "dead") if kind in item}


@pytest.fixture
def durable_run(clients: ClientFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`durable_run(run, catalog=...)`: the imports queue with `run` as its durable job's code."""
    made: list[Durables] = []

    def make(run: Any, catalog: Catalog = IMPORTS) -> Run:
        from functions.jobs import import_orders

        monkeypatch.setattr(import_orders, "run", run)
        durables = durables_of(Harness.provisioned(clients, catalog), catalog)
        made.append(durables)
        return Run(durables)

    yield make
    for durables in made:
        durables.functions.close()


class SlowStart:
    """A start whose Invoke answers only once the execution it started has ended (a slow or retried call)."""

    def __init__(self, durables: Durables) -> None:
        self._durables = durables

    def start(self, job: str, name: str, payload: str) -> str | None:
        arn = self._durables.functions.start(job, name, payload)
        if arn is not None:
            self._durables.wait(arn)
        return arn


def test_a_start_answered_after_the_execution_succeeded_leaves_its_record_succeeded(durable_run: Any) -> None:
    run = durable_run(lambda envelope, context: context.step("only", lambda: 1))
    run.publish("imp-s1", starter=SlowStart(run.durables))
    assert run.ended("imp-s1").status.value == "SUCCEEDED"
    assert run.durables.record("imp-s1").status == "SUCCEEDED"
    # A batch member of that key is then counted at once, as a duplicate of a key that succeeded: its batch completes.
    batch_id = run.harness.stack_publisher().batch([(JOB, "imp-s1")], on_complete=("import_report", "b-s1"))
    assert run.harness.deliver(QUEUE, worker=run.worker()) is not None
    assert run.batch_counts(batch_id) == {"succeeded": ["0"]}
    assert len(run.durables.functions.executions(JOB)) == 1


def test_a_cut_steps_late_progress_does_not_undo_its_executions_success(durable_run: Any) -> None:
    woke = threading.Event()
    attempts: list[int] = []

    def slow(context: Any) -> int:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:  # cut at its 1 s limit; it reports progress after its retry has ended the execution
            time.sleep(2.5)
            context.progress(1, 2, "late")
            woke.set()
        return len(attempts)

    def run_job(envelope: Any, context: Any) -> dict[str, int]:
        return {"attempt": context.step("slow", lambda: slow(context))}

    run = durable_run(run_job, with_durable(IMPORTS, step_time_limit_s=1))
    run.publish("imp-s2")
    assert run.ended("imp-s2").status.value == "SUCCEEDED"
    assert woke.wait(10)
    record = run.durables.record("imp-s2")
    assert (record.status, record.generation) == ("SUCCEEDED", 0)
