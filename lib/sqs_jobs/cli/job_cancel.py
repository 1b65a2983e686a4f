"""`jobctl job cancel JOB ID` and the console's Cancel: an operator stops a job that should not run.

One conditional write to the key's record (sqs_jobs.worker.run_ledger), so it never races the worker:
- **not running** (queued, delayed, retrying, held, or never seen): the record becomes CANCELLED until the queue's
  idempotency expiry. Every copy of the key (the queued message, a retry, a redrive) finds it at its run's start
  write and is acknowledged without running (metric JobCancelled).
- **running**: the record gets `cancel_requested_at`. The run sees it at its next progress report or call
  (sqs_jobs.worker.progress) and stops with JobCancelledError, dead-lettered with that type and never retried;
  its record becomes CANCELLED. A run that makes no call and reports no progress finishes: cancel is cooperative.
- **completed**: nothing to cancel; said so.
`--undo` withdraws a cancel and puts the key back as the cancel found it, its runs kept (docs/key-life.md): the
next copy runs (a redrive too), as the run after those it had; a pending request is removed if its run has not seen
it yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqs_jobs.cli.errors import OperatorError
from sqs_jobs.specs import QueueSpec
from sqs_jobs.worker.key_life import COMPLETED_RUN, RUNS, KeyRecord, KeyState
from sqs_jobs.worker.names import (
    CANCEL_REQUESTED_AT,
    CANCELLED_AT,
    CANCELLED_BY,
    LIFE,
    LIFE_AT,
    NEXT_RETRY_AT,
    RECORD_JOB,
    RECORD_JOB_ID,
    RECORD_JOB_KEY,
    RECORD_QUEUE,
    RECORD_TENANT,
    LifeState,
    RecordStatus,
    life_partition,
)
from sqs_jobs.worker.settings import idempotency_record_id

# The other state's write may be refused when the key changes state in between (a run starts or ends): at most
# this many tries, each reading the record the refusal returned.
MAX_TRIES = 4


class CancelOutcome(StrEnum):
    CANCELLED = "cancelled"  # not running: no copy of it runs until the record expires
    REQUESTED = "requested"  # running: it stops at its next progress report or call
    ALREADY_CANCELLED = "already cancelled"
    COMPLETED = "completed"  # it completed: nothing to cancel
    WITHDRAWN = "withdrawn"  # --undo: the cancel is gone
    NOT_CANCELLED = "not cancelled"  # --undo of a key no cancel holds


class CancelRaceError(OperatorError):
    """The key kept changing state while it was being cancelled: nothing was written; try again."""


@dataclass(frozen=True)
class CancelTarget:
    """The key to cancel: its queue, job, ID and idempotency key, and how long its record keeps a cancel."""

    queue: str
    job: str
    job_id: str
    key: str
    expiry_s: int
    # The tenant whose job it is ("" for none), written with the cancel as the worker writes it with a run.
    tenant: str = ""

    @property
    def record_id(self) -> str:
        return idempotency_record_id(self.key)


@dataclass(frozen=True)
class CancelResult:
    outcome: CancelOutcome
    explanation: str

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "explanation": self.explanation}


def _condition_failed(error: BaseException) -> dict[str, Any] | None:
    """The record a refused conditional write returned, or None if the error is not a refusal."""
    response = getattr(error, "response", None) or {}
    if response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
        return None
    return dict(response.get("Item") or {})


def cancel_job(dynamodb: Any, table: str, target: CancelTarget, by: str, now: float | None = None) -> CancelResult:
    """Cancel the key (see the module's docstring); `by` says who, kept in the record."""
    expired_completion = False
    for _ in range(MAX_TRIES):
        moment = time.time() if now is None else now
        try:
            request = _cancel_free_key(table, target, by, moment, expired_completion=expired_completion)
            before = dynamodb.update_item(**request).get("Attributes")
            unseen = (
                ""
                if before
                else f" (no run of key {target.key!r} seen yet: a copy published under another key is untouched)"
            )
            return CancelResult(
                CancelOutcome.CANCELLED,
                "cancelled: no copy of it runs (a retry or a redrive neither) until "
                + _iso(moment + target.expiry_s)
                + "; `jobctl job cancel --undo` withdraws it"
                + unseen,
            )
        except Exception as error:
            old = _condition_failed(error)
            if old is None:
                raise
        record = KeyRecord.from_item(target.record_id, old)
        state = record.state(moment)
        expired_completion = state is KeyState.NEW and record.status == RecordStatus.COMPLETED
        if expired_completion:
            continue  # its count must start afresh: the next try cancels that completion only
        if state is KeyState.COMPLETED:
            completed = record.expires_at
            at = _iso(completed - target.expiry_s) if completed else "(unknown)"
            return CancelResult(CancelOutcome.COMPLETED, f"it completed at {at}: nothing to cancel")
        if state is KeyState.CANCELLED:
            return CancelResult(CancelOutcome.ALREADY_CANCELLED, "already cancelled")
        runs = str(record.runs)
        try:
            dynamodb.update_item(**_cancel_running_run(table, target, by, moment, runs))
            return CancelResult(
                CancelOutcome.REQUESTED,
                f"running (run {runs}): it stops at its next progress report or call and is dead-lettered as "
                "JobCancelledError; a run that makes neither finishes",
            )
        except Exception as error:
            if _condition_failed(error) is None:
                raise
    raise CancelRaceError(f"the key of {target.job}:{target.job_id} kept changing state; nothing was cancelled")


def withdraw(dynamodb: Any, table: str, target: CancelTarget, now: float | None = None) -> CancelResult:
    """Withdraw a cancel, putting the key back as the cancel found it (docs/key-life.md): a key that had runs and
    no dead letter goes back to FAILED with its runs (its next copy runs as the run after them, so `max_attempts`
    still bounds it); one that never ran, or whose message the DLQ has, is cleared (a redrive starts afresh, as
    after any dead letter); a request its run has not acted on is removed."""
    for _ in range(MAX_TRIES):
        moment = time.time() if now is None else now
        found = dynamodb.get_item(TableName=table, Key={"id": {"S": target.record_id}}, ConsistentRead=True)
        record = KeyRecord.from_item(target.record_id, found.get("Item"))
        state = record.state(moment)
        try:
            if state is KeyState.CANCEL_REQUESTED:
                dynamodb.update_item(**_withdraw_request(table, target, record))
                return CancelResult(
                    CancelOutcome.WITHDRAWN,
                    "cancel request withdrawn; a run that already saw it has stopped all the same",
                )
            if state is not KeyState.CANCELLED:
                return CancelResult(CancelOutcome.NOT_CANCELLED, "no cancel holds this key: nothing to withdraw")
            if record.status != RecordStatus.CANCELLED:
                # A run asked to stop that never reported back (or, before a failed run's cancel held, failed).
                dynamodb.update_item(**_withdraw_request(table, target, record))
                return CancelResult(CancelOutcome.WITHDRAWN, "cancel withdrawn: the next copy runs (a redrive too)")
            if record.runs > 0 and record.dead_lettered_at is None:
                dynamodb.update_item(**_uncancel(table, target, record))
                return CancelResult(
                    CancelOutcome.WITHDRAWN,
                    f"cancel withdrawn: the next copy runs (a redrive too), as run {record.runs + 1} of the key",
                )
            if record.dead_lettered_at is not None and record.ending_message is not None:
                # The DLQ has its message: ENDING, so that message's redelivery never runs it a second time.
                dynamodb.update_item(**_uncancel(table, target, record, dead_lettered=True))
                return CancelResult(
                    CancelOutcome.WITHDRAWN,
                    "cancel withdrawn: its dead letter stands; the key's next message runs afresh (a redrive too)",
                )
            dynamodb.delete_item(
                TableName=table,
                Key={"id": {"S": target.record_id}},
                ConditionExpression="#status = :cancelled AND " + _same("#cancelled_at", ":cancelled_at", record),
                ExpressionAttributeNames={"#status": "status", "#cancelled_at": CANCELLED_AT},
                ExpressionAttributeValues={":cancelled": {"S": RecordStatus.CANCELLED}, **_at(record)},
            )
            return CancelResult(CancelOutcome.WITHDRAWN, "cancel withdrawn: the next copy runs (a redrive too)")
        except Exception as error:
            if _condition_failed(error) is None:
                raise
    raise CancelRaceError(f"the key of {target.job}:{target.job_id} kept changing state; nothing was withdrawn")


def _same(name: str, value: str, record: KeyRecord) -> str:
    """The condition that the record still has the `cancelled_at` it was read with (absent: still absent)."""
    return f"{name} = {value}" if record.cancelled_at is not None else f"attribute_not_exists({name})"


def _at(record: KeyRecord) -> dict[str, Any]:
    return {":cancelled_at": {"N": f"{record.cancelled_at:.3f}"}} if record.cancelled_at is not None else {}


def _uncancel(table: str, target: CancelTarget, record: KeyRecord, *, dead_lettered: bool = False) -> dict[str, Any]:
    """CANCELLED back to FAILED, its runs and last error kept, no longer listed: what it was before the cancel
    (RETRYING; or ENDING, `dead_lettered`, the record still naming the message the DLQ has)."""
    names = {
        "#status": "status",
        "#cancelled_at": CANCELLED_AT,
        "#cancelled_by": CANCELLED_BY,
        "#request": CANCEL_REQUESTED_AT,
        "#life": LIFE,
        "#life_at": LIFE_AT,
    }
    values = {":failed": {"S": RecordStatus.FAILED}, ":cancelled": {"S": RecordStatus.CANCELLED}, **_at(record)}
    condition = "#status = :cancelled AND " + _same("#cancelled_at", ":cancelled_at", record)
    if not dead_lettered:
        names["#runs"] = RUNS
        values[":runs"] = {"N": str(record.runs)}
        condition += " AND #runs = :runs"
    return {
        "TableName": table,
        "Key": {"id": {"S": target.record_id}},
        "UpdateExpression": "SET #status = :failed REMOVE #cancelled_at, #cancelled_by, #request, #life, #life_at",
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def _withdraw_request(table: str, target: CancelTarget, record: KeyRecord) -> dict[str, Any]:
    """Remove a cancel request, while the record still has the one read (a run that saw it stopped all the same)."""
    return {
        "TableName": table,
        "Key": {"id": {"S": target.record_id}},
        "UpdateExpression": "REMOVE #request, #by",
        "ConditionExpression": "#request = :request AND NOT (#status = :cancelled)",
        "ExpressionAttributeNames": {"#status": "status", "#request": CANCEL_REQUESTED_AT, "#by": CANCELLED_BY},
        "ExpressionAttributeValues": {
            ":request": {"N": f"{record.cancel_requested_at or 0.0:.3f}"},
            ":cancelled": {"S": RecordStatus.CANCELLED},
        },
    }


def _cancel_free_key(
    table: str, target: CancelTarget, by: str, now: float, *, expired_completion: bool = False
) -> dict[str, Any]:
    """CANCELLED, only while no run holds the key and it has not completed (the worker's own idea of a free key);
    `expired_completion`: only while the record is the expired completion read, its count removed (a completion
    keeps its run's number in `runs`; the key's next life, withdrawn or redriven, starts afresh)."""
    names = {
        "#id": "id",
        "#status": "status",
        "#expiry": "expiration",
        "#in_progress_expiry": "in_progress_expiration",
        "#cancelled_at": CANCELLED_AT,
        "#cancelled_by": CANCELLED_BY,
        "#life": LIFE,
        "#life_at": LIFE_AT,
        "#next_retry_at": NEXT_RETRY_AT,
        "#queue": RECORD_QUEUE,
        "#job": RECORD_JOB,
        "#job_id": RECORD_JOB_ID,
        "#job_key": RECORD_JOB_KEY,
        "#tenant": RECORD_TENANT,
    }
    values = {
        ":cancelled": {"S": RecordStatus.CANCELLED},
        ":completed": {"S": RecordStatus.COMPLETED},
        ":failed": {"S": RecordStatus.FAILED},
        ":inprogress": {"S": RecordStatus.INPROGRESS},
        ":now": {"N": str(int(now))},
        ":now_at": {"N": f"{now:.3f}"},
        ":now_in_millis": {"N": str(int(now * 1000))},
        ":expiry": {"N": str(int(now) + target.expiry_s)},
        ":by": {"S": by[:512]},
        ":life": {"S": life_partition(target.queue, LifeState.CANCELLED, target.record_id)},
        ":queue": {"S": target.queue},
        ":job": {"S": target.job},
        ":job_id": {"S": target.job_id},
        ":job_key": {"S": target.key},
        ":tenant": {"S": target.tenant},
    }
    removed = "#in_progress_expiry, #next_retry_at"
    if expired_completion:
        condition = "#status = :completed AND #expiry < :now"
        del names["#id"], values[":failed"], values[":inprogress"], values[":now_in_millis"]
        names.update({"#runs": RUNS, "#completed_run": COMPLETED_RUN})
        removed += ", #runs, #completed_run"
    else:
        condition = (
            "attribute_not_exists(#id) OR (#expiry < :now AND #status <> :completed) OR #status = :failed OR "
            "(#status = :inprogress AND #in_progress_expiry < :now_in_millis)"
        )
    return {
        "TableName": table,
        "Key": {"id": {"S": target.record_id}},
        "UpdateExpression": (
            "SET #status = :cancelled, #expiry = :expiry, #cancelled_at = :now_at, #cancelled_by = :by, "
            "#life = :life, #life_at = :now_at, #queue = :queue, #job = :job, #job_id = :job_id, "
            f"#job_key = :job_key, #tenant = :tenant REMOVE {removed}"
        ),
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValues": "ALL_OLD",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _cancel_running_run(table: str, target: CancelTarget, by: str, now: float, runs: str) -> dict[str, Any]:
    """A cancel request for the run that holds the key now (the same run number), only while it holds it."""
    return {
        "TableName": table,
        "Key": {"id": {"S": target.record_id}},
        "UpdateExpression": "SET #request = if_not_exists(#request, :now_at), #by = :by",
        "ConditionExpression": "#status = :inprogress AND #runs = :runs AND #expiry >= :now",
        "ExpressionAttributeNames": {
            "#status": "status",
            "#runs": "runs",
            "#expiry": "expiration",
            "#request": CANCEL_REQUESTED_AT,
            "#by": CANCELLED_BY,
        },
        "ExpressionAttributeValues": {
            ":inprogress": {"S": RecordStatus.INPROGRESS},
            ":runs": {"N": runs},
            ":now": {"N": str(int(now))},
            ":now_at": {"N": f"{now:.3f}"},
            ":by": {"S": by[:512]},
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _iso(epoch_s: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="seconds")


def operator_identity(sts: Any) -> str:
    """Who cancels, as AWS knows them (the caller's ARN), kept in the record; '(unknown)' if STS won't say."""
    try:
        return str(sts.get_caller_identity()["Arn"])
    except Exception:
        return "(unknown)"


def target_for(spec: QueueSpec, job: str, job_id: str, key: str | None, tenant: str | None = None) -> CancelTarget:
    """The key a job and ID (and the publisher's key, if it chose one, and its tenant) run under, as the worker
    computes it."""
    from sqs_jobs.cli.job_lookup import job_key

    return CancelTarget(
        queue=spec.name,
        job=job,
        job_id=job_id,
        key=job_key(spec, job, job_id, key, tenant),
        expiry_s=spec.idempotency_expiry_s,
        tenant=tenant or "",
    )


def cancel_durable(
    dynamodb: Any, table: str, target: CancelTarget, by: str, stop: Callable[[str, str], None]
) -> tuple[CancelResult, str | None]:
    """Cancel a durable job: its durable record says cancelled (every later copy of the key is acknowledged without
    starting), and an execution starting or running is stopped with `stop(arn, by)` (StopDurableExecution), which
    the queue's next heartbeat ends with its dead letter (JobCancelledError). The result, and the ARN stopped."""
    from sqs_jobs.durable.record import RUNNING, STARTING, DurableRecords

    state = DurableRecords(lambda: dynamodb, table, target.expiry_s).cancel(target.key, by)
    if state.status in (STARTING, RUNNING) and state.execution_arn:
        stop(state.execution_arn, by)
        explanation = (
            f"cancelled: its execution was stopped ({state.execution_arn}); the queue's next heartbeat dead-letters "
            "it (JobCancelledError), and its copies are acknowledged without starting"
        )
        return CancelResult(CancelOutcome.REQUESTED, explanation), state.execution_arn
    return CancelResult(CancelOutcome.CANCELLED, "cancelled: its copies are acknowledged without starting"), None


def withdraw_durable(dynamodb: Any, table: str, target: CancelTarget) -> CancelResult:
    """Withdraw a durable job's cancel: its next copy starts an execution (a redrive too). A stopped execution
    stays stopped."""
    from sqs_jobs.durable.record import DurableRecords

    if DurableRecords(lambda: dynamodb, table, target.expiry_s).withdraw_cancel(target.key):
        return CancelResult(CancelOutcome.WITHDRAWN, "cancel withdrawn: its next copy starts an execution")
    return CancelResult(CancelOutcome.NOT_CANCELLED, "not cancelled: nothing to withdraw")


def stop_execution_with(lambda_client: Any) -> Callable[[str, str], None]:
    """StopDurableExecution through `lambda_client`, naming who cancelled in its error (the dead letter's
    evidence names them from the record). One Lambda refuses (it ended meanwhile, access) raises as AWS's errors do;
    the cancel is written already."""

    def stop(arn: str, by: str) -> None:
        lambda_client.stop_durable_execution(
            DurableExecutionArn=arn,
            Error={"ErrorType": "JobCancelledError", "ErrorMessage": f"cancelled by {by}"[:1024]},
        )

    return stop
