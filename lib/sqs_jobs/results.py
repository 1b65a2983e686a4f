"""How a published job stands, and what it returned, read back by the service that published it (docs/results.md).

The worker keeps each job key's state and its run's result in the key's idempotency record; this reads that record
with the codec the worker writes it with (sqs_jobs.worker.key_life), one consistent GetItem of the attributes
`RESULT_ATTRIBUTES` names, which is all `JobsStack.grant_read_results` lets a service read: never the tracebacks,
the message bodies or who ran it.

Boto3 only, as the publisher: a service needs no worker dependency to read results.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqs_jobs.envelope import checked_identifier
from sqs_jobs.worker.key_life import (
    COMPLETED_RUN,
    DATA,
    DEAD_LETTERED_AT,
    EXPIRATION,
    IN_PROGRESS_EXPIRATION,
    LAST_ERROR,
    LAST_ERROR_TYPE,
    LAST_FAILED_AT,
    PENDING_DEAD_LETTER,
    RUNS,
    STATUS,
    KeyRecord,
    KeyState,
    scoped_key,
)
from sqs_jobs.worker.names import (
    CANCEL_REQUESTED_AT,
    CANCELLED_AT,
    DURABLE_RECORD_PREFIX,
    IDEMPOTENCY_KEY_PREFIX,
    NEXT_RETRY_AT,
    STARTED_AT,
    durable_record_id,
    idempotency_record_id,
)

# The record's partition key (Powertools' default `key_attr`) and what a result reader may read of a record: what
# a job's state, its result and its last error are read from. The CDK grant allows exactly these.
RECORD_KEY = "id"
RESULT_ATTRIBUTES = (
    RECORD_KEY,
    STATUS,
    EXPIRATION,
    IN_PROGRESS_EXPIRATION,
    RUNS,
    COMPLETED_RUN,
    DATA,
    STARTED_AT,
    LAST_ERROR_TYPE,
    LAST_ERROR,
    LAST_FAILED_AT,
    NEXT_RETRY_AT,
    PENDING_DEAD_LETTER,
    DEAD_LETTERED_AT,
    CANCELLED_AT,
    CANCEL_REQUESTED_AT,
    # A durable job's record (sqs_jobs.durable.record) has the same status, error and time attributes, and this.
    "ended_at",
)
# Every job key's record and durable job's record, and nothing else the table holds (a batch's, a unique window's,
# a rate limit's items, a durable sweep's).
RESULT_KEYS = (f"{IDEMPOTENCY_KEY_PREFIX}#*", f"{DURABLE_RECORD_PREFIX}*")
# How often a waiting read polls: from the first interval, doubling, up to the last.
FIRST_POLL_S = 0.1
LONGEST_POLL_S = 1.0


class JobState(StrEnum):
    """Where a published job stands, as its service sees it."""

    PENDING = "pending"  # no run has started: its message waits in the queue (or a delay, a debounce window)
    RUNNING = "running"
    RETRYING = "retrying"  # a run failed (or was held back); its message comes back for another
    SUCCEEDED = "succeeded"
    DEAD = "dead"  # dead-lettered with its last error (a redrive runs it again)
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # its record is past its expiry: how it ended is no longer kept


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED, JobState.EXPIRED})

_STATE_OF = {
    KeyState.RUNNING: JobState.RUNNING,
    KeyState.CANCEL_REQUESTED: JobState.RUNNING,
    KeyState.STALLED: JobState.RUNNING,
    KeyState.RETRYING: JobState.RETRYING,
    KeyState.DEAD_LETTER_PENDING: JobState.DEAD,
    KeyState.ENDING: JobState.DEAD,
    KeyState.COMPLETED: JobState.SUCCEEDED,
    KeyState.CANCELLED: JobState.CANCELLED,
}


def execution_state(status: str) -> JobState:
    """A durable execution's state, from its record's status (sqs_jobs.durable.record): running until it ends."""
    return {"SUCCEEDED": JobState.SUCCEEDED, "FAILED": JobState.DEAD}.get(status, JobState.RUNNING)


class ResultsNotConfiguredError(RuntimeError):
    """The publisher was built without a results reader (JobPublisher.from_stack(..., results_client=...))."""


@dataclass(frozen=True)
class JobResult:
    """A job's state and, once it succeeded, what it returned (`value`: its JSON as the worker kept it; None also
    when it returned None or its result could not be kept, docs/results.md). `error_type`/`error`: its last
    failure, while retrying and once dead or cancelled after one. `runs`: runs spent (succeeded: the run that
    succeeded). `remembered_until`: when its record expires, and with it the result."""

    job: str
    id: str
    key: str
    state: JobState
    value: Any = None
    runs: int = 0
    error_type: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    remembered_until: datetime | None = None

    @property
    def done(self) -> bool:
        """Whether the state is final: succeeded, dead, cancelled or expired (a dead job's redrive runs it again)."""
        return self.state in FINAL_STATES

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "id": self.id,
            "key": self.key,
            "state": self.state.value,
            "value": self.value,
            "runs": self.runs,
            "error_type": self.error_type,
            "error": self.error,
            "started_at": _iso(self.started_at),
            "remembered_until": _iso(self.remembered_until),
        }


def job_result(
    job: str, job_id: str, key: str, record: KeyRecord, now_s: float, *, forgotten_after_s: float | None = None
) -> JobResult:
    """The job's result as its record (read by the codec) says at `now_s`. `forgotten_after_s`: when a record of
    the job, had it run, would have expired (its publish plus its queue's record expiry): a key with no record
    after it is EXPIRED (DynamoDB's TTL deleted the record), not PENDING."""
    state = record.state(now_s)
    if state is KeyState.NEW:
        forgotten = record.found or (forgotten_after_s is not None and now_s > forgotten_after_s)
        return JobResult(job, job_id, key, JobState.EXPIRED if forgotten else JobState.PENDING)
    job_state = _STATE_OF[state]
    succeeded = job_state is JobState.SUCCEEDED
    return JobResult(
        job,
        job_id,
        key,
        job_state,
        value=_decoded(record.result) if succeeded else None,
        runs=(record.completed_run or 0) if succeeded else record.runs,
        error_type=None if succeeded else record.last_error_type,
        error=None if succeeded else record.last_error,
        started_at=_moment(record.started_at),
        remembered_until=_moment(record.expires_at),
    )


class JobResults:
    """Reads job results from the stack's idempotency table (`table`), with an injected DynamoDB client."""

    def __init__(
        self,
        dynamodb_client: Any,
        table: str,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dynamodb = dynamodb_client
        self._table = table
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic

    def read(
        self,
        job: str,
        job_id: str,
        *,
        key: str | None = None,
        tenant: str | None = None,
        wait_s: float | None = None,
        published_at: datetime | None = None,
        expiry_s: int | None = None,
        durable: bool = False,
    ) -> JobResult:
        """How job `job` published with ID `job_id` stands: its key is `<job>:<key or id>` (a tenant's
        `<job>@<tenant> <key or id>`), as the worker keys it; a job whose own `idempotency_key` derives another key
        is read by passing that key. `wait_s`: poll until the state is final or that many seconds have passed,
        then return the state as it is (check `done`). `published_at` and `expiry_s` (the job's queue's record
        expiry): a job with no record past both is EXPIRED, not PENDING. `durable`: a durable job, whose
        execution's own record says how it stands once the worker has started it."""
        checked_identifier("id", job_id)
        if key is not None:
            checked_identifier("key", key)
        scoped = scoped_key(job, key if key is not None else job_id, tenant)
        forgotten_after_s = (
            published_at.timestamp() + expiry_s if published_at is not None and expiry_s is not None else None
        )
        deadline = self._monotonic() + (wait_s or 0.0)
        interval = FIRST_POLL_S
        while True:
            result = job_result(
                job, job_id, scoped, self._record(scoped), self._clock(), forgotten_after_s=forgotten_after_s
            )
            if durable:
                result = self._execution(result, scoped)
            left = deadline - self._monotonic()
            if result.done or left <= 0:
                return result
            self._sleep(min(interval, left))
            interval = min(interval * 2, LONGEST_POLL_S)

    def _record(self, scoped: str) -> KeyRecord:
        record_id = idempotency_record_id(scoped)
        return KeyRecord.from_item(record_id, self._item(record_id))

    def _execution(self, started: JobResult, scoped: str) -> JobResult:
        """A durable job: as its execution's record says once the worker has started one, running until the
        execution ends (SUCCEEDED; FAILED, dead-lettered with its error); before that, as its key record says (a
        message dead-lettered unstarted). No value: the execution's result is Lambda's (GetDurableExecution)."""
        item = self._item(durable_record_id(scoped)) or {}
        status = item.get(STATUS, {}).get("S")
        if status is None:
            return started
        state = execution_state(status)
        started_at = item.get(STARTED_AT, {}).get("N")
        expires = item.get(EXPIRATION, {}).get("N")
        failed = state is JobState.DEAD
        return JobResult(
            started.job,
            started.id,
            started.key,
            state,
            runs=started.runs,
            error_type=item.get(LAST_ERROR_TYPE, {}).get("S") if failed else None,
            error=item.get(LAST_ERROR, {}).get("S") if failed else None,
            started_at=_moment(float(started_at)) if started_at is not None else started.started_at,
            remembered_until=_moment(float(expires)) if expires is not None else started.remembered_until,
        )

    def _item(self, record_id: str) -> dict[str, Any] | None:
        names = {f"#a{index}": name for index, name in enumerate(RESULT_ATTRIBUTES)}
        item: dict[str, Any] | None = self._dynamodb.get_item(
            TableName=self._table,
            Key={RECORD_KEY: {"S": record_id}},
            ConsistentRead=True,
            ProjectionExpression=", ".join(names),
            ExpressionAttributeNames=names,
        ).get("Item")
        return item


def _decoded(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:  # not the worker's JSON: what the record holds, as text
        return text


def _moment(epoch_s: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch_s, tz=UTC) if epoch_s is not None else None


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
