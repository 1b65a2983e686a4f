"""The sweep: ends the durable executions that ended without their own end steps.

An execution ends through the runtime's steps (sqs_jobs.durable.runtime), except where no code of ours runs or
the SDK takes no further step: Lambda stops it at its execution timeout (TIMED_OUT), an operator stops it
(StopDurableExecution: STOPPED), or it fails before or in its end (FAILED: its payload unreadable, the checkpoint API
refusing it). Its queue's worker sweeps on each heartbeat (sqs_jobs.worker.runtime), and only on a queue with
durable jobs:
1. ask Lambda which of the job's executions ended FAILED, TIMED_OUT or STOPPED since the last sweep
   (ListDurableExecutionsByFunction by start time, their EndTimestamp after the last sweep less SLACK_S; the last
   sweep's time is kept on an item of the idempotency table, `durable-sweep#<job>`);
2. for each, read its history (GetDurableExecutionHistory): one whose `jobs.end` succeeded ended itself;
3. else end it as its end steps would have, from its payload (GetDurableExecution's InputPayload):
   - its checkpointed outcome (`jobs.outcome`) succeeded: publish its follow-ups, write its record SUCCEEDED, count
     its batch members (what followed a success is never dropped, and never made a failure);
   - failed, or no outcome: one dead letter (none if `jobs.dead_letter` succeeded, or if the record already moved on,
     which it does only after its dead letter), with the job's evidence when its outcome has it, else evidence of
     how it ended (DurableExecutionTimedOut, DurableExecutionStopped, or Lambda's error); the record FAILED and moved
     to the next generation, so a new publish or a redrive runs the job again; its batch members counted dead.
   Before sending, the sweep claims the record (a conditional write, CLAIM_S): two sweeps never both send.
A sweep that could not finish (a call failed, another sweep's claim, the invocation's time) keeps the last sweep's
time, so the next one looks again; each part of an end is idempotent (sqs_jobs.durable.ending). An execution it
never can end (not the dispatcher's payload, an outcome Lambda's history truncated) is counted as a runtime fault
and logged each time a sweep looks at it, without holding the sweeps back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqs_jobs.durable.context import OUTSIDE_STEPS
from sqs_jobs.durable.ending import DurableEnding, Outcome
from sqs_jobs.durable.executions import STOPPED, TIMED_OUT
from sqs_jobs.durable.payload import DurableStart
from sqs_jobs.durable.record import FAILED, SUCCEEDED, ClaimedError, DurableRecords, StaleGenerationError
from sqs_jobs.limits import DAY, MINUTE
from sqs_jobs.worker.errors import DurableStepFailedError
from sqs_jobs.worker.names import DeadLetterFailure

if TYPE_CHECKING:
    from sqs_jobs.durable.executions import DurableExecutions, EndedExecution, ExecutionEnd
    from sqs_jobs.durable.record import DurableState
    from sqs_jobs.specs import JobSpec
    from sqs_jobs.worker.observability import BatchTally, Observability
    from sqs_jobs.worker.settings import WorkerSettings

SWEEP_RECORD_PREFIX = "durable-sweep#"
SWEPT_AT = "swept_at"
# Executions that ended this long before the last sweep are looked at again: Lambda's list and the clocks may lag.
SLACK_S = 15 * MINUTE
# How long a sweep's claim on ending one execution holds (its dead letter and record write take seconds).
CLAIM_S = 5 * MINUTE
# A sweep stops (and the next goes on) when its invocation has less than this left, or, on a worker whose whole
# invocation is shorter than three times as much, a third of its timeout: an 8 s worker still sweeps.
MIN_TIME_LEFT_S = 10.0
# The evidence of an execution that ended with no outcome of the job's: how it ended.
TIMED_OUT_ERROR = "DurableExecutionTimedOut"
STOPPED_ERROR = "DurableExecutionStopped"
CANCELLED_ERROR = "JobCancelledError"  # as an ordinary job's cancel says (sqs_jobs.worker.errors.JobCancelledError)
FAILED_ERROR = "DurableExecutionFailed"


class UnendableError(Exception):
    """An execution the sweep can't end, and never will: its payload is not the dispatcher's, or its checkpointed
    outcome can't be read from its history. Counted and logged each time a sweep looks at it; it does not hold the
    sweeps back, as a failed call does."""


class OutcomeUnreadableError(UnendableError):
    """An execution's checkpointed outcome can't be read from its history (Lambda truncated it)."""


class DurableSweep:
    """Ends the executions of a queue's durable jobs that ended without their end. `client(service)`: a client for
    one call; `time_left()`: seconds the invocation has left."""

    def __init__(
        self,
        worker: WorkerSettings,
        executions: DurableExecutions,
        client: Callable[[str], Any],
        observability: Observability,
        tally: BatchTally,
        *,
        time_left: Callable[[], float] = lambda: float("inf"),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._worker = worker
        self._queue = worker.queue
        self._executions = executions
        self._client = client
        self._obs = observability
        self._tally = tally
        self._time_left = time_left
        self._stop_at_s = min(MIN_TIME_LEFT_S, self._queue.function_timeout_s / 3)
        self._clock = clock
        self._records = DurableRecords(
            lambda: client("dynamodb"),
            worker.idempotency_table,
            self._queue.idempotency_expiry_s,
            clock,
            self._queue.name,
        )

    def sweep(self) -> int:
        """Sweep every durable job of the queue; how many executions it ended. A failure is the runtime's
        (RuntimeFault `durable_sweep`), never raised: the next heartbeat's sweep looks again."""
        ended = 0
        for job in self._queue.jobs:
            if job.durable is None:
                continue
            try:
                ended += self._sweep(job)
            except Exception:
                self._tally.runtime_fault("durable_sweep")
                self._obs.logger.exception("could not sweep the durable job's executions", extra={"job": job.name})
        return ended

    def _sweep(self, job: JobSpec) -> int:
        assert job.durable is not None
        now = self._clock()
        last = self._last_swept(job.name)
        since = (last if last is not None else now - job.durable.retention_days * DAY) - SLACK_S
        started_after = datetime.fromtimestamp(since - job.durable.execution_timeout_s, UTC)
        finished, ended = True, 0
        for execution in self._executions.ended(job.name, started_after):
            if execution.ended_at is not None and execution.ended_at < since:
                continue
            if self._time_left() < self._stop_at_s:
                finished = False
                break
            try:
                ended += self._end(job, execution)
            except ClaimedError:
                finished = False
            except UnendableError:
                self._tally.runtime_fault("durable_sweep")
                self._obs.logger.exception(
                    "a durable execution that ended without its end can't be ended by the sweep; see the runbook",
                    extra={"execution_arn": execution.arn, "execution_status": execution.status},
                )
            except Exception:
                finished = False
                self._tally.runtime_fault("durable_sweep")
                self._obs.logger.exception(
                    "could not end a durable execution that ended without its end; the next sweep tries again",
                    extra={"execution_arn": execution.arn, "execution_status": execution.status},
                )
        if finished:
            self._swept(job, now)
        return ended

    def _end(self, job: JobSpec, execution: EndedExecution) -> int:
        """End one execution as its end steps would have; 1 if it needed it, else 0."""
        steps = self._executions.runtime_steps(job.name, execution.arn)
        if steps.ended:
            return 0
        end = self._executions.end_of(job.name, execution.arn)
        if not end.input_payload:
            raise UnendableError(f"{execution.arn}: it has no input, so it was not started by the dispatcher")
        if steps.outcome_unreadable:
            # Its outcome was decided, but the history does not say which: ending it either way could be wrong.
            raise OutcomeUnreadableError(
                f"{execution.arn}: its jobs.outcome succeeded but its result is truncated in the history; read it with "
                "`aws lambda get-durable-execution-history` and end the key by hand (docs/runbook.md)"
            )
        try:
            start = DurableStart.from_json(end.input_payload)
        except (KeyError, TypeError, ValueError) as error:
            raise UnendableError(f"{execution.arn}: its input is not the dispatcher's payload: {error}") from error
        ending = DurableEnding(self._worker, job.name, self._records, self._client, self._obs)
        outcome = Outcome.from_json(steps.outcome) if steps.outcome else None
        state = self._records.read(start.key)
        if state.generation > start.generation:
            # Its failure's end was written (by its end step, or an earlier sweep): what may be left is its batch
            # members' count, idempotent; none once a newer execution of the key started (its end counts them).
            if state.status == FAILED:
                ending.members_ended(start, succeeded=False)
            return 0
        if state.status == SUCCEEDED:  # its success's end was written: likewise
            ending.members_ended(start, succeeded=True)
            return 0
        log = {"execution_arn": execution.arn, "execution_status": execution.status, "idempotency_key": start.key}
        if outcome is not None and outcome.succeeded:
            ending.end_succeeded(start, outcome.follow_ups)
            self._obs.logger.warning(
                "durable execution succeeded but stopped before its end; ended by the sweep", extra=log
            )
            return 1
        failure = outcome.failure if outcome is not None and outcome.failure else _failure_of(job, end, state)
        if steps.dead_letter_id is None:
            try:
                self._records.claim(start.key, start.generation, self._clock() + CLAIM_S)
            except StaleGenerationError:  # another sweep ended it meanwhile
                return 0
            ending.dead_letter(start, failure)
        ending.end_failed(start, failure)
        self._obs.logger.warning(
            "durable execution ended without its end; ended by the sweep", extra={**log, "failure": failure.failure}
        )
        return 1

    def _last_swept(self, job: str) -> float | None:
        item = (
            self._client("dynamodb")
            .get_item(
                TableName=self._worker.idempotency_table,
                Key={"id": {"S": SWEEP_RECORD_PREFIX + job}},
                ConsistentRead=True,
            )
            .get("Item", {})
        )
        return float(item[SWEPT_AT]["N"]) if SWEPT_AT in item else None

    def _swept(self, job: JobSpec, at: float) -> None:
        """Move the job's last sweep forward to `at` (never back: another sweep may have finished later)."""
        from botocore.exceptions import ClientError

        assert job.durable is not None
        try:
            self._client("dynamodb").update_item(
                TableName=self._worker.idempotency_table,
                Key={"id": {"S": SWEEP_RECORD_PREFIX + job.name}},
                UpdateExpression="SET #swept = :at, #expiration = :expiration",
                ConditionExpression="attribute_not_exists(#swept) OR #swept < :at",
                ExpressionAttributeNames={"#swept": SWEPT_AT, "#expiration": "expiration"},
                ExpressionAttributeValues={
                    ":at": {"N": repr(round(at, 3))},
                    ":expiration": {"N": str(int(at) + job.durable.retention_days * DAY)},
                },
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise


def _failure_of(job: JobSpec, end: ExecutionEnd, state: DurableState) -> DurableStepFailedError:
    """The evidence of an execution that ended with no outcome of the job's: how it ended, and where it was."""
    assert job.durable is not None
    if end.status == TIMED_OUT:
        error_type, failure = TIMED_OUT_ERROR, DeadLetterFailure.TIMED_OUT
        how = f"the execution ran past its {job.durable.execution_timeout_s}s execution timeout and Lambda stopped it"
    elif end.status == STOPPED and state.cancelled_at is not None:
        # `jobctl job cancel` stopped it: the evidence of an ordinary job's cancel.
        error_type, failure = CANCELLED_ERROR, DeadLetterFailure.CANCELLED
        how = f"an operator cancelled the job ({state.cancelled_by or 'unknown'}) and its execution was stopped"
    elif end.status == STOPPED:
        error_type, failure = STOPPED_ERROR, DeadLetterFailure.STOPPED
        how = "the execution was stopped (StopDurableExecution)"
    else:
        error_type = (end.error_type or "").rsplit(".", 1)[-1] or FAILED_ERROR
        failure = DeadLetterFailure.PERMANENT
        how = "the execution failed before its end step"
    message = f"{how}: {end.error_message}" if end.error_message else how
    return DurableStepFailedError(
        state.step or OUTSIDE_STEPS, error_type, message, failure, state.step_attempt or 1, end.stack_trace
    )
