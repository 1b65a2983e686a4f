"""`jobctl job show JOB ID`: what became of one job, from the records the runtime keeps.

- The idempotency record (DynamoDB): COMPLETED with when it finished and until when a redelivery is skipped,
  INPROGRESS with until when the run holds the key, or FAILED (retrying) with its runs and last error.
- The DLQ: every dead letter of that job and ID, with its evidence.
- For a unique or debounced job, its unique key's state (sqs_jobs.worker.uniqueness): the window claimed and by
  which publish, or the latest publish registered, when its window ends, and which copy last ran.
- For a job with a concurrency limit per key: the slots of its key (who holds each, until when), read by ID.
Neither: it hasn't run yet (still in the queue, or delayed), it failed and waits for its next attempt (a failure
releases the key), or its record expired. The source queue is not searched: receiving would hide its messages
from the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqs_jobs.batches import (
    CALLBACK_KINDS,
    POINTED_BATCH,
    POINTED_KINDS,
    PUBLISHED_AT,
    SUCCESS,
    batch_item_id,
    callback_key,
    callback_pointer_id,
)
from sqs_jobs.cli.discovery import QueueLocation
from sqs_jobs.cli.dlq import DeadLetter, DeadLetterQueue
from sqs_jobs.cli.errors import OperatorUnreachableError, OperatorUsageError
from sqs_jobs.cli.flow_limits import KeySlots, key_of, read_key_slots
from sqs_jobs.cli.queue_control import QueueControlError, mappings
from sqs_jobs.durable.record import DurableRecords, DurableState
from sqs_jobs.envelope import Envelope, build_envelope
from sqs_jobs.specs import QueueSpec
from sqs_jobs.worker.key_life import KeyRecord, KeyState, scoped_key
from sqs_jobs.worker.names import RecordStatus
from sqs_jobs.worker.settings import ENV_IDEMPOTENCY_TABLE, idempotency_record_id
from sqs_jobs.worker.uniqueness import (
    Claim,
    DebounceState,
    FlowKey,
    FlowKind,
    debounced_run_key,
    flow_key,
    flow_kind,
)

if TYPE_CHECKING:
    from sqs_jobs.results import JobResult

COMPLETED = "completed"
CANCELLED = "cancelled"
IN_PROGRESS = "in progress"
RETRYING = "retrying"
DEAD_LETTERED = "dead-lettered"
NOT_FOUND = "not found"
# What `job show` says of each state of a key's life (docs/key-life.md); a stalled run's record is a delivery's to
# take over, so it says what a missing one does.
_VERDICTS = {
    KeyState.COMPLETED: COMPLETED,
    KeyState.CANCELLED: CANCELLED,
    KeyState.RUNNING: IN_PROGRESS,
    KeyState.CANCEL_REQUESTED: IN_PROGRESS,
    KeyState.RETRYING: RETRYING,
    KeyState.DEAD_LETTER_PENDING: RETRYING,
    KeyState.ENDING: DEAD_LETTERED,
}


class JobLookupError(OperatorUnreachableError):
    """The job's records could not be located."""


def _number(value: float | None) -> float | int | None:
    """As the job reported it: 5, not 5.0."""
    return int(value) if value is not None and value.is_integer() else value


@dataclass(frozen=True)
class Progress:
    """What a run last reported of itself: `done` of `total` (if it said), a note, when, and which run."""

    done: float
    total: float | None
    note: str
    at: datetime
    run: int

    @classmethod
    def of(cls, record: KeyRecord) -> Progress | None:
        if record.progress_done is None or record.progress_at is None or record.progress_run is None:
            return None
        return cls(
            done=record.progress_done,
            total=record.progress_total,
            note=record.progress_note or "",
            at=datetime.fromtimestamp(record.progress_at, tz=UTC),
            run=record.progress_run,
        )

    def describe(self) -> str:
        amount = f"{self.done:g}" + (f" of {self.total:g}" if self.total is not None else "")
        if self.total:
            amount += f" ({self.done / self.total:.0%})"
        return amount + (f": {self.note}" if self.note else "") + f" (run {self.run}, at {self.at.isoformat()})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "done": _number(self.done),
            "total": _number(self.total),
            "note": self.note,
            "at": self.at,
            "run": self.run,
        }


@dataclass(frozen=True)
class IdempotencyRecord:
    """A job key's record as the worker keeps it (sqs_jobs.worker.run_ledger): Powertools' idempotency
    record and the runtime's count of the key's runs."""

    status: str  # COMPLETED, INPROGRESS, or FAILED (the last run failed; the next delivery runs it again)
    remembered_until: datetime
    # When the run finished: the record's expiry less the queue's idempotency expiry (Powertools stores no
    # completion time; it sets the expiry when it saves the result).
    completed_at: datetime | None
    in_progress_until: datetime | None
    # Runs counted since the key last completed or was dead-lettered (a run in progress included).
    runs: int = 0
    completed_run: int | None = None
    last_error_type: str | None = None
    last_error: str | None = None
    last_failed_at: datetime | None = None
    first_failed_at: datetime | None = None
    pending_dead_letter: str | None = None
    # The newest progress a run reported (context.progress), and which run reported it.
    progress: Progress | None = None
    # An operator's cancel (jobctl job cancel): when the key was cancelled, or a running run was asked to stop.
    cancelled_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    cancelled_by: str | None = None
    # Since when the runtime's flow control has held the key back without spending a run (an open breaker, a
    # rate limit, a busy key), and when its message is due again.
    held_since: datetime | None = None
    next_retry_at: datetime | None = None
    # The record as the one codec reads it (sqs_jobs.worker.key_life): its state is the verdict's.
    key_record: KeyRecord | None = None
    # When the DLQ took the key's dead letter (ENDING, until the key's next message clears it).
    dead_lettered_at: datetime | None = None
    # When its last run started, and which worker ran it (the Lambda log stream and request ID).
    started_at: datetime | None = None
    run_by: str | None = None
    # The trace its newest run is a span of (a traced queue's; docs/tracing.md).
    trace_id: str | None = None

    @classmethod
    def from_item(cls, item: dict[str, Any], expiry_s: int) -> IdempotencyRecord:
        return cls.of(KeyRecord.from_item(str(item.get("id", {}).get("S", "")), item), expiry_s)

    @classmethod
    def of(cls, record: KeyRecord, expiry_s: int) -> IdempotencyRecord:
        """As the one codec read it (sqs_jobs.worker.key_life)."""
        remembered_until = datetime.fromtimestamp(int(record.expires_at or 0), tz=UTC)
        status = record.status or ""
        in_progress = record.in_progress_until_ms
        return cls(
            status=status,
            remembered_until=remembered_until,
            completed_at=remembered_until - timedelta(seconds=expiry_s) if status == RecordStatus.COMPLETED else None,
            # A run's hold counts only while it is in progress (a completion may leave it behind).
            in_progress_until=(
                datetime.fromtimestamp(in_progress / 1000, tz=UTC)
                if in_progress and status == RecordStatus.INPROGRESS
                else None
            ),
            runs=record.runs,
            completed_run=record.completed_run,
            started_at=datetime.fromtimestamp(record.started_at, tz=UTC) if record.started_at is not None else None,
            run_by=record.run_by,
            trace_id=record.trace_id,
            last_error_type=record.last_error_type,
            last_error=record.last_error,
            last_failed_at=_moment(record.last_failed_at),
            first_failed_at=_moment(record.first_failed_at),
            pending_dead_letter=record.pending_dead_letter,
            held_since=_moment(record.held_since),
            next_retry_at=_moment(record.next_retry_at),
            progress=Progress.of(record),
            cancelled_at=_moment(record.cancelled_at),
            cancel_requested_at=_moment(record.cancel_requested_at),
            cancelled_by=record.cancelled_by,
            key_record=record,
            dead_lettered_at=_moment(record.dead_lettered_at),
        )

    def state(self, at: datetime) -> KeyState:
        if self.key_record is None:
            return KeyState.NEW
        return self.key_record.state(at.timestamp())


def _moment(epoch_s: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch_s, tz=UTC) if epoch_s is not None else None


def _moment_ms(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


@dataclass(frozen=True)
class FlowState:
    """A unique or debounced job's unique key as the worker keeps it: for unique, the window claimed and by which
    publish; for debounce, the latest publish registered (its window ends `debounce_s` after its send) and the copy
    that last ran at its window's end. `found` False: no live state (nothing consumed, or it expired)."""

    kind: str  # "unique" or "debounce"
    unique_key: str
    window_s: int
    found: bool = False
    tenant: str | None = None
    window_start: datetime | None = None
    window_end: datetime | None = None
    # unique: the claimant; debounce: the latest publish registered.
    publish_key: str | None = None
    publish_message: str | None = None
    # debounce: the copy that last ran (its send, the key it ran under) and whether the latest is that one.
    fired_sent_at: datetime | None = None
    fired_run_key: str | None = None
    latest_fired: bool = False
    # debounce: the idempotency key the latest publish runs under when it fires.
    latest_run_key: str | None = None
    remembered_until: datetime | None = None
    # Why the state could not be looked up (the unique key needs more than the ID, or the module can't load here).
    problem: str | None = None

    @classmethod
    def unknown(cls, spec: QueueSpec, job: str, problem: str) -> FlowState:
        job_spec = spec.job(job)
        unique = flow_kind(job_spec) is FlowKind.UNIQUE
        window_s = (job_spec.unique_for_s if unique else job_spec.debounce_s) or 0
        return cls(kind="unique" if unique else "debounce", unique_key="", window_s=window_s, problem=problem)

    @classmethod
    def read(
        cls, dynamodb: Any, table: str, spec: QueueSpec, job: str, key: FlowKey, now: datetime, derived: bool = False
    ) -> FlowState | None:
        """The job's state for `key` (one GetItem), or None for a job with neither setting. `derived`: the runtime
        derives the job's idempotency key (so a debounced run's is `<job>:<id>@<its first send>`)."""
        job_spec = spec.job(job)
        kind = flow_kind(job_spec)
        if kind is None:
            return None
        unique = kind is FlowKind.UNIQUE
        window_s = (job_spec.unique_for_s if unique else job_spec.debounce_s) or 0
        empty = cls(kind="unique" if unique else "debounce", unique_key=key.text, window_s=window_s, tenant=key.tenant)
        response = dynamodb.get_item(TableName=table, Key={"id": {"S": key.record_id(kind)}}, ConsistentRead=True)
        item = response.get("Item")
        if not item or int(item.get("expiration", {}).get("N", "0")) < now.timestamp():
            return empty
        remembered_until = datetime.fromtimestamp(int(item["expiration"]["N"]), tz=UTC)
        if unique:
            claim = Claim.from_item(item)
            return replace(
                empty,
                found=True,
                window_start=_moment_ms(claim.start_ms),
                window_end=_moment_ms(claim.end_ms),
                publish_key=claim.claimant.key,
                publish_message=claim.claimant.message_id,
                remembered_until=remembered_until,
            )
        state = DebounceState.from_item(item)
        latest = state.latest
        return replace(
            empty,
            found=latest is not None,
            window_start=_moment_ms(latest.sent_ms) if latest else None,
            window_end=_moment_ms(latest.sent_ms + window_s * 1000) if latest else None,
            publish_key=latest.key if latest else None,
            publish_message=latest.message_id if latest else None,
            fired_sent_at=_moment_ms(state.fired.sent_ms) if state.fired else None,
            fired_run_key=state.fired_run_key,
            latest_fired=latest is not None and state.fired == latest,
            latest_run_key=(debounced_run_key(latest.key, latest) if derived else latest.key) if latest else None,
            remembered_until=remembered_until,
        )

    def describe(self, now: datetime) -> str:
        if self.problem is not None:
            return f"{self.kind}: {self.problem}"
        where = self.unique_key + (f" (tenant {self.tenant})" if self.tenant is not None else "")
        if not self.found or self.window_start is None or self.window_end is None:
            return f"{self.kind} {where}: no publish consumed within its {self.window_s}s window"
        sent = self.window_start.isoformat(timespec="milliseconds")
        ends = self.window_end.isoformat(timespec="milliseconds")
        publish = f"key {self.publish_key}, message {self.publish_message}"
        if self.kind == "unique":
            state = f"open until {ends}" if self.window_end > now else f"ended at {ends}"
            return (
                f"unique {where}: window {state}, claimed by the publish sent {sent} ({publish}); "
                "other publishes sent within it are acknowledged unrun"
            )
        if self.latest_fired:
            latest = f"ran at its window's end ({ends}) as {self.fired_run_key}"
        elif self.window_end > now:
            latest = f"waits until its window ends, {ends}, then runs as {self.latest_run_key} unless a later one comes"
        else:
            latest = f"its window ended {ends}: it runs as {self.latest_run_key} when it is next received"
        said = f"debounce {where}: latest publish sent {sent} ({publish}) {latest}"
        if self.fired_sent_at is not None and not self.latest_fired:
            said += f"; the last run was the publish sent {self.fired_sent_at.isoformat(timespec='milliseconds')}"
            said += f" ({self.fired_run_key})"
        return said

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "unique_key": self.unique_key,
            "tenant": self.tenant,
            "window_s": self.window_s,
            "found": self.found,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "publish_key": self.publish_key,
            "publish_message": self.publish_message,
            "fired_sent_at": self.fired_sent_at,
            "fired_run_key": self.fired_run_key,
            "latest_fired": self.latest_fired,
            "latest_run_key": self.latest_run_key,
            "remembered_until": self.remembered_until,
            "problem": self.problem,
        }


@dataclass(frozen=True)
class CallbackOf:
    """A batch's callback found by its job and ID (sqs_jobs.batches.callback_pointers): the batch that last named
    it, the kind shown, and the other kind's key if the batch named it for both."""

    batch_id: str
    kind: str
    others: tuple[tuple[str, str], ...] = ()
    # Whether its batch has published it: the kind's set is whole (False: its members have not all ended, or for
    # success, not all succeeded).
    published: bool = True

    def describe(self) -> str:
        said = f"the {self.kind} callback of batch {self.batch_id} (jobctl batch show {self.batch_id})"
        for kind, key in self.others:
            said += f"; its {kind} callback too: --key {key}"
        # Shown because nothing ran under the job's own key yet: a job of this job and ID published on its own, and
        # still queued, is shown by that key.
        return said + "; a job of this job and ID published on its own: --key ID"

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch_id,
            "kind": self.kind,
            "published": self.published,
            "others": [{"kind": kind, "key": key} for kind, key in self.others],
        }


@dataclass(frozen=True)
class JobLookup:
    queue: str
    job: str
    entity_id: str
    idempotency_key: str
    record: IdempotencyRecord | None
    dead_letters: list[DeadLetter]
    looked_at: datetime
    max_attempts: int = 0
    # A unique or debounced job's unique key state; None for other jobs.
    flow: FlowState | None = None
    # The job's key's slots, if the job has a concurrency limit per key (KeyConcurrency).
    key_slots: KeySlots | None = None
    # A durable job's execution, from its durable record (sqs_jobs.durable.record); None for other jobs.
    durable: DurableState | None = None
    # A batch's callback, found by its job and ID under the key its batch named; None for any other job.
    callback_of: CallbackOf | None = None

    @property
    def verdict(self) -> str:
        if self.dead_letters:
            return DEAD_LETTERED
        if self.durable is not None and self.durable.status is not None:
            # The worker only started it: the execution's own record says where it is.
            status = self.durable.status
            return {"SUCCEEDED": COMPLETED, "FAILED": DEAD_LETTERED}.get(status, IN_PROGRESS)
        record = self.record
        if record is None:
            return NOT_FOUND
        return _VERDICTS.get(record.state(self.looked_at), NOT_FOUND)

    def outcome(self) -> JobResult:
        """How the job stands as its publisher reads it (sqs_jobs.results): the same codec, the same states; a job
        whose dead letter is in the DLQ is dead whatever its record says."""
        from sqs_jobs.results import JobResult, JobState, execution_state, job_result

        durable = self.durable
        if durable is not None and durable.status is not None:
            # The worker only started it (its key record says so); the execution's own record says how it stands.
            state = execution_state(durable.status)
            failed = state is JobState.DEAD
            return JobResult(
                self.job,
                self.entity_id,
                self.idempotency_key,
                state,
                error_type=durable.last_error_type if failed else None,
                error=durable.last_error if failed else None,
            )
        key_record = (
            self.record.key_record
            if self.record is not None and self.record.key_record is not None
            else KeyRecord(record_id=idempotency_record_id(self.idempotency_key))
        )
        found = job_result(self.job, self.entity_id, self.idempotency_key, key_record, self.looked_at.timestamp())
        return replace(found, state=JobState.DEAD) if self.dead_letters and not found.done else found

    def explanation(self) -> str:
        record = self.record
        if self.durable is not None and self.durable.status is not None and not self.dead_letters:
            return (
                f"a durable execution, its steps run in its durable function: {self.durable.status.lower()} "
                "(below); `jobctl dlq list` if it failed and its dead letter was taken"
            )
        if self.verdict == DEAD_LETTERED and not self.dead_letters and record is not None:
            at = record.dead_lettered_at.isoformat() if record.dead_lettered_at else "(unknown)"
            said = f"dead-lettered at {at}; its dead letter is not in the DLQ now (taken, discarded or being redriven)"
            if record.key_record is not None and record.key_record.ending_body:
                said += "; its batch's count failed and is pending: its message comes back to count it, running nothing"
            return said + "; a redrive or a new publish runs it again as a new life (docs/key-life.md)"
        if self.verdict == DEAD_LETTERED:
            said = f"{len(self.dead_letters)} dead letter(s) in the DLQ: triage with `jobctl dlq show {self.queue} ID`"
            if record is not None and record.status == RecordStatus.CANCELLED:
                said += "; its key is cancelled, so a redrive is acknowledged unrun until `jobctl job cancel --undo`"
            return said
        if self.verdict == COMPLETED and record is not None:
            completed = f"completed; a redelivery is skipped until {record.remembered_until.isoformat()}"
            if record.cancel_requested_at is not None:
                completed += (
                    f" (a cancel was requested at {record.cancel_requested_at.isoformat()}; its run finished "
                    "without reaching a progress report or call that would have stopped it)"
                )
            return completed
        if self.verdict == CANCELLED and record is not None:
            return (
                f"cancelled by {record.cancelled_by or '(unknown)'}: no copy of it runs until "
                f"{record.remembered_until.isoformat()} (`jobctl job cancel --undo` withdraws it)"
            )
        if self.verdict == IN_PROGRESS and record is not None:
            until = record.in_progress_until.isoformat() if record.in_progress_until else "its invocation ends"
            running = f"running now (run {record.runs} of {self.max_attempts})"
            if record.started_at is not None:
                running += f", since {record.started_at.isoformat()}"
            if record.run_by:
                running += f", by {record.run_by}"
            running += f"; the run holds the key until {until}"
            progress = record.progress
            if progress is not None and progress.run == record.runs:
                running += f"; progress {progress.describe()}"
            if record.cancel_requested_at is not None:
                running += "; a cancel was requested: it stops at its next progress report or call"
            return running
        if (
            self.verdict == RETRYING
            and record is not None
            and record.held_since is not None
            and (record.last_failed_at is None or record.last_failed_at <= record.held_since)
        ):
            due = record.next_retry_at.isoformat() if record.next_retry_at else "(unknown)"
            return (
                f"held since {record.held_since.isoformat()} by flow control (an open breaker, a rate limit or a "
                f"busy key), {record.runs} of {self.max_attempts} runs spent; its message is due again at {due}; "
                "held at most its limit's max_hold_s, then each refusal counts as a run"
            )
        if self.verdict == RETRYING and record is not None:
            when = record.last_failed_at.isoformat() if record.last_failed_at else "(unknown)"
            failed = f"run {record.runs} of {self.max_attempts} failed at {when}: {record.last_error_type}"
            if record.pending_dead_letter:
                return f"{failed}; its dead-lettering was refused and is pending: the next delivery dead-letters it"
            return f"{failed}; it runs again when its message comes back after its backoff"
        if record is not None:
            return "its record has expired (or its run ended without settling): a delivery would run it again"
        if self.callback_of is not None and not self.callback_of.published:
            callback = self.callback_of
            return (
                f"not published yet: the {callback.kind} callback of batch {callback.batch_id}, published once "
                f"{'every member has succeeded' if callback.kind == SUCCESS else 'every member has ended'} "
                f"(jobctl batch show {callback.batch_id})"
            )
        return (
            "no record: not run yet (in the queue or delayed), failed and waiting for its next attempt, or its "
            "record expired"
        )

    def to_dict(self) -> dict[str, Any]:
        record = self.record
        outcome = self.outcome()
        return {
            "queue": self.queue,
            "job": self.job,
            "id": self.entity_id,
            "idempotency_key": self.idempotency_key,
            "verdict": self.verdict,
            # As JobPublisher.result says it: the state, and once it succeeded what the job returned.
            "state": outcome.state.value,
            "result": outcome.value,
            "explanation": self.explanation(),
            "record": None
            if record is None
            else {
                "status": record.status,
                "completed_at": record.completed_at,
                "remembered_until": record.remembered_until,
                "in_progress_until": record.in_progress_until,
                "runs": record.runs,
                "completed_run": record.completed_run,
                "started_at": record.started_at,
                "run_by": record.run_by,
                "trace_id": record.trace_id,
                "last_error_type": record.last_error_type,
                "last_error": record.last_error,
                "first_failed_at": record.first_failed_at,
                "last_failed_at": record.last_failed_at,
                "pending_dead_letter": record.pending_dead_letter,
                "held_since": record.held_since,
                "next_retry_at": record.next_retry_at,
                "progress": record.progress.to_dict() if record.progress else None,
                "cancelled_at": record.cancelled_at,
                "cancel_requested_at": record.cancel_requested_at,
                "cancelled_by": record.cancelled_by,
            },
            "dead_letters": [letter.to_dict() for letter in self.dead_letters],
            "flow": None if self.flow is None else {**self.flow.to_dict(), "said": self.flow.describe(self.looked_at)},
            "key_slots": self.key_slots.to_dict(self.looked_at) if self.key_slots is not None else None,
            "durable": self.durable.to_json() if self.durable is not None else None,
            "callback_of": self.callback_of.to_dict() if self.callback_of is not None else None,
        }


def idempotency_table(lambda_client: Any, queue_arn: str) -> str:
    """The idempotency table the queue's worker uses, from its function's environment."""
    try:
        function_arn = mappings(lambda_client, queue_arn)[0].function_arn
    except QueueControlError as error:
        raise JobLookupError(str(error)) from None
    configuration = lambda_client.get_function_configuration(FunctionName=function_arn)
    table = configuration.get("Environment", {}).get("Variables", {}).get(ENV_IDEMPOTENCY_TABLE)
    if not table:
        raise JobLookupError(f"the worker {function_arn} has no {ENV_IDEMPOTENCY_TABLE} in its environment")
    return str(table)


class JobKeyUnknownError(OperatorUsageError):
    """The job's key can't be derived from its ID here: the operator gives the key the publisher chose."""


def job_key(spec: QueueSpec, job: str, entity_id: str, key: str | None, tenant: str | None = None) -> str:
    """The job's idempotency key as the worker computes it: `<job>:` (`<job>@<tenant> ` for a tenant's job) and the
    publisher's key, else the job's own key function on an envelope of just the job, ID and tenant, else the ID."""
    return envelope_key(spec, build_envelope(job, entity_id, spec.job_names, key=key, tenant=tenant))


def envelope_key(spec: QueueSpec, envelope: Envelope) -> str:
    """The idempotency key the worker computes for `envelope` (one of `spec`'s jobs): `<job>:` (`<job>@<tenant> `)
    and the publisher's key, else the job's own key function, else the ID."""
    job = envelope.job
    tenant = envelope.tenant
    if envelope.key is not None:  # the publisher's key wins, whatever the job's module says (LoadedJob)
        return scoped_key(job, envelope.key, tenant)
    # Imported here: loading the jobs imports their modules and Powertools, which only this lookup needs.
    from sqs_jobs.worker.jobs import load_jobs

    try:
        loaded = load_jobs(spec)[job]
    except Exception as error:  # a module that imports what only the deployed worker has
        raise JobKeyUnknownError(
            f"can't load job {job!r} here to derive its key ({type(error).__name__}: {error}); "
            "give the key the publisher chose with --key"
        ) from None
    try:
        return loaded.idempotency_key(envelope)
    except Exception as error:  # a job whose key needs more than its ID
        raise JobKeyUnknownError(
            f"job {job!r} derives no key from ID {envelope.id!r} alone ({type(error).__name__}: {error}); "
            "give the key the publisher chose with --key"
        ) from None


def flow_key_of(spec: QueueSpec, job: str, entity_id: str) -> tuple[FlowKey, bool]:
    """A unique or debounced job's unique key for an envelope of just its job and ID, as the worker derives it, and
    whether the worker derives its idempotency key too (no publisher's key, no `idempotency_key` in its module)."""
    envelope: Envelope = build_envelope(job, entity_id, spec.job_names)
    from sqs_jobs.worker.jobs import load_jobs

    try:
        loaded = load_jobs(spec)[job]
        return flow_key(spec.job(job), loaded.unique_key_function, envelope), loaded.derives_key(envelope)
    except Exception as error:  # a module that can't load here, or a unique key that needs more than the ID
        raise JobKeyUnknownError(
            f"can't derive job {job!r}'s unique key from ID {entity_id!r} alone ({type(error).__name__}: {error})"
        ) from None


def lookup(
    client: Callable[[str], Any],
    spec: QueueSpec,
    where: QueueLocation,
    job: str,
    entity_id: str,
    key: str | None,
    limit_key: str | None = None,
    tenant: str | None = None,
) -> JobLookup:
    """`find_job` on a deployed stack: the queue's idempotency table (from its worker's environment) and its DLQ,
    through `client` (service name -> boto3 client)."""
    dead = DeadLetterQueue.of(client("sqs"), where)
    return find_job(
        spec=spec,
        job=job,
        entity_id=entity_id,
        key=key,
        dynamodb=client("dynamodb"),
        table=idempotency_table(client("lambda"), where.arn),
        dead_letter_queue=dead,
        limit_key=limit_key,
        tenant=tenant,
    )


def find_job(
    *,
    spec: QueueSpec,
    job: str,
    entity_id: str,
    key: str | None,
    dynamodb: Any,
    table: str,
    dead_letter_queue: DeadLetterQueue,
    now: datetime | None = None,
    limit_key: str | None = None,
    tenant: str | None = None,
) -> JobLookup:
    """`limit_key`: the value of the envelope field the job's concurrency is keyed by, when the job, ID and key
    don't give it (flow_limits.key_of)."""
    idempotency_key = job_key(spec, job, entity_id, key, tenant)
    looked_at = now or datetime.now(UTC)
    flow = None
    if flow_kind(spec.job(job)) is not None:
        try:
            unique, derived = flow_key_of(spec, job, entity_id)
            flow = FlowState.read(dynamodb, table, spec, job, unique, looked_at, derived=derived)
        except JobKeyUnknownError as error:  # the rest of the lookup still stands
            flow = FlowState.unknown(spec, job, str(error))
        # A debounced job's last run, without --key: the key that copy ran under (for a key the runtime derived,
        # `<job>:<id>@<its first send>`).
        if flow is not None and key is None and flow.fired_run_key:
            idempotency_key = flow.fired_run_key
    item = _record_item(dynamodb, table, idempotency_key)
    callback = None
    if item is None and key is None and tenant is None and flow is None:
        # Nothing under its own key: perhaps a batch's callback, which runs under the key its batch names.
        found_callback = _callback_run(dynamodb, table, job, entity_id)
        if found_callback is not None:
            callback, key, item = found_callback
            idempotency_key = scoped_key(job, key, None)
    record = IdempotencyRecord.from_item(item, spec.idempotency_expiry_s) if item is not None else None
    letters = [
        letter
        for letter in dead_letter_queue.peek()
        if letter.job == job and letter.entity_id == entity_id and letter.envelope_key == key
    ]
    concurrency = spec.job(job).concurrency
    key_slots = None
    if concurrency is not None:
        limit_value = key_of(concurrency.per, job, entity_id, key, limit_key)
        key_slots = read_key_slots(dynamodb, table, job, concurrency, limit_value)
    durable = None
    if spec.job(job).durable is not None:
        durable = DurableRecords(lambda: dynamodb, table, spec.idempotency_expiry_s).read(idempotency_key)
    return JobLookup(
        queue=spec.name,
        job=job,
        entity_id=entity_id,
        idempotency_key=idempotency_key,
        record=record,
        dead_letters=letters,
        looked_at=looked_at,
        max_attempts=spec.max_attempts,
        flow=flow,
        key_slots=key_slots,
        durable=durable,
        callback_of=callback,
    )


def _record_item(dynamodb: Any, table: str, idempotency_key: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = dynamodb.get_item(
        TableName=table, Key={"id": {"S": idempotency_record_id(idempotency_key)}}, ConsistentRead=True
    ).get("Item")
    return item


def _callback_run(
    dynamodb: Any, table: str, job: str, entity_id: str
) -> tuple[CallbackOf, str, dict[str, Any] | None] | None:
    """The callback `<job>:<id>` of the batch that last named it: what it is, its key, and its run's record (None:
    not run yet); None when no batch names it."""
    pointer = dynamodb.get_item(
        TableName=table, Key={"id": {"S": callback_pointer_id(job, entity_id)}}, ConsistentRead=True
    ).get("Item")
    if pointer is None:
        return None
    batch_id = pointer[POINTED_BATCH]["S"]
    named = [kind for kind in CALLBACK_KINDS if kind in pointer.get(POINTED_KINDS, {}).get("SS", [])]
    if not named:
        return None
    keys = {kind: callback_key(batch_id, kind) for kind in named}
    records = {kind: _record_item(dynamodb, table, scoped_key(job, keys[kind], None)) for kind in named}
    # The kind that ran, if one did (the complete callback first: every batch that ends publishes it).
    shown = next((kind for kind in reversed(named) if records[kind] is not None), named[-1])
    others = tuple((kind, keys[kind]) for kind in named if kind != shown)
    published = records[shown] is not None or _callback_published(dynamodb, table, batch_id, shown)
    return CallbackOf(batch_id, shown, others, published), keys[shown], records[shown]


def _callback_published(dynamodb: Any, table: str, batch_id: str, kind: str) -> bool:
    """Whether the batch has marked its `kind` callback published (gone with the batch: say so, as if it were)."""
    attribute = PUBLISHED_AT[kind]
    item = dynamodb.get_item(
        TableName=table,
        Key={"id": {"S": batch_item_id(batch_id)}},
        ProjectionExpression="#published",
        ExpressionAttributeNames={"#published": attribute},
        ConsistentRead=True,
    ).get("Item")
    return item is None or item.get(attribute, {}).get("N", "0") != "0"
