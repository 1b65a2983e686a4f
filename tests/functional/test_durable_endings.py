"""How a durable job's execution ends, on moto and AWS's durable execution testing SDK: every ending leaves a final
durable record and one dead letter with true evidence (or, after a success, its follow-ups and batch counts), and
what follows a success or a dead letter is retried until it holds, whatever fails on the way (docs/workflows.md,
"How a durable execution ends")."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqs_jobs.batches import batch_item_id
from sqs_jobs.cli.dlq import DeadLetterQueue, Filter
from sqs_jobs.local.durable import LocalDurableFunctions
from sqs_jobs.local.heartbeat import heartbeat_body
from sqs_jobs.specs import Catalog
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import RUNTIME_JOB
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.provenance import Provenance
from sqs_jobs.worker.runtime import Worker
from tests.functional.conftest import Harness, attributes_of, envelope, metric_values
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
    """The imports queue's durable job running `run(envelope, context)` instead of the import. `runtime_clients`
    are its durable function's own: a fault injected there touches no worker."""

    durables: Durables
    runtime_clients: ClientFactory

    @property
    def harness(self) -> Harness:
        return self.durables.harness

    def worker(self, starter: Any = None) -> Worker:
        return Worker(
            settings=self.harness.deployment.worker_settings(QUEUE),
            clients=self.harness.worker_clients(QUEUE),
            observability=Observability.create(output=self.harness.output),
            durable_starter=starter or self.durables.functions,
            durable_executions=self.durables.functions,
        )

    def heartbeat(self) -> None:
        """The heartbeat canary through the queue to a worker, whose sweep ends what ended without its end."""
        self.harness.send(heartbeat_body(), queue=QUEUE)
        assert self.harness.deliver(QUEUE, worker=self.worker()) is not None

    def newest(self, import_id: str) -> Any:
        return max(
            (
                e
                for e in self.durables.functions.executions(JOB)
                if e.start_input.input and import_id in e.start_input.input
            ),
            key=lambda e: e.start_input.execution_name,
        )

    def dead_letter_queue(self) -> DeadLetterQueue:
        """jobctl's view of the imports DLQ: what an operator lists, shows and redrives."""
        local = self.harness.deployment.queues[QUEUE]
        runtime = Provenance.of([local.worker_role_id])
        return DeadLetterQueue(self.harness.clients("sqs"), local.dlq_url, local.url, runtime, receive_wait_s=0)

    def publish(self, import_id: str, starter: Any = None) -> None:
        self.harness.send(envelope(JOB, import_id), queue=QUEUE)
        assert self.harness.deliver(QUEUE, worker=self.worker(starter)) is not None

    def ended(self, import_id: str) -> str:
        """How the newest execution of the key ended (Lambda's execution status), once it ended."""
        return str(self.durables.wait(self.newest(import_id).durable_execution_arn).execution_status.value)

    def dead_letters(self) -> list[dict[str, str]]:
        """Each dead letter's evidence, with its body's ID as `id`."""
        return [
            {**attributes_of(message), "id": json.loads(message["Body"])["id"]}
            for message in self.harness.dead_letters(QUEUE)
        ]

    def runtime_faults(self) -> dict[str, int]:
        """RuntimeFault counts, by reason, summed over every metrics document."""
        counts: dict[str, int] = {}
        for doc in self.harness.metrics():
            if doc.get("job") == RUNTIME_JOB and "RuntimeFault" in doc and "reason" in doc:
                counts[doc["reason"]] = counts.get(doc["reason"], 0) + int(sum(metric_values(doc, "RuntimeFault")))
        return counts

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
        harness = Harness.provisioned(clients, catalog)
        session = harness.deployment.worker_session(harness.clients("sts"), QUEUE, "test-imports-durable")
        runtime_clients = ClientFactory(session=session)
        durables = durables_of(harness, catalog, runtime_clients)
        made.append(durables)
        return Run(durables, runtime_clients)

    yield make
    for durables in made:
        durables.functions.close()


def refuse(clients: ClientFactory, event: str, times: int, when: Any = None) -> list[str]:
    """The next `times` calls of `event` on `clients` (those `when(params)` picks) refused as throttled; the list
    of the refusals made."""
    refused: list[str] = []

    def throttle(params: Any = None, **_: Any) -> None:
        if len(refused) < times and (when is None or when(params)):
            refused.append(event)
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "injected"}}, event)

    clients.register(event, throttle)
    return refused


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
    assert run.ended("imp-s1") == "SUCCEEDED"
    assert run.durables.record("imp-s1").status == "SUCCEEDED"
    # A batch member of that key is then counted at once, as a duplicate of a key that succeeded: its batch completes.
    batch_id = run.harness.stack_publisher().batch([(JOB, "imp-s1")], on_complete=("import_report", "b-s1"))
    assert run.harness.deliver(QUEUE, worker=run.worker()) is not None
    assert run.batch_counts(batch_id) == {"succeeded": ["0"]}
    assert len(run.durables.functions.executions(JOB)) == 1


@pytest.mark.slow
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
    assert run.ended("imp-s2") == "SUCCEEDED"
    assert woke.wait(10)
    record = run.durables.record("imp-s2")
    assert (record.status, record.generation) == ("SUCCEEDED", 0)


def test_code_outside_steps_that_changes_between_replays_ends_in_one_dead_letter_and_a_new_publish_runs_it(
    durable_run: Any,
) -> None:
    runs: list[int] = []

    def run_job(envelope: Any, context: Any) -> None:
        runs.append(1)
        # A name made outside steps from something that changes between replays (a clock, a counter): the replay
        # after the wait no longer matches the first step's checkpoint.
        context.step(f"fetch-{len(runs)}", lambda: 1)
        context.wait(1)
        context.step("after", lambda: 2)

    run = durable_run(run_job)
    run.publish("imp-n1")
    assert run.ended("imp-n1") == "FAILED"
    [dead_letter] = run.dead_letters()
    assert (dead_letter["jobs.error_type"], dead_letter["jobs.failure"], dead_letter["jobs.attempts"]) == (
        "NonDeterministicExecutionError",
        "permanent",
        "1",
    )
    assert "step '(replay)'" in dead_letter["jobs.error_message"]
    record = run.durables.record("imp-n1")
    assert (record.status, record.generation) == ("FAILED", 1)
    # Published again (or redriven): the key's next generation runs.
    run.publish("imp-n1")
    assert run.ended("imp-n1") == "FAILED"
    names = sorted(e.start_input.execution_name[-3:] for e in run.durables.functions.executions(JOB))
    assert names == ["-g0", "-g1"]


def test_a_step_inside_a_step_is_refused_at_once_for_good_even_when_caught(durable_run: Any) -> None:
    inner_runs: list[str] = []

    def inner() -> int:
        inner_runs.append("inner")
        return 1

    def nested(context: Any) -> int:
        try:
            return int(context.step("inner", inner))
        except Exception:  # the job's code catches the refusal: the step fails all the same
            return 0

    def run_job(envelope: Any, context: Any) -> None:
        context.step("outer", lambda: nested(context))
        context.wait(1)
        context.step("after", lambda: 2)

    run = durable_run(run_job)
    run.publish("imp-n2")
    assert run.ended("imp-n2") == "FAILED"
    assert inner_runs == []
    [dead_letter] = run.dead_letters()
    assert (dead_letter["jobs.error_type"], dead_letter["jobs.failure"], dead_letter["jobs.attempts"]) == (
        "DurableMisuseError",
        "permanent",
        "1",
    )
    assert "context.step('inner') inside step 'outer'" in dead_letter["jobs.error_message"]
    assert run.durables.record("imp-n2").generation == 1


@pytest.mark.parametrize(
    ("call", "refused"),
    [
        (lambda context: context.wait(1), "context.wait inside step 'outer'"),
        (lambda context: context.then("import_report", "r1"), "context.then inside step 'outer'"),
    ],
    ids=["wait", "then"],
)
def test_a_wait_or_a_follow_up_inside_a_step_is_refused_for_good_even_when_caught(
    durable_run: Any, call: Any, refused: str
) -> None:
    def caught(context: Any) -> int:
        try:
            call(context)
        except Exception:
            return 0
        return 1

    run = durable_run(lambda envelope, context: context.step("outer", lambda: caught(context)))
    run.publish("imp-n3")
    assert run.ended("imp-n3") == "FAILED"
    [dead_letter] = run.dead_letters()
    assert (dead_letter["jobs.error_type"], dead_letter["jobs.attempts"]) == ("DurableMisuseError", "1")
    assert refused in dead_letter["jobs.error_message"]
    assert run.harness.queue_counts(QUEUE) == (0, 0)  # no follow-up published


def test_a_step_name_taken_twice_is_refused_for_good(durable_run: Any) -> None:
    runs: list[int] = []

    def run_job(envelope: Any, context: Any) -> None:
        for _ in range(2):
            context.step("same", lambda: runs.append(1))

    run = durable_run(run_job)
    run.publish("imp-n4")
    assert run.ended("imp-n4") == "FAILED"
    assert runs == [1]  # the second was refused before it ran
    [dead_letter] = run.dead_letters()
    assert (dead_letter["jobs.error_type"], dead_letter["jobs.failure"]) == ("DurableMisuseError", "permanent")
    assert dead_letter["jobs.error_message"].startswith("step '(outside steps)': step name 'same' is taken twice")


def test_a_follow_up_whose_publish_is_throttled_for_long_is_published_once_it_can(durable_run: Any) -> None:
    def run_job(envelope: Any, context: Any) -> dict[str, int]:
        context.then("import_report", f"after-{envelope.id}")
        return {"done": context.step("only", lambda: 1)}

    run = durable_run(run_job)
    refused = refuse(run.runtime_clients, "before-call.sqs.SendMessageBatch", times=8)
    run.publish("imp-f1")
    assert run.ended("imp-f1") == "SUCCEEDED"
    assert len(refused) == 8
    assert run.harness.queue_counts(QUEUE) == (1, 0)
    assert json.loads(run.harness.peek(QUEUE)["Body"]) == {"job": "import_report", "id": "after-imp-f1"}
    assert run.durables.record("imp-f1").status == "SUCCEEDED"
    assert run.runtime_faults() == {"follow_up_publish": 8}


def test_a_failed_record_write_after_the_dead_letter_sends_no_second_one(durable_run: Any) -> None:
    from functions.jobs.import_orders import ImportFileError

    def run_job(envelope: Any, context: Any) -> None:
        context.step("breaks", lambda: (_ for _ in ()).throw(ImportFileError("row 3 is not a number")))

    def failure_end(params: Any) -> bool:
        return ":next" in (params or {}).get("ExpressionAttributeValues", {})

    run = durable_run(run_job)
    refused = refuse(run.runtime_clients, "provide-client-params.dynamodb.UpdateItem", times=3, when=failure_end)
    run.publish("imp-d1")
    assert run.ended("imp-d1") == "FAILED"
    assert len(refused) == 3
    [dead_letter] = run.dead_letters()
    assert (dead_letter["jobs.error_type"], dead_letter["jobs.failure"], dead_letter["jobs.attempts"]) == (
        "ImportFileError",
        "permanent",
        "1",
    )
    assert dead_letter["jobs.error_message"] == "step 'breaks': row 3 is not a number"
    record = run.durables.record("imp-d1")
    assert (record.status, record.generation, record.last_error_type) == ("FAILED", 1, "ImportFileError")
    assert run.runtime_faults() == {"durable_end": 3}


@pytest.mark.slow
def test_a_timed_out_execution_is_dead_lettered_by_the_next_heartbeat_and_runs_again_when_published(
    durable_run: Any,
) -> None:
    release = threading.Event()

    def run_job(envelope: Any, context: Any) -> int:
        context.step("plan", lambda: 1)
        return int(context.step("slow", lambda: release.wait(30) and 2))  # past the 2 s execution timeout

    run = durable_run(run_job, with_durable(IMPORTS, execution_timeout_s=2))
    run.publish("imp-t1")
    assert run.ended("imp-t1") == "TIMED_OUT"
    assert run.durables.record("imp-t1").status == "RUNNING"  # Lambda stopped it: no code of ours ran
    run.heartbeat()
    release.set()

    [letter] = run.dead_letter_queue().peek()
    assert (letter.error_type, letter.evidence["jobs.failure"], letter.evidence["jobs.attempts"]) == (
        "DurableExecutionTimedOut",
        "timed_out",
        "1",
    )
    assert letter.error_message.startswith("step 'slow': the execution ran past its 2s execution timeout")
    record = run.durables.record("imp-t1")
    assert (record.status, record.generation, record.last_error_type) == ("FAILED", 1, "DurableExecutionTimedOut")
    # The next heartbeat looks at it again (it ended within the sweep's slack) and finds nothing more to end.
    run.heartbeat()
    assert run.harness.queue_counts(QUEUE, dead_letter=True) == (1, 0)
    swept = [line for line in run.harness.log_lines() if "ended by the sweep" in str(line.get("message"))]
    assert [(line["execution_status"], line["failure"]) for line in swept] == [("TIMED_OUT", "timed_out")]
    # Published again, the key's next generation runs.
    run.publish("imp-t1")
    assert run.newest("imp-t1").start_input.execution_name.endswith("-g1")
    assert run.ended("imp-t1") == "SUCCEEDED"
    assert run.durables.record("imp-t1").status == "SUCCEEDED"


@pytest.mark.slow
def test_a_worker_with_a_short_timeout_still_sweeps(durable_run: Any) -> None:
    # Given a queue whose worker's whole invocation is 8 s (under the sweep's usual 10 s margin), and an execution
    # that timed out
    release = threading.Event()

    def run_job(envelope: Any, context: Any) -> int:
        return int(context.step("slow", lambda: release.wait(30) and 2))

    short = with_durable(IMPORTS, execution_timeout_s=2)
    short = replace(short, queues=(replace(short.queue(QUEUE), function_timeout_s=8),))
    run = durable_run(run_job, short)
    run.publish("imp-s1")
    assert run.ended("imp-s1") == "TIMED_OUT"

    # When the heartbeat comes
    run.heartbeat()
    release.set()

    # Then its sweep ended it: one dead letter, the record FAILED
    [letter] = run.dead_letter_queue().peek()
    assert letter.error_type == "DurableExecutionTimedOut"
    assert run.durables.record("imp-s1").status == "FAILED"


def test_a_stopped_batch_member_is_dead_lettered_counted_dead_and_runs_again_when_redriven(durable_run: Any) -> None:
    release = threading.Event()
    stuck = threading.Event()

    def slow() -> int:
        stuck.set()
        release.wait(30)
        return 2

    def run_job(envelope: Any, context: Any) -> int:
        context.step("plan", lambda: 1)
        return int(context.step("slow", slow))

    run = durable_run(run_job)
    batch_id = run.harness.stack_publisher().batch([(JOB, "imp-p1")], on_complete=("import_report", "b-p1"))
    assert run.harness.deliver(QUEUE, worker=run.worker()) is not None
    assert stuck.wait(30)
    run.durables.functions.stop(JOB, run.newest("imp-p1").durable_execution_arn)
    assert run.ended("imp-p1") == "STOPPED"
    run.heartbeat()
    release.set()

    dlq = run.dead_letter_queue()
    [letter] = dlq.peek()
    assert (letter.error_type, letter.evidence["jobs.failure"]) == ("DurableExecutionStopped", "stopped")
    assert "stopped by an operator" in letter.error_message
    assert (run.durables.record("imp-p1").status, run.durables.record("imp-p1").generation) == ("FAILED", 1)
    # Its batch completed: the member counted dead, the callback published.
    assert run.batch_counts(batch_id) == {"dead": ["0"]}
    assert run.harness.queue_counts(QUEUE) == (1, 0)
    assert json.loads(run.harness.peek(QUEUE)["Body"])["job"] == "import_report"
    # Redriven: the key's next generation runs.
    assert dlq.move(Filter()).moved == 1
    run.harness.deliver(QUEUE, worker=run.worker())  # the callback and the redriven member
    run.harness.deliver(QUEUE, worker=run.worker())
    assert run.newest("imp-p1").start_input.execution_name.endswith("-g1")
    assert run.ended("imp-p1") == "SUCCEEDED"


@pytest.mark.slow
def test_a_success_whose_follow_up_could_not_be_published_before_its_timeout_is_finished_by_the_sweep(
    durable_run: Any,
) -> None:
    def run_job(envelope: Any, context: Any) -> dict[str, int]:
        context.then("import_report", f"after-{envelope.id}")
        return {"done": context.step("only", lambda: 1)}

    run = durable_run(run_job, with_durable(IMPORTS, execution_timeout_s=3))
    refused = refuse(run.runtime_clients, "before-call.sqs.SendMessageBatch", times=10**6)  # its SQS never answers
    run.publish("imp-f2")
    assert run.ended("imp-f2") == "TIMED_OUT"
    assert refused and run.durables.record("imp-f2").status != "SUCCEEDED"
    run.heartbeat()
    # Its success stands: the follow-up published once, the record SUCCEEDED, no dead letter.
    assert run.harness.queue_counts(QUEUE) == (1, 0)
    assert json.loads(run.harness.peek(QUEUE)["Body"]) == {"job": "import_report", "id": "after-imp-f2"}
    assert run.durables.record("imp-f2").status == "SUCCEEDED"
    assert run.harness.queue_counts(QUEUE, dead_letter=True) == (0, 0)


@pytest.mark.slow
def test_a_failure_whose_record_could_not_be_written_before_its_timeout_gets_no_second_dead_letter(
    durable_run: Any,
) -> None:
    from functions.jobs.import_orders import ImportFileError

    def run_job(envelope: Any, context: Any) -> None:
        context.step("breaks", lambda: (_ for _ in ()).throw(ImportFileError("row 3 is not a number")))

    def failure_end(params: Any) -> bool:
        return ":next" in (params or {}).get("ExpressionAttributeValues", {})

    run = durable_run(run_job, with_durable(IMPORTS, execution_timeout_s=3))
    refuse(run.runtime_clients, "provide-client-params.dynamodb.UpdateItem", times=10**6, when=failure_end)
    run.publish("imp-d2")
    assert run.ended("imp-d2") == "TIMED_OUT"
    assert run.harness.queue_counts(QUEUE, dead_letter=True) == (1, 0)  # sent by its jobs.dead_letter
    run.heartbeat()
    # The sweep ended it from its history: no second dead letter, the job's own evidence kept.
    [letter] = run.dead_letter_queue().peek()
    assert (letter.error_type, letter.evidence["jobs.attempts"]) == ("ImportFileError", "1")
    record = run.durables.record("imp-d2")
    assert (record.status, record.generation) == ("FAILED", 1)


def test_two_sweeps_never_both_claim_an_execution(durable_run: Any) -> None:
    from sqs_jobs.durable.record import ClaimedError, DurableRecords, StaleGenerationError

    run = durable_run(lambda envelope, context: None)
    records = DurableRecords(lambda: run.harness.clients("dynamodb"), run.harness.deployment.idempotency_table, 3600)
    records.started(f"{JOB}:imp-c1", JOB, 0, "name", None)
    records.claim(f"{JOB}:imp-c1", 0, until=time.time() + 60)
    with pytest.raises(ClaimedError):
        records.claim(f"{JOB}:imp-c1", 0, until=time.time() + 60)
    records.ended(f"{JOB}:imp-c1", 0, succeeded=False, error_type="DurableExecutionStopped", error="stopped")
    with pytest.raises(StaleGenerationError):
        records.claim(f"{JOB}:imp-c1", 0, until=time.time() + 60)
    # A claim that lapsed (its sweep died) may be taken again.
    records.claim(f"{JOB}:imp-c1", 1, until=time.time() - 1)
    records.claim(f"{JOB}:imp-c1", 1, until=time.time() + 60)


def test_a_queue_without_durable_jobs_makes_no_call_for_them_on_its_heartbeat(clients: ClientFactory) -> None:
    from functions.catalog import CATALOG
    from tests.functional.conftest import narrowed

    harness = Harness.provisioned(clients, narrowed(CATALOG, "orders"))
    calls: list[str] = []
    harness.worker_clients("orders").register("before-call", lambda model, **_: calls.append(model.name))
    harness.send(heartbeat_body())
    assert harness.deliver() is not None
    assert calls == ["Query"] * len(calls) and calls  # the stalled batches' count, and nothing else


@pytest.mark.slow
def test_an_outcome_the_history_truncated_is_never_guessed_at(durable_run: Any) -> None:
    from dataclasses import replace as replaced

    from sqs_jobs.durable.executions import RuntimeSteps

    def run_job(envelope: Any, context: Any) -> dict[str, int]:
        context.then("import_report", f"after-{envelope.id}")
        return {"done": context.step("only", lambda: 1)}

    run = durable_run(run_job, with_durable(IMPORTS, execution_timeout_s=3))
    refuse(run.runtime_clients, "before-call.sqs.SendMessageBatch", times=10**6)
    run.publish("imp-u1")
    assert run.ended("imp-u1") == "TIMED_OUT"

    class Truncating:
        """The runner's answers, but its jobs.outcome's result truncated, as Lambda's history may show it (the
        runner always includes the whole result)."""

        def __init__(self, functions: LocalDurableFunctions) -> None:
            self._functions = functions

        def ended(self, job: str, started_after: Any) -> Any:
            return self._functions.ended(job, started_after)

        def end_of(self, job: str, arn: str) -> Any:
            return self._functions.end_of(job, arn)

        def runtime_steps(self, job: str, arn: str) -> RuntimeSteps:
            steps = self._functions.runtime_steps(job, arn)
            assert steps.outcome is not None
            return replaced(steps, outcome=None, outcome_unreadable=True)

    worker = Worker(
        settings=run.harness.deployment.worker_settings(QUEUE),
        clients=run.harness.worker_clients(QUEUE),
        observability=Observability.create(output=run.harness.output),
        durable_starter=run.durables.functions,
        durable_executions=Truncating(run.durables.functions),
    )
    run.harness.send(heartbeat_body(), queue=QUEUE)
    assert run.harness.deliver(QUEUE, worker=worker) is not None

    # Neither a dead letter nor a success it can't vouch for: the runtime-faults alarm pages instead.
    assert run.harness.queue_counts(QUEUE, dead_letter=True) == (0, 0)
    assert run.harness.queue_counts(QUEUE) == (0, 0)
    assert run.durables.record("imp-u1").status == "RUNNING"
    assert run.runtime_faults().get("durable_sweep") == 1
    # It never can be ended: it does not hold the next sweeps back (the last sweep's time moved on).
    swept = run.harness.clients("dynamodb").get_item(
        TableName=run.harness.deployment.idempotency_table, Key={"id": {"S": f"durable-sweep#{JOB}"}}
    )
    assert "swept_at" in swept["Item"]


def test_a_body_the_queue_no_longer_accepts_ends_in_one_dead_letter(durable_run: Any) -> None:
    from sqs_jobs.durable import execution_name
    from sqs_jobs.durable.payload import DurableStart

    run = durable_run(lambda envelope, context: None)
    key = f"{JOB}:imp-e1"
    body = json.dumps({"job": "retired_job", "id": "imp-e1"})  # a deploy since its start removed the job
    start = DurableStart(body=body, key=key, generation=0, source_queue="arn:aws:sqs:us-east-1:1:imports")
    assert run.durables.functions.start(JOB, execution_name(key, 0), start.to_json()) is not None
    assert run.ended("imp-e1") == "FAILED"
    [dead_letter] = run.harness.dead_letters(QUEUE)
    assert dead_letter["Body"] == body
    assert attributes_of(dead_letter)["jobs.error_message"].startswith("step '(envelope)': ")
    assert (run.durables.record("imp-e1").status, run.durables.record("imp-e1").generation) == ("FAILED", 1)


def test_an_execution_the_sdk_failed_before_its_end_is_dead_lettered_by_the_next_heartbeat(durable_run: Any) -> None:
    from aws_durable_execution_sdk_python.exceptions import ExecutionError

    def run_job(envelope: Any, context: Any) -> None:
        context.step("plan", lambda: 1)
        raise ExecutionError("the SDK gave up on this execution")  # as the SDK's own fatal errors do

    run = durable_run(run_job)
    run.publish("imp-x1")
    assert run.ended("imp-x1") == "FAILED"
    assert run.harness.queue_counts(QUEUE, dead_letter=True) == (0, 0)  # no end step of its own ran
    run.heartbeat()
    [letter] = run.dead_letter_queue().peek()
    assert (letter.error_type, letter.evidence["jobs.failure"]) == ("ExecutionError", "permanent")
    assert "the execution failed before its end step: the SDK gave up on this execution" in letter.error_message
    assert (run.durables.record("imp-x1").status, run.durables.record("imp-x1").generation) == ("FAILED", 1)


def test_a_copy_of_a_message_whose_execution_ended_starts_no_second_life_and_a_redrive_does(durable_run: Any) -> None:
    from functions.jobs.import_orders import ImportFileError
    from sqs_jobs.local.chaos import Chaos, ChaosSettings

    def run_job(envelope: Any, context: Any) -> None:
        context.step("breaks", lambda: (_ for _ in ()).throw(ImportFileError("row 3 is not a number")))

    run = durable_run(run_job)
    batch_id = run.harness.stack_publisher().batch([(JOB, "imp-l1")], on_complete=("import_report", "b-l1"))
    # The environment starts the execution and dies before its answer: the message is not acknowledged.
    mapping = run.harness.mapping(QUEUE, chaos=Chaos(ChaosSettings(crash=1.0)))
    invocation = mapping.poll_once(run.worker().handle, timeout_s=4)
    assert invocation is not None and not invocation.deleted
    assert run.ended("imp-l1") == "FAILED"
    run.harness.expire_visibility(invocation, QUEUE)
    assert run.harness.deliver(QUEUE, worker=run.worker()) is not None
    # Its copy is acknowledged: its life ended in its one dead letter, its member counted dead (and not again).
    assert run.batch_counts(batch_id) == {"dead": ["0"]}
    run.harness.deliver(QUEUE, worker=run.worker())  # the completion callback, if the copy's poll left it
    assert len(run.durables.functions.executions(JOB)) == 1
    assert run.harness.queue_counts(QUEUE, dead_letter=True) == (1, 0)
    # A redrive of that dead letter starts the next generation.
    assert run.dead_letter_queue().move(Filter()).moved == 1
    assert run.harness.deliver(QUEUE, worker=run.worker()) is not None
    assert run.newest("imp-l1").start_input.execution_name.endswith("-g1")
    assert run.ended("imp-l1") == "FAILED"
    assert run.durables.record("imp-l1").generation == 2
    assert run.batch_counts(batch_id) == {"dead": ["0"]}
