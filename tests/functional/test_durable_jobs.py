"""Durable jobs end to end on moto and AWS's durable execution testing SDK: the imports queue's worker starts the
execution and acknowledges the record; import_orders runs as checkpointed steps; failures are classified, retried
and dead-lettered with evidence; a second start of a key is a no-op; a redrive after a failure starts anew."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from example.orders_csv import orders_csv
from functions.durable.record import DurableRecords
from functions.durable.runtime import DurableRuntime, DurableSettings
from functions.jobs.import_orders import csv_key
from functions.worker.clients import ClientFactory
from functions.worker.observability import Observability
from functions.worker.runtime import Worker
from jobctl.local.durable import LocalDurableFunctions
from sqs_jobs.catalog import CATALOG
from sqs_jobs.stack_names import durable_function_name
from tests.functional.conftest import REGION, Harness, attributes_of, envelope, narrowed

JOB = "import_orders"
QUEUE = "imports"
IMPORTS = narrowed(CATALOG, QUEUE)


@dataclass
class Durables:
    harness: Harness
    functions: LocalDurableFunctions
    runtime: DurableRuntime

    def worker(self) -> Worker:
        return Worker(
            settings=self.harness.deployment.worker_settings(QUEUE),
            clients=self.harness.worker_clients(QUEUE),
            observability=Observability.create(output=self.harness.output),
            durable_starter=self.functions,
        )

    def put_csv(self, import_id: str, rows: int, bad_row: int | None = None) -> None:
        self.harness.clients("s3").put_object(
            Bucket=self.harness.deployment.resources["imports_bucket"],
            Key=csv_key(import_id),
            Body=orders_csv(import_id, rows, bad_row),
        )

    def publish(self, import_id: str) -> Any:
        self.harness.send(envelope(JOB, import_id), queue=QUEUE)
        invocation = self.harness.deliver(QUEUE, worker=self.worker())
        assert invocation is not None
        return invocation

    def only_execution(self) -> Any:
        [execution] = self.functions.executions(JOB)
        return execution

    def wait(self, arn: str) -> Any:
        return self.functions.wait(JOB, arn, timeout_s=60)

    def imported(self) -> dict[str, dict[str, Any]]:
        table = self.harness.deployment.resources["imported_orders_table"]
        items: dict[str, dict[str, Any]] = {}
        paginator = self.harness.clients("dynamodb").get_paginator("scan")
        for page in paginator.paginate(TableName=table):
            for item in page["Items"]:
                items[item["order_id"]["S"]] = item
        return items

    def record(self, import_id: str) -> Any:
        records = DurableRecords(
            lambda: self.harness.clients("dynamodb"), self.harness.deployment.idempotency_table, 3600
        )
        return records.read(f"{JOB}:{import_id}")


def durables_of(harness: Harness, catalog: Any = IMPORTS) -> Durables:
    settings = DurableSettings(worker=harness.deployment.worker_settings(QUEUE), job=JOB)
    if catalog is not IMPORTS:
        settings = replace(settings, worker=replace(settings.worker, queue=catalog.queue(QUEUE)))
    runtime = DurableRuntime(
        settings, harness.worker_clients(QUEUE), observability=Observability.create(output=harness.output)
    )
    functions = LocalDurableFunctions(
        {JOB: (durable_function_name("test", JOB), runtime)}, state_dir=None, skip_time=True
    )
    return Durables(harness=harness, functions=functions, runtime=runtime)


@pytest.fixture
def durables(clients: ClientFactory) -> Iterator[Durables]:
    found = durables_of(Harness.provisioned(clients, IMPORTS))
    yield found
    found.functions.close()


def test_the_worker_starts_the_execution_and_acknowledges_the_record(durables: Durables) -> None:
    durables.put_csv("imp-1", rows=2_500)
    invocation = durables.publish("imp-1")
    assert len(invocation.deleted) == 1, invocation
    assert durables.harness.queue_counts(QUEUE) == (0, 0)
    execution = durables.only_execution()
    result = durables.wait(execution.durable_execution_arn)
    assert result.status.value == "SUCCEEDED", result
    assert json.loads(result.result) == {"import_id": "imp-1", "file": "imports/imp-1.csv", "chunks": 3, "rows": 2500}
    imported = durables.imported()
    assert len(imported) == 2_500
    assert imported["o-imp-1-001234"]["amount"]["N"] == "234.25"
    # One step per 1,000-row chunk, beside the plan, the summary and the runtime's end.
    steps = sorted(str(op.name) for op in result.get_all_operations())
    assert steps == ["chunk-0", "chunk-1", "chunk-2", "jobs.end", "plan", "summary"]
    record = durables.record("imp-1")
    assert (record.status, record.steps_done, record.generation) == ("SUCCEEDED", 5, 0)


def test_a_second_publish_of_the_key_starts_nothing(durables: Durables) -> None:
    durables.put_csv("imp-2", rows=10)
    durables.publish("imp-2")
    durables.wait(durables.only_execution().durable_execution_arn)
    durables.publish("imp-2")
    assert len(durables.functions.executions(JOB)) == 1


def test_a_permanent_failure_is_dead_lettered_with_evidence_and_a_redrive_starts_anew(durables: Durables) -> None:
    durables.put_csv("imp-3", rows=1_500, bad_row=1_200)
    durables.publish("imp-3")
    result = durables.wait(durables.only_execution().durable_execution_arn)
    assert result.status.value == "FAILED"
    # The first chunk was imported before the second failed; the bad chunk's step ran once (permanent).
    assert len(durables.imported()) == 1_000
    [dead_letter] = durables.harness.dead_letters(QUEUE)
    evidence = attributes_of(dead_letter)
    assert json.loads(dead_letter["Body"]) == {"job": JOB, "id": "imp-3"}
    assert evidence["jobs.error_type"] == "ImportFileError"
    assert evidence["jobs.failure"] == "permanent"
    assert evidence["jobs.attempts"] == "1"
    assert "chunk-1" in evidence["jobs.error_message"]
    record = durables.record("imp-3")
    assert (record.status, record.generation, record.last_error_type) == ("FAILED", 1, "ImportFileError")
    # Fixed and redriven: the same key starts a new execution (the next generation's name), which succeeds.
    durables.put_csv("imp-3", rows=1_500)
    durables.publish("imp-3")
    executions = durables.functions.executions(JOB)
    assert len(executions) == 2
    newest = max(executions, key=lambda execution: execution.start_input.execution_name)
    assert newest.start_input.execution_name.endswith("-g1")
    assert durables.wait(newest.durable_execution_arn).status.value == "SUCCEEDED"
    assert len(durables.imported()) == 1_500


def test_a_transient_failure_is_retried_with_backoff_up_to_the_queues_attempts(
    clients: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.jobs import import_orders

    calls: list[int] = []

    def flaky(context: Any, bucket: str, key: str, start: int, end: int) -> int:
        calls.append(start)
        raise TimeoutError("the table did not answer")

    monkeypatch.setattr(import_orders, "import_chunk", flaky)
    catalog = replace(IMPORTS, queues=(replace(IMPORTS.queue(QUEUE), max_attempts=3, backoff_base_s=1),))
    harness = Harness.provisioned(clients, catalog)
    durables = durables_of(harness, catalog)
    try:
        durables.put_csv("imp-4", rows=10)
        durables.publish("imp-4")
        result = durables.wait(durables.only_execution().durable_execution_arn)
    finally:
        durables.functions.close()
    assert result.status.value == "FAILED"
    assert len(calls) == 3  # the queue's max_attempts, per step
    [dead_letter] = harness.dead_letters(QUEUE)
    evidence = attributes_of(dead_letter)
    assert (evidence["jobs.error_type"], evidence["jobs.failure"], evidence["jobs.attempts"]) == (
        "TimeoutError",
        "retries_exhausted",
        "3",
    )


def test_durable_jobs_in_a_batch_are_counted_when_their_executions_end_and_the_callback_reports_them(
    durables: Durables,
) -> None:
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    from sqs_jobs.batches import batch_item_id

    durables.put_csv("imp-b1", rows=10)
    durables.put_csv("imp-b2", rows=10, bad_row=4)
    batch_id = durables.harness.stack_publisher().batch(
        [(JOB, "imp-b1"), (JOB, "imp-b2")], on_complete=("import_report", "b-dec"), description="December"
    )
    # The worker starts both executions: starting counts nothing.
    assert durables.harness.deliver(QUEUE, worker=durables.worker()) is not None
    table = durables.harness.deployment.idempotency_table
    item = durables.harness.clients("dynamodb").get_item(TableName=table, Key={"id": {"S": batch_item_id(batch_id)}})
    assert "succeeded" not in item["Item"] and "dead" not in item["Item"]
    outcomes = sorted(durables.wait(e.durable_execution_arn).status.value for e in durables.functions.executions(JOB))
    assert outcomes == ["FAILED", "SUCCEEDED"]
    # The execution that ended last published the completion callback: import_report reads the batch and mails.
    assert durables.harness.deliver(QUEUE, worker=durables.worker()) is not None
    sent = ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages
    subjects = [mail.subject for mail in sent if "b-dec" in mail.subject]
    assert subjects == ["Imports b-dec: 1 of 2 imports succeeded, 1 dead-lettered"]
    assert durables.harness.queue_counts(QUEUE) == (0, 0)
