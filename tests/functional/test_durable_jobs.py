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
from functions.catalog import CATALOG
from functions.jobs.import_orders import csv_key
from sqs_jobs.durable import execution_name
from sqs_jobs.durable.record import DurableRecords
from sqs_jobs.durable.runtime import DurableRuntime, DurableSettings
from sqs_jobs.local.durable import LocalDurableFunctions
from sqs_jobs.stack_names import durable_function_name
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.runtime import Worker
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


def durables_of(harness: Harness, catalog: Any = IMPORTS, runtime_clients: ClientFactory | None = None) -> Durables:
    """`runtime_clients`: the durable function's own (faults injected on them touch no worker); else the worker's."""
    settings = DurableSettings(worker=harness.deployment.worker_settings(QUEUE), job=JOB)
    if catalog is not IMPORTS:
        settings = replace(settings, worker=replace(settings.worker, queue=catalog.queue(QUEUE)))
    runtime = DurableRuntime(
        settings,
        runtime_clients or harness.worker_clients(QUEUE),
        observability=Observability.create(output=harness.output),
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


@pytest.mark.slow
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
    # One step per 1,000-row chunk, beside the plan, the summary and the runtime's outcome and end.
    steps = sorted(str(op.name) for op in result.get_all_operations())
    assert steps == ["chunk-0", "chunk-1", "chunk-2", "jobs.end", "jobs.outcome", "plan", "summary"]
    record = durables.record("imp-1")
    assert (record.status, record.steps_done, record.generation) == ("SUCCEEDED", 5, 0)
    # job show names the execution's ARN: what `aws lambda stop-durable-execution` and its history take.
    from datetime import UTC, datetime

    from sqs_jobs.cli.durable_shown import durable_lines

    assert f"  execution:    {execution.durable_execution_arn}" in durable_lines(record, datetime.now(UTC))


def test_a_second_publish_of_the_key_starts_nothing(durables: Durables) -> None:
    durables.put_csv("imp-2", rows=10)
    durables.publish("imp-2")
    durables.wait(durables.only_execution().durable_execution_arn)
    durables.publish("imp-2")
    assert len(durables.functions.executions(JOB)) == 1


@pytest.mark.slow
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


def test_job_show_says_where_a_durable_execution_is(durables: Durables) -> None:
    from datetime import UTC, datetime

    from sqs_jobs.cli.durable_shown import durable_lines
    from tests.functional.test_job_lookup import _lookup

    durables.put_csv("imp-5", rows=2_000, bad_row=1_500)
    before = _lookup(durables.harness, JOB, "imp-5", queue=QUEUE)
    assert before.durable is not None and before.durable.status is None
    durables.publish("imp-5")
    durables.wait(durables.only_execution().durable_execution_arn)
    found = _lookup(durables.harness, JOB, "imp-5", queue=QUEUE)
    assert found.verdict == "dead-lettered"
    assert found.to_dict()["durable"]["status"] == "FAILED"
    lines = durable_lines(found.durable, datetime.now(UTC))  # type: ignore[arg-type]
    assert lines[0].startswith("durable execution import_orders-") and "FAILED, 2 step(s) done" in lines[0]
    assert any(line.strip().startswith("last error:   ImportFileError: step 'chunk-1'") for line in lines)
    assert lines[-1].strip() == "a redrive of its dead letter starts execution generation 1"


@pytest.mark.slow
def test_an_execution_left_running_resumes_from_its_last_checkpoint_in_a_new_engine(
    durables: Durables, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The first engine's process is stopped dead inside chunk-1 (its thread blocks for ever, its runner is never
    closed, as after a SIGKILL); a second on the same store resumes: chunk-1 runs again from its start, the plan and
    chunk-0 don't (bench.durable_import does it with a real kill, at 100,000 rows)."""
    import threading

    from functions.jobs import import_orders

    real_chunk, real_plan = import_orders.import_chunk, import_orders.plan_chunks
    runs: list[str] = []
    stuck = threading.Event()

    def chunk(context: Any, bucket: str, key: str, start: int, end: int) -> int:
        runs.append(f"chunk@{start}")
        if len(runs) == 3 and not stuck.is_set():  # the first engine's chunk-1: it never returns
            stuck.set()
            threading.Event().wait()
        return real_chunk(context, bucket, key, start, end)

    def plan(s3: Any, bucket: str, key: str) -> list[list[int]]:
        runs.append("plan")
        return real_plan(s3, bucket, key)

    monkeypatch.setattr(import_orders, "import_chunk", chunk)
    monkeypatch.setattr(import_orders, "plan_chunks", plan)
    state = tmp_path / "durable"
    first = LocalDurableFunctions(
        {JOB: (durable_function_name("test", JOB), durables.runtime)}, state_dir=state, skip_time=True
    )
    durables.put_csv("imp-6", rows=2_500)
    name = execution_name(f"{JOB}:imp-6", 0)
    payload = json.dumps({"body": envelope(JOB, "imp-6"), "key": f"{JOB}:imp-6", "generation": 0})
    assert first.start(JOB, name, payload) is not None
    assert stuck.wait(30)
    before = list(runs)
    second = LocalDurableFunctions(
        {JOB: (durable_function_name("test", JOB), durables.runtime)}, state_dir=state, skip_time=True
    )
    try:
        [arn] = second.resume()
        result = second.wait(JOB, arn, timeout_s=60)
    finally:
        second.close()
    assert before[0] == "plan" and len(before) == 3  # plan, chunk-0, chunk-1 (stuck)
    # Resumed: chunk-1 again from its start, then chunk-2; the plan and chunk-0 never again.
    assert len(runs) == 5 and runs[3] == before[2] and runs[4] not in before
    assert runs.count("plan") == 1 and runs.count(before[1]) == 1
    assert result.status.value == "SUCCEEDED"
    assert len(durables.imported()) == 2_500


def test_the_consoles_job_page_shows_the_execution(durables: Durables, tmp_path: Any) -> None:
    from sqs_jobs.cli.console.app import create_app
    from sqs_jobs.cli.console.security import Guard
    from tests.functional.test_job_lookup import _lookup

    durables.put_csv("imp-7", rows=1_200)
    durables.publish("imp-7")
    durables.wait(durables.only_execution().durable_execution_arn)

    class Backend:
        catalog = CATALOG
        stack = "SqsJobs"

        def find_job(self, queue: str, job: str, entity_id: str, key: str | None, tenant: str | None = None) -> Any:
            return _lookup(durables.harness, job, entity_id, key, queue=QUEUE)

    guard = Guard(host="127.0.0.1", port=8000)
    app = create_app(Backend(), guard, tmp_path)  # type: ignore[arg-type]
    page = app.test_client().get(
        f"/jobs?job={JOB}&id=imp-7&token={guard.access_token}", base_url="http://127.0.0.1:8000", follow_redirects=True
    )

    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert f"{JOB}:imp-7: completed" in text
    assert "<dt>Durable execution</dt>" in text and "SUCCEEDED, 4 step(s) done" in text


def test_a_durable_member_whose_key_already_succeeded_is_counted_when_its_message_comes(durables: Durables) -> None:
    from sqs_jobs.batches import batch_item_id

    # The import ran once on its own; then a batch names the same key: no second execution, but it is counted.
    durables.put_csv("imp-b3", rows=10)
    durables.publish("imp-b3")
    durables.wait(durables.only_execution().durable_execution_arn)
    batch_id = durables.harness.stack_publisher().batch([(JOB, "imp-b3")], on_complete=("import_report", "b-again"))

    assert durables.harness.deliver(QUEUE, worker=durables.worker()) is not None

    assert len(durables.functions.executions(JOB)) == 1
    table = durables.harness.deployment.idempotency_table
    item = durables.harness.clients("dynamodb").get_item(TableName=table, Key={"id": {"S": batch_item_id(batch_id)}})
    assert item["Item"]["succeeded"]["NS"] == ["0"]
    assert durables.harness.queue_counts(QUEUE) == (1, 0)  # the completion callback, published


def test_a_batch_member_whose_key_another_message_started_is_counted_when_that_execution_ends(
    durables: Durables,
) -> None:
    from sqs_jobs.batches import batch_item_id

    # A plain publish of the key starts its execution; the batch's member message of the same key comes after.
    durables.put_csv("imp-b4", rows=3_000)
    durables.publish("imp-b4")
    batch_id = durables.harness.stack_publisher().batch([(JOB, "imp-b4")], on_complete=("import_report", "b-late"))
    assert durables.harness.deliver(QUEUE, worker=durables.worker()) is not None

    durables.wait(durables.only_execution().durable_execution_arn)

    # One execution, and whichever saw the other (its end, or the member's worker) counted the member.
    assert len(durables.functions.executions(JOB)) == 1
    table = durables.harness.deployment.idempotency_table
    item = durables.harness.clients("dynamodb").get_item(TableName=table, Key={"id": {"S": batch_item_id(batch_id)}})
    assert item["Item"]["succeeded"]["NS"] == ["0"]
    assert durables.harness.queue_counts(QUEUE) == (1, 0)  # the completion callback, published


def _with_run(clients: ClientFactory, monkeypatch: pytest.MonkeyPatch, run: Any) -> Durables:
    """The imports queue's durable job, running `run(envelope, context)` instead of the import."""
    from functions.jobs import import_orders

    monkeypatch.setattr(import_orders, "run", run)
    return durables_of(Harness.provisioned(clients, IMPORTS))


def test_a_durable_jobs_follow_ups_are_published_once_its_execution_has_succeeded(
    clients: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(envelope: Any, context: Any) -> dict[str, int]:
        context.then("import_report", f"after-{envelope.id}")
        done: int = context.step("only", lambda: 1)
        context.then("import_report", f"after-{envelope.id}")  # the same one again: kept once
        return {"done": done}

    durables = _with_run(clients, monkeypatch, run)
    try:
        durables.publish("imp-t1")
        assert durables.wait(durables.only_execution().durable_execution_arn).status.value == "SUCCEEDED"
    finally:
        durables.functions.close()
    # Published by the end step, once, with its default key: a second publish would be a duplicate.
    assert durables.harness.queue_counts(QUEUE) == (1, 0)
    assert json.loads(durables.harness.peek(QUEUE)["Body"]) == {"job": "import_report", "id": "after-imp-t1"}
    published = [line for line in durables.harness.log_lines() if line.get("message") == "follow-up jobs published"]
    assert [line["follow_ups"] for line in published] == [["import_report:after-imp-t1"]]


def test_a_durable_job_that_fails_publishes_no_follow_up_and_one_named_inside_a_step_is_refused(
    clients: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.jobs.import_orders import ImportFileError

    def run(envelope: Any, context: Any) -> None:
        context.then("import_report", f"after-{envelope.id}")
        if envelope.id == "imp-t2":
            context.step("breaks", lambda: (_ for _ in ()).throw(ImportFileError("row 3 is not a number")))
        context.step("names", lambda: context.then("import_report", "inside"))

    durables = _with_run(clients, monkeypatch, run)
    try:
        for import_id in ("imp-t2", "imp-t3"):
            durables.publish(import_id)
        outcomes = [durables.wait(e.durable_execution_arn).status.value for e in durables.functions.executions(JOB)]
    finally:
        durables.functions.close()
    assert outcomes == ["FAILED", "FAILED"]
    assert durables.harness.queue_counts(QUEUE) == (0, 0)  # no follow-up of either
    evidence = {json.loads(m["Body"])["id"]: attributes_of(m) for m in durables.harness.dead_letters(QUEUE)}
    assert evidence["imp-t2"]["jobs.error_type"] == "ImportFileError"
    # Refused at once, for good (a retry would do the same): the step's first attempt is its last.
    assert evidence["imp-t3"]["jobs.error_type"] == "DurableMisuseError"
    assert "context.then inside step 'names'" in evidence["imp-t3"]["jobs.error_message"]
    assert (evidence["imp-t3"]["jobs.failure"], evidence["imp-t3"]["jobs.attempts"]) == ("permanent", "1")


def test_an_execution_under_another_key_with_a_members_batch_field_counts_nothing(durables: Durables) -> None:
    from sqs_jobs.batches import batch_item_id

    # Given a batch of one durable member whose own message is in flight elsewhere (received, not yet run)
    durables.put_csv("imp-b5", rows=10)
    batch_id = durables.harness.stack_publisher().batch([(JOB, "imp-b5")], on_complete=("import_report", "b-copy"))
    url = durables.harness.deployment.queues[QUEUE].url
    [member] = durables.harness.clients("sqs").receive_message(QueueUrl=url, VisibilityTimeout=300)["Messages"]
    assert json.loads(member["Body"])["batch"] == f"{batch_id}.0"
    # When a message of the same job and ID under another key, carrying the member's field, runs to success
    copy = {"job": JOB, "id": "imp-b5", "key": "imp-b5-again", "batch": f"{batch_id}.0"}
    durables.harness.send(json.dumps(copy), queue=QUEUE)
    assert durables.harness.deliver(QUEUE, worker=durables.worker()) is not None
    assert durables.wait(durables.only_execution().durable_execution_arn).status.value == "SUCCEEDED"
    # Then its end counted nothing: the member is still open, and no callback was published
    table = durables.harness.deployment.idempotency_table
    item = durables.harness.clients("dynamodb").get_item(TableName=table, Key={"id": {"S": batch_item_id(batch_id)}})
    assert "succeeded" not in item["Item"] and "dead" not in item["Item"]
    assert durables.harness.queue_counts(QUEUE) == (0, 1)  # the member's own message, still in flight


def test_a_durable_jobs_result_is_how_its_execution_ended_not_its_start(durables: Durables) -> None:
    """The worker completes a durable job's key record once it has started the execution: a service reading the
    result (JobPublisher.result) gets the execution's own end, succeeded or dead with its error."""
    from sqs_jobs.publisher import JobPublisher
    from sqs_jobs.results import JobState

    harness = durables.harness
    service = JobPublisher.from_stack(
        harness.clients("ssm"),
        harness.clients("sqs"),
        stack_name=harness.deployment.stack_name,
        results_client=harness.clients("dynamodb"),
    )
    durables.put_csv("imp-r1", rows=10)
    durables.publish("imp-r1")
    durables.wait(durables.only_execution().durable_execution_arn)
    assert service.result(JOB, "imp-r1").state is JobState.SUCCEEDED

    durables.put_csv("imp-r2", rows=10, bad_row=5)
    durables.publish("imp-r2")
    durables.wait(durables.functions.executions(JOB)[-1].durable_execution_arn)
    dead = service.result(JOB, "imp-r2")
    assert (dead.state, dead.error_type, dead.done) == (JobState.DEAD, "ImportFileError", True)
