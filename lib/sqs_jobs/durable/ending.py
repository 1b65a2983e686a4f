"""How a durable execution ends: its outcome, decided once, and what follows it, each part idempotent.

The runtime's own steps (sqs_jobs.durable.runtime) and the sweep of executions that ended without them
(sqs_jobs.durable.sweep) share this:
- `Outcome`: succeeded (with the follow-ups the job named) or failed (with its evidence). The runtime checkpoints it
  in its step `jobs.outcome` before anything follows, so every replay, retry and sweep acts on the same outcome and
  the same evidence, whatever a replay of the job's code would say.
- `DurableEnding`: the dead letter (`dead_letter`: sent once, its message ID checkpointed), and the end
  (`end_failed`, `end_succeeded`): the durable record's end, the batch members counted, the follow-ups published.
  Each may be run again (a retried step, a sweep): a record's end is written once (sqs_jobs.durable.record), a
  member is counted once (a set holds an index once), a follow-up runs once (its own key).
- `until_done`: the retry strategy of the runtime's end steps: no attempt cap, a capped exponential backoff with
  full jitter, so what follows an outcome is never dropped before the execution's own timeout; every failed attempt
  counts a RuntimeFault (the runtime-faults alarm).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_durable_execution_sdk_python.config import Duration
from aws_durable_execution_sdk_python.retries import RetryDecision

from sqs_jobs.envelope import Envelope, parse_envelope
from sqs_jobs.worker.backoff import backoff_delay_s
from sqs_jobs.worker.errors import DurableStepFailedError, EnvelopeError
from sqs_jobs.worker.names import (
    BATCH_CALLBACK_PUBLISHED,
    BATCH_MEMBER_ENDED,
    DEAD_LETTERED,
    RUNTIME_FAULT,
    RUNTIME_JOB,
    SUCCEEDED,
)
from sqs_jobs.worker.observability import BatchTally

if TYPE_CHECKING:
    from sqs_jobs.durable.payload import DurableStart
    from sqs_jobs.durable.record import DurableRecords
    from sqs_jobs.worker.batch_members import BatchMembers
    from sqs_jobs.worker.observability import Observability
    from sqs_jobs.worker.settings import WorkerSettings

# The runtime's steps, in a namespace of their own (runtime.py): a replay whose job code no longer matches its
# checkpoints still reaches them.
OUTCOME_STEP = "jobs.outcome"
DEAD_LETTER_STEP = "jobs.dead_letter"
END_STEP = "jobs.end"
# The end steps' backoff: 2 s doubling up to 5 minutes, full jitter; never given up before the execution's timeout.
END_BACKOFF_BASE_S = 2
END_BACKOFF_CAP_S = 300


@dataclass(frozen=True)
class Outcome:
    """What the execution came to, as `jobs.outcome` checkpoints it: `failure` None, it succeeded and `follow_ups`
    (FollowUps.encoded) are to be published; else it failed with that evidence."""

    failure: DurableStepFailedError | None = None
    follow_ups: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.failure is None

    def to_json(self) -> str:
        if self.failure is None:
            return json.dumps({"status": "SUCCEEDED", "follow_ups": self.follow_ups}, separators=(",", ":"))
        failure = self.failure
        evidence = {
            "step": failure.step,
            "error_type": failure.error_type,
            "message": failure.error_message,
            "failure": failure.failure,
            "attempts": failure.attempts,
            "traceback": failure.traceback_text,
        }
        return json.dumps({"status": "FAILED", "failure": evidence}, separators=(",", ":"))

    @classmethod
    def from_json(cls, document: str) -> Outcome:
        data = json.loads(document)
        if data["status"] == "SUCCEEDED":
            return cls(follow_ups=data.get("follow_ups"))
        evidence = data["failure"]
        return cls(
            failure=DurableStepFailedError(
                str(evidence["step"]),
                str(evidence["error_type"]),
                str(evidence["message"]),
                str(evidence["failure"]),
                int(evidence["attempts"]),
                str(evidence["traceback"]),
            )
        )


def until_done(rng: random.Random) -> Callable[[Exception, int], RetryDecision]:
    """The end steps' retry strategy: always again, after min(5 min, 2 s * 2^(attempt-1)) with full jitter."""

    def decide(error: Exception, attempt: int) -> RetryDecision:
        delay_s = max(1, backoff_delay_s(attempt, END_BACKOFF_BASE_S, END_BACKOFF_CAP_S, rng))
        return RetryDecision.retry(Duration.from_seconds(delay_s))

    return decide


class DurableEnding:
    """What follows one durable job's outcomes. `client(service)` gives the client for one call."""

    def __init__(
        self,
        worker: WorkerSettings,
        job: str,
        records: DurableRecords,
        client: Callable[[str], Any],
        observability: Observability,
    ) -> None:
        self._worker = worker
        self._queue = worker.queue
        self._job = job
        self._records = records
        self._client = client
        self._obs = observability

    def dead_letter(self, start: DurableStart, failure: DurableStepFailedError) -> str:
        """The record's body to the queue's DLQ with the failure's evidence, as an ordinary job's dead letter
        (sqs_jobs.worker.deadletter): its message ID. JobDeadLettered is counted."""
        from sqs_jobs.worker.attribute_store import AttributeStore
        from sqs_jobs.worker.deadletter import DeadLetterQueue, Evidence, iso_from_epoch_ms
        from sqs_jobs.worker.provenance import MessageAttributes

        with self._fault("dead_letter", "could not send the durable job's dead letter; its end step is retried"):
            envelope = self._envelope_of(start.body)
            state = self._records.read(start.key)
            now_ms = time.time() * 1000
            evidence = Evidence(
                error_type=failure.error_type,
                error_message=_message(failure),
                traceback=failure.traceback_text,
                failure=failure.failure,
                attempts=failure.attempts,
                first_failed_at=iso_from_epoch_ms((state.started_at or now_ms / 1000) * 1000),
                last_failed_at=iso_from_epoch_ms(now_ms),
                source_queue=start.source_queue,
                envelope=envelope,
            )
            dead_letters = DeadLetterQueue(
                self._client("sqs"),
                self._worker.dlq_url,
                dlq_max_bytes=self._queue.dlq_max_message_bytes,
                queue_max_bytes=self._queue.max_message_bytes,
                attribute_store=AttributeStore(self._client("dynamodb"), self._worker.idempotency_table),
            )
            record: dict[str, Any] = {"messageId": f"{start.key}#g{start.generation}", "attributes": {}}
            if start.message_group:
                record["attributes"] = {"MessageGroupId": start.message_group}
            message_id = dead_letters.send(
                start.body, evidence, record, MessageAttributes(bookkeeping={}, producer=dict(start.attributes))
            )
        self._count(DEAD_LETTERED, failure.failure)
        self._obs.logger.error(
            "durable job failed; dead-lettered with evidence",
            extra={"step": failure.step, "failure": failure.failure, "dead_letter_id": message_id},
        )
        return message_id

    def end_failed(self, start: DurableStart, failure: DurableStepFailedError) -> None:
        """After its dead letter: the record says FAILED and moves to the next generation (so a redrive or a new
        publish starts a new execution), and the batch members of the key are counted dead."""
        with self._fault("durable_end", "could not write the durable job's end; its end step is retried"):
            self._records.ended(
                start.key, start.generation, succeeded=False, error_type=failure.error_type, error=_message(failure)
            )
        self.members_ended(start, succeeded=False)

    def end_succeeded(self, start: DurableStart, follow_ups: str | None) -> None:
        """The follow-ups the job named published, then the record says SUCCEEDED, then the batch members of the
        key are counted succeeded; JobSucceeded is counted."""
        if follow_ups:
            self._publish_follow_ups(follow_ups)
        with self._fault("durable_end", "could not write the durable job's end; its end step is retried"):
            self._records.ended(start.key, start.generation, succeeded=True)
        self.members_ended(start, succeeded=True)
        self._count(SUCCEEDED)

    def _publish_follow_ups(self, kept: str) -> None:
        """Each follow-up has its own key, so a second publish (a retry) runs nothing."""
        from sqs_jobs.worker.batch_members import routed_publisher
        from sqs_jobs.worker.follow_ups import decoded, publish_follow_ups

        tally = BatchTally()
        with self._fault("follow_up_publish", "could not publish the durable job's follow-up jobs"):
            follow_ups = decoded(kept, self._queue.job(self._job).publishes)
            publisher = routed_publisher(self._worker.routes, self._client("sqs"))
            publish_follow_ups(publisher, follow_ups, self._job, tally, self._obs.logger)
        tally.flush(self._obs, self._queue.name)

    def members_ended(self, start: DurableStart, *, succeeded: bool) -> None:
        """Count every batch member whose message named the key: the one that started this execution, and any
        another message brought while it ran (sqs_jobs.worker.durable_start). Read after the record says the
        execution ended, so a member added later sees that end and is counted by its own worker."""
        with self._fault("batch_count", "could not count the durable job's batch members"):
            bodies = sorted({start.body, *self._records.batch_members(start.key)})
        for body in bodies:
            envelope = self._envelope_of(body)
            if envelope is not None and envelope.batch is not None:
                self._member_ended(envelope, succeeded=succeeded)

    def _member_ended(self, envelope: Envelope, *, succeeded: bool) -> None:
        """A count is idempotent (a set holds an index once): a retry or a sweep counts the member once."""
        from sqs_jobs.batches import BatchMemberError

        try:
            with self._fault("batch_count", "could not count the durable job's batch member"):
                members = self._batch_members
                published = members.succeeded(envelope) if succeeded else members.dead_lettered(envelope)
        except BatchMemberError:
            # The message named a batch that does not hold it (forged, or expired): nothing counted anywhere.
            self._obs.logger.warning(
                "durable job's batch does not hold it; not counted",
                extra={"batch": envelope.batch.field if envelope.batch else None},
            )
            return
        tally = BatchTally()
        tally.add(envelope.job, BATCH_MEMBER_ENDED, reason="succeeded" if succeeded else "dead")
        for kind in published:
            tally.add(envelope.job, BATCH_CALLBACK_PUBLISHED, reason=kind)
        tally.flush(self._obs, self._queue.name)

    def _envelope_of(self, body: str) -> Envelope | None:
        """The body's envelope; None for one the queue does not accept (its dead letter says why, with no job)."""
        try:
            return parse_envelope(body, self._queue.accepted_jobs)
        except EnvelopeError:
            return None

    @property
    def _batch_members(self) -> BatchMembers:
        from sqs_jobs.worker.batch_members import BatchMembers, routed_publisher

        worker = self._worker
        return BatchMembers(
            worker.idempotency_table,
            lambda: self._client("dynamodb"),
            lambda: routed_publisher(worker.routes, self._client("sqs")),
            retention_s=self._queue.dlq_retention_s,
        )

    @contextmanager
    def _fault(self, reason: str, message: str) -> Iterator[None]:
        """A part of the end that failed is the runtime's fault (RuntimeFault, under the runtime's pseudo-job):
        counted and logged, then raised, so its step is retried. A batch that does not hold its member is not."""
        from sqs_jobs.batches import BatchMemberError

        try:
            yield
        except BatchMemberError:
            raise
        except Exception:
            self._count(RUNTIME_FAULT, reason, job=RUNTIME_JOB)
            self._obs.logger.exception(message)
            raise

    def _count(self, metric: str, reason: str = "", job: str | None = None) -> None:
        tally = BatchTally()
        tally.add(job or self._job, metric, reason)
        tally.flush(self._obs, self._queue.name)


def _message(failure: DurableStepFailedError) -> str:
    return f"step {failure.step!r}: {failure.error_message}"
