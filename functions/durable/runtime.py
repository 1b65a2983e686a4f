"""The durable function's runtime: one durable execution of one durable job, from start to its end.

1. The payload (functions/durable/payload.py) gives the record's body, key and generation; the envelope is parsed
   as the worker parses it.
2. The job's `run(envelope, context)` runs with a DurableJobContext (functions/durable/context.py): its steps are
   checkpointed, classified, retried with backoff and cut at their time limit.
3. It ends in the runtime's own last step (`jobs.end`), so its effects happen once whatever replays follow:
   - success: the key's durable record says SUCCEEDED, and JobSucceeded is counted;
   - failure (a step failed for good, or the job's code raised outside a step): the record's body goes to the
     queue's DLQ with the evidence an ordinary job's dead letter carries (functions/worker/deadletter.py), so
     `jobctl dlq show` and `redrive` work on it; the record says FAILED and moves to the next generation, so the
     redriven message starts a new execution; JobDeadLettered is counted. Then the error is raised again, and
     Lambda ends the execution FAILED (its DurableExecutionFailed metric, which the stack alarms on).
An execution that times out (its ExecutionTimeout) is stopped by Lambda: no code of ours runs then, so it leaves
no dead letter; the DurableExecutionTimedOut alarm and `jobctl job show` (a stale heartbeat) say so.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aws_durable_execution_sdk_python.config import StepConfig
from aws_durable_execution_sdk_python.retries import RetryDecision, RetryStrategyConfig, create_retry_strategy

from functions.durable.context import DurableJobContext
from functions.durable.payload import DurableStart
from functions.durable.record import DurableRecords
from functions.worker.clients import ClientFactory
from functions.worker.errors import DurableStepFailedError, WorkerConfigError
from functions.worker.follow_ups import FollowUps
from functions.worker.jobs import LoadedJob, load_jobs
from functions.worker.names import (
    BATCH_CALLBACK_PUBLISHED,
    BATCH_MEMBER_ENDED,
    DEAD_LETTERED,
    RUNTIME_FAULT,
    RUNTIME_JOB,
    SUCCEEDED,
    DeadLetterFailure,
)
from functions.worker.observability import BatchTally, Observability
from functions.worker.provenance import MessageAttributes
from functions.worker.settings import ENV_DURABLE_JOB, WorkerSettings
from sqs_jobs.envelope import Envelope, parse_envelope

if TYPE_CHECKING:
    from aws_durable_execution_sdk_python.context import DurableContext

    from functions.worker.batch_members import BatchMembers
    from functions.worker.secrets import SecretCache

END_STEP = "jobs.end"
# The end step's own calls (DLQ send, record write) are the runtime's: a few quick retries, then the execution
# fails without its dead letter, and the runtime-faults alarm says so.
_END_RETRIES = RetryStrategyConfig(max_attempts=5)


@dataclass(frozen=True)
class DurableSettings:
    worker: WorkerSettings
    job: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> DurableSettings:
        worker = WorkerSettings.from_environ(environ, with_durable_functions=False)
        job = environ.get(ENV_DURABLE_JOB, "").strip()
        spec = {spec.name: spec for spec in worker.queue.jobs}.get(job)
        if spec is None or spec.durable is None:
            durable = [spec.name for spec in worker.queue.jobs if spec.durable is not None]
            raise WorkerConfigError(
                f"{ENV_DURABLE_JOB} {job!r} is not a durable job of queue {worker.queue.name!r} (its durable jobs: "
                f"{', '.join(durable) or 'none'})"
            )
        return cls(worker=worker, job=job)

    def to_environ(self) -> dict[str, str]:
        return {**self.worker.to_environ(), ENV_DURABLE_JOB: self.job}


class DurableRuntime:
    """Runs the executions of one durable job. Build one per execution environment."""

    def __init__(
        self,
        settings: DurableSettings,
        clients: ClientFactory,
        observability: Observability | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._queue = settings.worker.queue
        self._clients = clients
        self._obs = observability or Observability.create()
        self._rng = rng or random.Random()
        self._job: LoadedJob = load_jobs(_only(self._queue, settings.job))[settings.job]
        self._records = DurableRecords(
            lambda: clients("dynamodb"), settings.worker.idempotency_table, self._queue.idempotency_expiry_s
        )

    @property
    def records(self) -> DurableRecords:
        return self._records

    @cached_property
    def _secrets(self) -> SecretCache:
        """The function's secret values, kept across its executions as the worker keeps its own."""
        from functions.worker.secrets import SecretCache

        return SecretCache(self._clients)

    def run(self, event: Any, sdk: DurableContext) -> Any:
        start = DurableStart.from_json(event)
        envelope = parse_envelope(start.body, self._queue.accepted_jobs)
        self._obs.logger.append_keys(job=envelope.job, id=envelope.id, idempotency_key=start.key)
        context = DurableJobContext(
            sdk,
            envelope=envelope,
            key=start.key,
            generation=start.generation,
            job=self._job,
            queue=self._queue,
            records=self._records,
            resources=self.settings.worker.resources,
            clients=self._clients,
            logger=self._obs.logger,
            observability=self._obs,
            secrets=self._secrets,
            follow_ups=FollowUps(envelope.job, self._job.spec.publishes),
            rng=self._rng,
        )
        self._records.first_start(start.key, start.generation, time.time())
        try:
            result = self._job.run(envelope, context)  # type: ignore[arg-type]
        except Exception as error:
            failure = context.failure if isinstance(error, DurableStepFailedError) else None
            if failure is None:
                failure = _outside_steps(error)
            sdk.step(lambda _: self._end_failed(start, failure), name=END_STEP, config=_end_config())
            raise
        follow_ups = context.follow_ups.envelopes() if context.follow_ups is not None else []
        sdk.step(lambda _: self._end_succeeded(start, follow_ups), name=END_STEP, config=_end_config())
        return result

    def _end_succeeded(self, start: DurableStart, follow_ups: list[Envelope]) -> None:
        if follow_ups:
            self._publish_follow_ups(follow_ups)
        self._records.ended(start.key, start.generation, succeeded=True)
        self._count(SUCCEEDED)
        self._members_ended(start, succeeded=True)

    def _publish_follow_ups(self, follow_ups: list[Envelope]) -> None:
        """What the job named with `context.then`, published in the end step before the record says it ended: a
        publish that fails fails the step, which is retried (each follow-up has its own key, so a second publish
        runs nothing), and the runtime-faults alarm says so."""
        from functions.worker.batch_members import routed_publisher
        from functions.worker.follow_ups import publish_follow_ups

        tally = BatchTally()
        try:
            publisher = routed_publisher(self.settings.worker.routes, self._clients("sqs"))
            publish_follow_ups(publisher, follow_ups, self.settings.job, tally, self._obs.logger)
        except Exception:
            self._count(RUNTIME_FAULT, "follow_up_publish", job=RUNTIME_JOB)
            self._obs.logger.exception("could not publish the durable job's follow-up jobs")
            raise
        tally.flush(self._obs, self._queue.name)

    def _members_ended(self, start: DurableStart, *, succeeded: bool) -> None:
        """Count every batch member whose message named the key: the one that started this execution, and any
        another message brought while it ran (functions/worker/durable_start.py). Read after the record says the
        execution ended, so a member added later sees that end and is counted by its own worker."""
        for body in sorted({start.body, *self._records.batch_members(start.key)}):
            envelope = parse_envelope(body, self._queue.accepted_jobs)
            if envelope.batch is not None:
                self._member_ended(envelope, succeeded=succeeded)

    def _member_ended(self, envelope: Envelope, *, succeeded: bool) -> None:
        """A durable job that is a batch member is counted when its execution ends, in this end step: a count is
        idempotent (a set holds an index once), so the step's retries and replays count it once. A count that
        still fails after the step's retries fails the execution (after success) and the runtime-faults alarm
        says so; after a dead letter the member stays open in its batch, as a worker's would."""
        from sqs_jobs.batches import BatchMemberError

        try:
            published = (
                self._batch_members.succeeded(envelope) if succeeded else self._batch_members.dead_lettered(envelope)
            )
        except BatchMemberError:
            # The message named a batch that does not hold it (forged, or expired): nothing counted anywhere.
            self._obs.logger.warning(
                "durable job's batch does not hold it; not counted",
                extra={"batch": envelope.batch.field if envelope.batch else None},
            )
            return
        except Exception:
            self._count(RUNTIME_FAULT, "batch_count", job=RUNTIME_JOB)
            self._obs.logger.exception("could not count the durable job's batch member")
            if succeeded:
                raise
            return
        tally = BatchTally()
        tally.add(envelope.job, BATCH_MEMBER_ENDED, reason="succeeded" if succeeded else "dead")
        for kind in published:
            tally.add(envelope.job, BATCH_CALLBACK_PUBLISHED, reason=kind)
        tally.flush(self._obs, self._queue.name)

    @cached_property
    def _batch_members(self) -> BatchMembers:
        from functions.worker.batch_members import BatchMembers, routed_publisher

        worker = self.settings.worker
        return BatchMembers(
            worker.idempotency_table,
            lambda: self._clients("dynamodb"),
            lambda: routed_publisher(worker.routes, self._clients("sqs")),
            retention_s=self._queue.dlq_retention_s,
        )

    def _end_failed(self, start: DurableStart, failure: DurableStepFailedError) -> str:
        from functions.worker.attribute_store import AttributeStore
        from functions.worker.deadletter import DeadLetterQueue, Evidence, iso_from_epoch_ms

        envelope = parse_envelope(start.body, self._queue.accepted_jobs)
        state = self._records.read(start.key)
        now_ms = time.time() * 1000
        evidence = Evidence(
            error_type=failure.error_type,
            error_message=f"step {failure.step!r}: {failure.error_message}",
            traceback=failure.traceback_text,
            failure=failure.failure,
            attempts=failure.attempts,
            first_failed_at=iso_from_epoch_ms((state.started_at or now_ms / 1000) * 1000),
            last_failed_at=iso_from_epoch_ms(now_ms),
            source_queue=start.source_queue,
            envelope=envelope,
        )
        dead_letters = DeadLetterQueue(
            self._clients("sqs"),
            self.settings.worker.dlq_url,
            dlq_max_bytes=self._queue.dlq_max_message_bytes,
            queue_max_bytes=self._queue.max_message_bytes,
            attribute_store=AttributeStore(self._clients("dynamodb"), self.settings.worker.idempotency_table),
        )
        record = {"messageId": f"{start.key}#g{start.generation}", "attributes": {}}
        if start.message_group:
            record["attributes"] = {"MessageGroupId": start.message_group}
        message_id = dead_letters.send(
            start.body, evidence, record, MessageAttributes(bookkeeping={}, producer=dict(start.attributes))
        )
        self._records.ended(
            start.key, start.generation, succeeded=False, error_type=failure.error_type, error=evidence.error_message
        )
        self._count(DEAD_LETTERED, failure.failure)
        self._members_ended(start, succeeded=False)
        self._obs.logger.error(
            "durable job failed; dead-lettered with evidence",
            extra={"step": failure.step, "failure": failure.failure, "dead_letter_id": message_id},
        )
        return message_id

    def _count(self, metric: str, reason: str = "", job: str | None = None) -> None:
        tally = BatchTally()
        tally.add(job or self.settings.job, metric, reason)
        tally.flush(self._obs, self._queue.name)


def _end_config() -> StepConfig:
    strategy = create_retry_strategy(_END_RETRIES)

    def decide(error: Exception, attempt: int) -> RetryDecision:
        return strategy(error, attempt)

    return StepConfig(retry_strategy=decide)


def _outside_steps(error: Exception) -> DurableStepFailedError:
    """The job's code raised outside any step: its orchestration code, which a replay runs again the same way, so a
    retry would fail alike: permanent."""
    import traceback

    return DurableStepFailedError(
        "(outside steps)",
        type(error).__name__,
        str(error),
        DeadLetterFailure.PERMANENT,
        1,
        "".join(traceback.format_exception(error)),
    )


def _only(queue: Any, job: str) -> Any:
    """The queue with only `job`, so loading imports that job's module alone."""
    from dataclasses import replace

    return replace(queue, jobs=tuple(spec for spec in queue.jobs if spec.name == job))
