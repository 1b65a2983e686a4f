"""The job's life in view: which keys are running, retrying (or held) and cancelled, read from the runtime's own
records (sqs_jobs.worker.run_ledger) through the idempotency table's sparse index (`jobs-by-life`).

A record is in the index only while its key is in flight, so a list reads those and never a completed key. Cost of
one list: one Query per queue, state and shard (LIFE_SHARDS = 4), each reading at most `per_shard` records
(eventually consistent: 0.5 read units per 4 KB). The lists are as fresh as the index, which DynamoDB updates
asynchronously (usually within a second). Search (`job`, `text`) filters what was read: with more than
`per_shard` records in a shard, the page says it is `truncated` and a match may be past it.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqs_jobs.cli.job_lookup import Progress
from sqs_jobs.worker.key_life import KeyRecord, KeyState, split_key
from sqs_jobs.worker.names import (
    DURABLE_RECORD_PREFIX,
    FLOW_DEBOUNCE_PREFIX,
    FLOW_JOB,
    FLOW_KEY,
    LIFE,
    LIFE_AT,
    LIFE_INDEX,
    LIFE_SHARDS,
    LifeState,
    life_shard_partition,
)

PER_SHARD = 50
# Queries run side by side: a page's lists take about as long as its slowest query.
QUERY_THREADS = 8


def _moment(epoch_s: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch_s, tz=UTC) if epoch_s is not None else None


# How each state of a key's life is listed.
_LISTED_AS = {
    KeyState.RUNNING: LifeState.RUNNING,
    KeyState.CANCEL_REQUESTED: LifeState.RUNNING,
    KeyState.STALLED: LifeState.RUNNING,
    KeyState.RETRYING: LifeState.RETRYING,
    KeyState.DEAD_LETTER_PENDING: LifeState.RETRYING,
    KeyState.ENDING: LifeState.RETRYING,
    KeyState.CANCELLED: LifeState.CANCELLED,
}


@dataclass(frozen=True)
class JobInFlight:
    """One key in flight, as its record says."""

    queue: str
    state: LifeState
    job: str
    job_id: str
    key: str
    runs: int
    # Since when it runs (running), when it is due again (retrying), when it was cancelled (cancelled).
    at: datetime | None
    started_at: datetime | None
    run_by: str
    last_error_type: str
    last_error: str
    last_failed_at: datetime | None
    progress: Progress | None
    cancel_requested_at: datetime | None
    cancelled_by: str
    # A running key whose run's hold on it has passed: its run never reported back (a crash or a timeout).
    stalled: bool
    # What it waits for, when it is not a failed run's retry: a debounced publish's window ("" for none said).
    waiting_for: str = ""

    @classmethod
    def from_item(cls, item: dict[str, Any], now: datetime) -> JobInFlight:
        record_id = str(item.get("id", {}).get("S", ""))
        if record_id.startswith(DURABLE_RECORD_PREFIX):
            return cls.from_durable_item(item)
        if record_id.startswith(FLOW_DEBOUNCE_PREFIX):
            return cls.from_debounce_item(item)
        record = KeyRecord.from_item(record_id, item)
        listed = LifeState((record.life or "").split("#")[-2])
        key_state = record.state(now.timestamp())
        progress = Progress.of(record)
        return cls(
            queue=record.queue or "",
            # As the record says, which the index (updated asynchronously, and by older runtimes) may lag.
            state=_LISTED_AS.get(key_state, listed),
            job=record.job or "",
            job_id=record.job_id or "",
            key=record.job_key or "",
            runs=record.runs,
            at=_moment(record.life_at),
            started_at=_moment(record.started_at),
            run_by=record.run_by or "",
            last_error_type=record.last_error_type or "",
            last_error=record.last_error or "",
            last_failed_at=_moment(record.last_failed_at),
            # Only the current run's progress is its progress.
            progress=progress if progress is not None and progress.run == record.runs else None,
            cancel_requested_at=_moment(record.cancel_requested_at) or _moment(record.cancelled_at),
            cancelled_by=record.cancelled_by or "",
            stalled=key_state is KeyState.STALLED,
        )

    @classmethod
    def from_debounce_item(cls, item: dict[str, Any]) -> JobInFlight:
        """A debounced job's latest publish waiting out its window (sqs_jobs.worker.uniqueness), listed as due at
        the window's end until it fires; its ID is the key it is debounced by."""

        def text(name: str) -> str:
            return str(item.get(name, {}).get("S", ""))

        window_end = item.get(LIFE_AT, {}).get("N")
        flow_key = text(FLOW_KEY)  # the scoped key it is debounced by (`<job>:<key>`, a tenant's too)
        return cls(
            queue=text(LIFE).split("#")[0],
            state=LifeState.RETRYING,
            job=text(FLOW_JOB),
            job_id=split_key(flow_key)[2] if flow_key else "",
            key=flow_key,
            runs=0,
            at=_moment(float(window_end)) if window_end is not None else None,
            started_at=None,
            run_by="",
            last_error_type="",
            last_error="",
            last_failed_at=None,
            progress=None,
            cancel_requested_at=None,
            cancelled_by="",
            stalled=False,
            waiting_for="its debounce window (a later publish starts it again)",
        )

    @classmethod
    def from_durable_item(cls, item: dict[str, Any]) -> JobInFlight:
        """A durable job's execution, listed running from its start until it ends (sqs_jobs.durable.record); its
        progress says its steps done and the step it is in, or the event it waits for and until when."""
        from sqs_jobs.durable.record import DurableState

        state = DurableState.from_item(item)
        job, _, job_key = split_key(state.key) if state.key else ("", None, "")
        where = f"waiting for event {state.waiting_for!r}" if state.waiting_for else ""
        if where and state.waiting_until is not None:
            where += f" until {datetime.fromtimestamp(state.waiting_until, tz=UTC).isoformat(timespec='seconds')}"
        elif not where and state.step is not None:
            where = f"step {state.step}" + (f" (attempt {state.step_attempt})" if state.step_attempt else " (done)")
        note = "; ".join(part for part in ("step(s) done", where, state.note or "") if part)
        listed_at = item.get(LIFE_AT, {}).get("N")
        beat_at = _moment(state.beat_at)
        return cls(
            queue=str(item.get(LIFE, {}).get("S", "")).split("#")[0],
            state=LifeState.RUNNING,
            job=job,
            job_id=job_key,
            key=state.key,
            runs=state.generation + 1,
            at=_moment(float(listed_at)) if listed_at is not None else _moment(state.started_at),
            started_at=_moment(state.started_at),
            run_by=f"durable execution {state.execution_name or '?'}",
            last_error_type=state.last_error_type or "",
            last_error=state.last_error or "",
            last_failed_at=None,
            progress=Progress(float(state.steps_done), None, note, beat_at, state.generation + 1) if beat_at else None,
            cancel_requested_at=None,
            cancelled_by="",
            stalled=False,
        )

    @property
    def publisher_key(self) -> str:
        """The key as a publisher gives it (`--key`): the idempotency key without its `<job>:` (`<job>@<tenant> `)."""
        return split_key(self.key)[2] if self.key else ""

    @property
    def tenant(self) -> str | None:
        """The tenant whose job it is (`--tenant`), from its key; None: none."""
        return split_key(self.key)[1] if self.key else None

    def matches(self, job: str | None, text: str | None) -> bool:
        if job and self.job != job:
            return False
        if text:
            needle = text.casefold()
            return needle in self.job_id.casefold() or needle in self.key.casefold()
        return True

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "state": self.state.value,
            "job": self.job,
            "id": self.job_id,
            "key": self.publisher_key,
            "tenant": self.tenant,
            "idempotency_key": self.key,
            "runs": self.runs,
            "at": self.at,
            "started_at": self.started_at,
            "run_by": self.run_by,
            "last_error_type": self.last_error_type or None,
            "last_error": self.last_error or None,
            "last_failed_at": self.last_failed_at,
            "progress": self.progress.to_dict() if self.progress else None,
            "cancel_requested_at": self.cancel_requested_at,
            "cancelled_by": self.cancelled_by or None,
            "stalled": self.stalled,
            "waiting_for": self.waiting_for or None,
        }


@dataclass(frozen=True)
class InFlight:
    """What the lists read: the keys, whether a shard had more than was read, and the AWS calls it took."""

    jobs: list[JobInFlight]
    truncated: bool
    queries: int

    def of(self, state: LifeState) -> list[JobInFlight]:
        return [job for job in self.jobs if job.state is state]

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": [job.to_dict() for job in self.jobs], "truncated": self.truncated, "queries": self.queries}


def jobs_in_flight(
    dynamodb: Any,
    table: str,
    queues: Iterable[str],
    states: Iterable[LifeState] = tuple(LifeState),
    *,
    job: str | None = None,
    text: str | None = None,
    per_shard: int = PER_SHARD,
    now: datetime | None = None,
) -> InFlight:
    """The keys in flight of `queues` in `states`, those of `job` whose ID or key contains `text` (any case):
    running longest first, retrying soonest due first, cancelled newest first."""
    now = now or datetime.now(UTC)
    partitions = [
        (queue, state, life_shard_partition(queue, state, shard))
        for queue in queues
        for state in states
        for shard in range(LIFE_SHARDS)
    ]

    def query(target: tuple[str, LifeState, str]) -> tuple[list[dict[str, Any]], bool]:
        _, state, partition = target
        response = dynamodb.query(
            TableName=table,
            IndexName=LIFE_INDEX,
            KeyConditionExpression="#life = :life",
            ExpressionAttributeNames={"#life": LIFE},
            ExpressionAttributeValues={":life": {"S": partition}},
            ScanIndexForward=state is not LifeState.CANCELLED,
            Limit=per_shard,
        )
        return response.get("Items", []), "LastEvaluatedKey" in response

    with ThreadPoolExecutor(max_workers=QUERY_THREADS) as pool:
        answers = list(pool.map(query, partitions))
    found: list[JobInFlight] = []
    truncated = False
    for items, more in answers:
        truncated = truncated or more
        found += [entry for entry in (JobInFlight.from_item(item, now) for item in items) if entry.matches(job, text)]
    order = list(LifeState)
    newest_first = datetime.max.replace(tzinfo=UTC)

    def sort_key(entry: JobInFlight) -> tuple[int, float]:
        stamp = (entry.at or newest_first).timestamp()
        return order.index(entry.state), -stamp if entry.state is LifeState.CANCELLED else stamp

    return InFlight(jobs=sorted(found, key=sort_key), truncated=truncated, queries=len(partitions))
