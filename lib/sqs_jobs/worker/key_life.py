"""A job key's life: the states its idempotency record can be in, and the one codec that reads the record.

The record (`<IDEMPOTENCY_KEY_PREFIX>#<sha256 of the key>` in the idempotency table) is written by the run ledger
(sqs_jobs.worker.run_ledger: a run's start, completion, failure, hold, dead letter), by a run's progress reports
(progress.py) and by an operator's cancel (sqs_jobs.cli.job_cancel); every reader (the ledger's refusals,
`jobctl job
show`, `job list`, cancel, the console) decodes it here, through `KeyRecord.from_item`. Which writer may move a key
from which state to which, under which DynamoDB condition, and which states are final: docs/key-life.md, whose
table is `TRANSITIONS` below (tests/unit/test_key_life.py checks the two agree).

Imports only the standard library and names.py: jobctl and the console read records without the runtime's
libraries.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from sqs_jobs.worker.names import (
    CANCEL_REQUESTED_AT,
    CANCELLED_AT,
    CANCELLED_BY,
    LIFE,
    LIFE_AT,
    NEXT_RETRY_AT,
    PROGRESS_AT,
    PROGRESS_DONE,
    PROGRESS_NOTE,
    PROGRESS_RUN,
    PROGRESS_TOTAL,
    RECORD_JOB,
    RECORD_JOB_ID,
    RECORD_JOB_KEY,
    RECORD_QUEUE,
    RECORD_TENANT,
    RUN_BY,
    STARTED_AT,
    TRACE_ID,
    RecordStatus,
)

# Powertools' own attributes (its DynamoDBPersistenceLayer's defaults, which the ledger keeps).
STATUS = "status"
EXPIRATION = "expiration"
IN_PROGRESS_EXPIRATION = "in_progress_expiration"
DATA = "data"

# The ledger's.
RUNS = "runs"
COMPLETED_RUN = "completed_run"
HELD_SINCE = "held_since"
FIRST_FAILED_AT = "first_failed_at"
LAST_FAILED_AT = "last_failed_at"
LAST_ERROR_TYPE = "last_error_type"
LAST_ERROR = "last_error"
LAST_FAILURE = "last_failure"
LAST_TRACEBACK = "last_traceback"
# The DLQ refused the key's dead letter: the next delivery sends it from the record, running nothing.
PENDING_DEAD_LETTER = "pending_dead_letter"
# The DLQ has the key's dead letter (epoch seconds) and what follows it (a batch member's count) has not held yet:
# the next delivery finishes that, sending and running nothing.
DEAD_LETTERED_AT = "dead_lettered_at"
# Which message was dead-lettered (its SQS message ID) and its body: that message's redelivery finishes the
# follow-through and is acknowledged; any other message of the key finishes it and then runs.
ENDING_MESSAGE = "ending_message"
ENDING_BODY = "ending_body"
# The follow-up jobs the completed run asked for (sqs_jobs.worker.follow_ups), as JSON.
FOLLOW_UPS = "follow_ups"


class KeyState(StrEnum):
    """Where a key stands, as its record says (docs/key-life.md)."""

    NEW = "new"  # no live record: never run, or its record expired or was cleared by a dead letter
    RUNNING = "running"  # a run holds the key (INPROGRESS, its hold live)
    CANCEL_REQUESTED = "cancel requested"  # running, and an operator asked it to stop
    STALLED = "stalled"  # INPROGRESS past its hold: the run crashed or timed out and never reported back
    RETRYING = "retrying"  # a run failed (or was held) and the key's message comes back for another
    DEAD_LETTER_PENDING = "dead letter pending"  # the DLQ refused the dead letter: the next delivery sends it
    # The DLQ has the key's dead letter: its message's redelivery is acknowledged (a batch member's count owed is
    # made first); the key's next message clears it and runs.
    ENDING = "ending"
    COMPLETED = "completed"  # final: a run succeeded; every copy is a duplicate until the record expires
    CANCELLED = "cancelled"  # final as the operator left it: every copy is acknowledged unrun (undo withdraws it)


# States no writer but the record's expiry (and, for CANCELLED, the operator's undo) moves a key out of.
FINAL_STATES = frozenset({KeyState.COMPLETED, KeyState.CANCELLED})


class Writer(StrEnum):
    START = "run start (ledger)"
    START_AFRESH = "run start on an expired completion (ledger)"
    COMPLETE = "run completion (ledger)"
    COMPLETE_AFTER_CUT = "cut run that finished untouched (ledger)"
    FAIL = "run failure (ledger)"
    REFUND = "run held back or out of time (ledger)"
    DEAD_LETTER = "dead letter sent (ledger, settlement)"
    HOLD_FOR_DEAD_LETTER = "delivery about to dead-letter a spent key (ledger)"
    ENDED = "the key's next delivery after its dead letter (ledger)"
    CANCEL_RUN = "run stopped by a cancel (ledger)"
    CANCEL = "operator's cancel (jobctl)"
    UNDO = "operator's undo (jobctl)"
    PROGRESS = "run's progress report (progress.py)"
    LISTING = "run outlasting list_running_after_s (ledger, sent by a thread of its own)"
    EXPIRY = "the record's expiry (DynamoDB TTL, read as expired at once)"


# Every move a writer may make, as (from, to, writer): docs/key-life.md's table, row for row. A move not listed is
# one no writer's condition allows.
TRANSITIONS: tuple[tuple[KeyState, KeyState, Writer], ...] = (
    (KeyState.NEW, KeyState.RUNNING, Writer.START),
    (KeyState.NEW, KeyState.RUNNING, Writer.START_AFRESH),
    (KeyState.RETRYING, KeyState.RUNNING, Writer.START),
    (KeyState.STALLED, KeyState.RUNNING, Writer.START),
    (KeyState.RUNNING, KeyState.COMPLETED, Writer.COMPLETE),
    (KeyState.CANCEL_REQUESTED, KeyState.COMPLETED, Writer.COMPLETE),
    (KeyState.RUNNING, KeyState.COMPLETED, Writer.COMPLETE_AFTER_CUT),
    (KeyState.RETRYING, KeyState.COMPLETED, Writer.COMPLETE_AFTER_CUT),
    (KeyState.STALLED, KeyState.COMPLETED, Writer.COMPLETE_AFTER_CUT),
    (KeyState.RUNNING, KeyState.RETRYING, Writer.FAIL),
    (KeyState.RUNNING, KeyState.DEAD_LETTER_PENDING, Writer.FAIL),
    (KeyState.CANCEL_REQUESTED, KeyState.CANCELLED, Writer.FAIL),
    (KeyState.RUNNING, KeyState.RETRYING, Writer.REFUND),
    (KeyState.CANCEL_REQUESTED, KeyState.CANCELLED, Writer.REFUND),
    (KeyState.STALLED, KeyState.RUNNING, Writer.HOLD_FOR_DEAD_LETTER),
    (KeyState.RETRYING, KeyState.RUNNING, Writer.HOLD_FOR_DEAD_LETTER),
    (KeyState.DEAD_LETTER_PENDING, KeyState.RUNNING, Writer.HOLD_FOR_DEAD_LETTER),
    (KeyState.RUNNING, KeyState.ENDING, Writer.DEAD_LETTER),
    (KeyState.STALLED, KeyState.ENDING, Writer.DEAD_LETTER),
    (KeyState.RETRYING, KeyState.ENDING, Writer.DEAD_LETTER),
    (KeyState.DEAD_LETTER_PENDING, KeyState.ENDING, Writer.DEAD_LETTER),
    (KeyState.CANCEL_REQUESTED, KeyState.CANCELLED, Writer.DEAD_LETTER),
    (KeyState.ENDING, KeyState.NEW, Writer.ENDED),
    (KeyState.CANCEL_REQUESTED, KeyState.CANCELLED, Writer.CANCEL_RUN),
    (KeyState.NEW, KeyState.CANCELLED, Writer.CANCEL),
    (KeyState.RETRYING, KeyState.CANCELLED, Writer.CANCEL),
    (KeyState.STALLED, KeyState.CANCELLED, Writer.CANCEL),
    (KeyState.DEAD_LETTER_PENDING, KeyState.CANCELLED, Writer.CANCEL),
    (KeyState.ENDING, KeyState.CANCELLED, Writer.CANCEL),
    (KeyState.RUNNING, KeyState.CANCEL_REQUESTED, Writer.CANCEL),
    (KeyState.CANCELLED, KeyState.NEW, Writer.UNDO),
    (KeyState.CANCELLED, KeyState.RETRYING, Writer.UNDO),
    (KeyState.CANCELLED, KeyState.ENDING, Writer.UNDO),
    (KeyState.CANCEL_REQUESTED, KeyState.RUNNING, Writer.UNDO),
    (KeyState.RUNNING, KeyState.RUNNING, Writer.PROGRESS),
    (KeyState.RUNNING, KeyState.RUNNING, Writer.LISTING),
    (KeyState.CANCEL_REQUESTED, KeyState.CANCEL_REQUESTED, Writer.LISTING),
    (KeyState.COMPLETED, KeyState.NEW, Writer.EXPIRY),
    (KeyState.CANCELLED, KeyState.NEW, Writer.EXPIRY),
    (KeyState.RETRYING, KeyState.NEW, Writer.EXPIRY),
    (KeyState.ENDING, KeyState.NEW, Writer.EXPIRY),
)


def _number(item: Mapping[str, Any], name: str) -> float | None:
    value = item.get(name, {}).get("N")
    return float(value) if value is not None else None


def _text(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name, {}).get("S")
    return str(value) if value is not None else None


class KeyRecord:
    """A key's record as stored (DynamoDB's typed JSON decoded); times are epoch seconds, as written.

    A plain class, not a frozen dataclass: building that one's generated methods cost every cold start about 2 ms.
    Immutable to the type checker (`Final`); equal, hashed and shown by its fields, as the dataclass was. A new field
    goes in `__slots__` and `__init__` both (mypy says which one it is missing from)."""

    __slots__ = (
        "cancel_requested_at",
        "cancelled_at",
        "cancelled_by",
        "completed_run",
        "dead_lettered_at",
        "ending_body",
        "ending_message",
        "expires_at",
        "first_failed_at",
        "follow_ups",
        "found",
        "has_runs",
        "held_since",
        "in_progress_until_ms",
        "job",
        "job_id",
        "job_key",
        "last_error",
        "last_error_type",
        "last_failed_at",
        "last_failure",
        "last_traceback",
        "life",
        "life_at",
        "next_retry_at",
        "pending_dead_letter",
        "progress_at",
        "progress_done",
        "progress_note",
        "progress_run",
        "progress_total",
        "queue",
        "record_id",
        "result",
        "run_by",
        "runs",
        "started_at",
        "status",
        "tenant",
        "trace_id",
    )

    def __init__(
        self,
        record_id: str,
        found: bool = False,
        status: str | None = None,
        expires_at: float | None = None,
        in_progress_until_ms: int | None = None,
        runs: int = 0,
        has_runs: bool = False,
        completed_run: int | None = None,
        held_since: float | None = None,
        first_failed_at: float | None = None,
        last_failed_at: float | None = None,
        last_error_type: str | None = None,
        last_error: str | None = None,
        last_failure: str | None = None,
        last_traceback: str | None = None,
        pending_dead_letter: str | None = None,
        dead_lettered_at: float | None = None,
        ending_message: str | None = None,
        ending_body: str | None = None,
        next_retry_at: float | None = None,
        cancelled_at: float | None = None,
        cancel_requested_at: float | None = None,
        cancelled_by: str | None = None,
        queue: str | None = None,
        job: str | None = None,
        job_id: str | None = None,
        job_key: str | None = None,
        tenant: str | None = None,
        run_by: str | None = None,
        started_at: float | None = None,
        life: str | None = None,
        life_at: float | None = None,
        follow_ups: str | None = None,
        progress_done: float | None = None,
        progress_total: float | None = None,
        progress_note: str | None = None,
        progress_at: float | None = None,
        progress_run: int | None = None,
        result: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        self.record_id: Final = record_id
        self.found: Final = found
        self.status: Final = status
        self.expires_at: Final = expires_at
        self.in_progress_until_ms: Final = in_progress_until_ms
        self.runs: Final = runs
        self.has_runs: Final = has_runs
        self.completed_run: Final = completed_run
        self.held_since: Final = held_since
        self.first_failed_at: Final = first_failed_at
        self.last_failed_at: Final = last_failed_at
        self.last_error_type: Final = last_error_type
        self.last_error: Final = last_error
        self.last_failure: Final = last_failure
        self.last_traceback: Final = last_traceback
        self.pending_dead_letter: Final = pending_dead_letter
        self.dead_lettered_at: Final = dead_lettered_at
        self.ending_message: Final = ending_message
        self.ending_body: Final = ending_body
        self.next_retry_at: Final = next_retry_at
        self.cancelled_at: Final = cancelled_at
        self.cancel_requested_at: Final = cancel_requested_at
        self.cancelled_by: Final = cancelled_by
        self.queue: Final = queue
        self.job: Final = job
        self.job_id: Final = job_id
        self.job_key: Final = job_key
        # None: the record says nothing of its tenant (a runtime before tenant-scoped keys wrote it); "": no tenant.
        self.tenant: Final = tenant
        self.run_by: Final = run_by
        self.started_at: Final = started_at
        self.life: Final = life
        self.life_at: Final = life_at
        self.follow_ups: Final = follow_ups
        self.progress_done: Final = progress_done
        self.progress_total: Final = progress_total
        self.progress_note: Final = progress_note
        self.progress_at: Final = progress_at
        self.progress_run: Final = progress_run
        # What the completing run returned, as JSON (Powertools' `data`; sqs_jobs.worker.results); None: nothing.
        self.result: Final = result
        # The trace of the key's newest run (a traced queue's), None: none recorded.
        self.trace_id: Final = trace_id

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyRecord) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({shown})"

    @classmethod
    def from_item(cls, record_id: str, item: Mapping[str, Any] | None) -> KeyRecord:
        """The record in DynamoDB's typed JSON (a GetItem's `Item`, a refused write's old item); None or {}: none."""
        if not item:
            return cls(record_id=record_id)
        in_progress = _number(item, IN_PROGRESS_EXPIRATION)
        runs = int(_number(item, RUNS) or 0)
        completed_run = _number(item, COMPLETED_RUN)
        if _text(item, STATUS) == RecordStatus.COMPLETED:
            # A completion keeps its run's number in `runs` (before 0.3.0: `runs` 0, the number in `completed_run`);
            # read as the count it leaves, none: the key's next life starts afresh.
            completed_run = runs or completed_run
            runs = 0
        progress_run = _number(item, PROGRESS_RUN)
        return cls(
            record_id=record_id,
            found=True,
            status=_text(item, STATUS),
            expires_at=_number(item, EXPIRATION),
            in_progress_until_ms=int(in_progress) if in_progress is not None else None,
            runs=runs,
            has_runs=RUNS in item,
            completed_run=int(completed_run) if completed_run is not None else None,
            held_since=_number(item, HELD_SINCE),
            first_failed_at=_number(item, FIRST_FAILED_AT),
            last_failed_at=_number(item, LAST_FAILED_AT),
            last_error_type=_text(item, LAST_ERROR_TYPE),
            last_error=_text(item, LAST_ERROR),
            last_failure=_text(item, LAST_FAILURE),
            last_traceback=_text(item, LAST_TRACEBACK),
            pending_dead_letter=_text(item, PENDING_DEAD_LETTER),
            dead_lettered_at=_number(item, DEAD_LETTERED_AT),
            ending_message=_text(item, ENDING_MESSAGE),
            ending_body=_text(item, ENDING_BODY),
            next_retry_at=_number(item, NEXT_RETRY_AT),
            cancelled_at=_number(item, CANCELLED_AT),
            cancel_requested_at=_number(item, CANCEL_REQUESTED_AT),
            cancelled_by=_text(item, CANCELLED_BY),
            queue=_text(item, RECORD_QUEUE),
            job=_text(item, RECORD_JOB),
            job_id=_text(item, RECORD_JOB_ID),
            job_key=_text(item, RECORD_JOB_KEY),
            tenant=_text(item, RECORD_TENANT),
            run_by=_text(item, RUN_BY),
            started_at=_number(item, STARTED_AT),
            life=_text(item, LIFE),
            life_at=_number(item, LIFE_AT),
            follow_ups=_text(item, FOLLOW_UPS),
            progress_done=_number(item, PROGRESS_DONE),
            progress_total=_number(item, PROGRESS_TOTAL),
            progress_note=_text(item, PROGRESS_NOTE),
            progress_at=_number(item, PROGRESS_AT),
            progress_run=int(progress_run) if progress_run is not None else None,
            result=_text(item, DATA),
            trace_id=_text(item, TRACE_ID),
        )

    # --- where it stands ----------------------------------------------------------------------------------------

    def live(self, now_s: float) -> bool:
        """Whether the record still counts: DynamoDB's TTL deletes it some time after `expiration`, and every
        condition of the ledger treats it as gone from then on."""
        return self.found and self.expires_at is not None and int(self.expires_at) >= int(now_s)

    def held(self, now_s: float) -> bool:
        """A run holds the key now (INPROGRESS, its hold not past)."""
        return self.status == RecordStatus.INPROGRESS and (
            self.in_progress_until_ms is None or self.in_progress_until_ms >= int(now_s * 1000)
        )

    @property
    def never_reported(self) -> bool:
        """The last run started and never wrote its end: its environment crashed or timed out."""
        return self.status == RecordStatus.INPROGRESS

    def state(self, now_s: float) -> KeyState:
        if not self.live(now_s):
            return KeyState.NEW
        status = self.status
        if status == RecordStatus.COMPLETED:
            return KeyState.COMPLETED
        if status == RecordStatus.CANCELLED:
            return KeyState.CANCELLED
        if self.held(now_s):
            return KeyState.CANCEL_REQUESTED if self.cancel_requested_at is not None else KeyState.RUNNING
        if self.cancel_requested_at is not None:
            # A run asked to stop that never reported back, or (before cancel held a failed run) failed: its key is
            # cancelled all the same (the ledger's start write refuses it).
            return KeyState.CANCELLED
        if status == RecordStatus.INPROGRESS:
            return KeyState.STALLED
        if self.dead_lettered_at is not None:
            return KeyState.ENDING
        if self.pending_dead_letter is not None:
            return KeyState.DEAD_LETTER_PENDING
        return KeyState.RETRYING


# --- whose key it is ----------------------------------------------------------------------------------------------


def scoped_key(job: str, key: str, tenant: str | None) -> str:
    """A job's idempotency key: `<job>:<key>`, or for a tenant's job `<job>@<tenant> <key>`. Unambiguous: a job name
    has neither `@` nor `:` (`[a-z][a-z0-9_]*`), and a tenant no space (SQS's MessageGroupId characters), so no key of
    one tenant, or of none, can spell another tenant's."""
    return f"{job}:{key}" if tenant is None else f"{job}@{tenant} {key}"


def split_key(idempotency_key: str) -> tuple[str, str | None, str]:
    """The job, the tenant (None: none) and the key within them, of a key `scoped_key` made."""
    job_end = min((index for index in (idempotency_key.find(":"), idempotency_key.find("@")) if index >= 0), default=-1)
    if job_end < 0:
        return idempotency_key, None, ""
    job = idempotency_key[:job_end]
    if idempotency_key[job_end] == ":":
        return job, None, idempotency_key[job_end + 1 :]
    tenant, _, key = idempotency_key[job_end + 1 :].partition(" ")
    return job, tenant, key
