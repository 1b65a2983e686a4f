"""What the console reads and does, on the same target and with the same operations as the other commands:
`sqs_jobs.cli.status`, `sqs_jobs.cli.dlq`, `sqs_jobs.cli.queue_control`, `sqs_jobs.cli.job_lookup`. No AWS call happens
in a template."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqs_jobs.cli import queue_control
from sqs_jobs.cli.batch_lookup import BatchView
from sqs_jobs.cli.console.charts import Series, queue_charts
from sqs_jobs.cli.console.operations import Operation
from sqs_jobs.cli.discovery import QueueLocation, find_queues
from sqs_jobs.cli.dlq import (
    DeadLetter,
    DeadLetterQueue,
    DlqError,
    Filter,
    group,
    group_key,
    lane_counts,
    not_idempotent,
    open_archive,
    verify,
)
from sqs_jobs.cli.job_cancel import (
    CancelResult,
    cancel_durable,
    cancel_job,
    operator_identity,
    stop_execution_with,
    target_for,
    withdraw,
    withdraw_durable,
)
from sqs_jobs.cli.job_life import InFlight, jobs_in_flight
from sqs_jobs.cli.job_lookup import JobLookup, idempotency_table, lookup
from sqs_jobs.cli.schedule_list import Schedules, list_schedules
from sqs_jobs.cli.status import QueueStatus, queue_status
from sqs_jobs.specs import Catalog, QueueSpec

# How long a page waits for its turn at a DLQ another request is reading or changing before it says so.
DLQ_WAIT_S = 30.0
# How long a redrive's verification follows the moved jobs before it reports what it saw.
VERIFY_TIMEOUT_S = 120
# The jobs page reads at most this many records per index shard, and this many schedules.
IN_FLIGHT_PER_SHARD = 50
SCHEDULES_SHOWN = 50


def group_id(letter: DeadLetter) -> str:
    """A short, URL-safe name of a dead letter's error group."""
    return hashlib.sha256("\x00".join(group_key(letter)).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class QueueOverview:
    spec: QueueSpec
    status: QueueStatus
    chart_start: datetime
    chart_end: datetime
    charts: list[Series]


@dataclass(frozen=True)
class DeadLetterGroup:
    id: str
    summary: dict[str, Any]
    letters: list[DeadLetter]


@dataclass(frozen=True)
class Selection:
    """The dead letters an action applies to, as the preview showed them."""

    queue: str
    letters: list[DeadLetter]
    not_idempotent: list[str]
    # A queue with priority lanes: how many a redrive sends back to each lane (each to the one its evidence names).
    lanes: dict[str, int] | None = None

    @property
    def ids(self) -> list[str]:
        return [letter.message_id for letter in self.letters]


class DlqBusyError(DlqError):
    """Another request has been reading or changing this DLQ for longer than a page may wait."""


class ConsoleBackend:
    def __init__(
        self,
        client: Callable[[str], Any],
        stack: str,
        catalog: Catalog,
        dlq_wait_s: float = DLQ_WAIT_S,
        durable_api: Callable[[], Any] | None = None,
    ) -> None:
        """`durable_api`: the Lambda client durable executions are stopped with (the local engine's, there);
        default: `client("lambda")`."""
        self._client = client
        self._durable_api = durable_api or (lambda: client("lambda"))
        self.stack = stack
        self.catalog = catalog
        self._dlq_wait_s = dlq_wait_s
        # One reader or writer of a DLQ at a time: reading one hands each message back after a moment, and two
        # scans at once each miss what the other holds (a view of 0 dead letters of 11, a preview of 0 of 13).
        self._dlq_locks = {name: threading.Lock() for name in catalog.queue_names}

    @contextmanager
    def _dlq_turn(self, queue: str) -> Iterator[None]:
        lock = self._dlq_locks[self.catalog.queue(queue).name]
        if not lock.acquire(timeout=self._dlq_wait_s):
            raise DlqBusyError(
                f"the DLQ of {queue!r} has been busy with another request for {self._dlq_wait_s:.0f}s; try again"
            )
        try:
            yield
        finally:
            lock.release()

    def _locations(self) -> dict[str, QueueLocation]:
        return find_queues(self._client("ssm"), self.stack, self.catalog)

    def _where(self, queue: str) -> tuple[QueueSpec, QueueLocation]:
        spec = self.catalog.queue(queue)
        return spec, self._locations()[spec.name]

    def _dlq(self, where: QueueLocation) -> DeadLetterQueue:
        return DeadLetterQueue.of(
            self._client("sqs"), where, receive_wait_s=0, dynamodb=lambda: self._client("dynamodb")
        )

    # Reading

    def overview(self, now: datetime | None = None) -> list[QueueOverview]:
        now = now or datetime.now(UTC)
        sqs, cloudwatch, lambda_client = self._client("sqs"), self._client("cloudwatch"), self._client("lambda")
        found = []
        for name, where in self._locations().items():
            spec = self.catalog.queue(name)
            status = queue_status(sqs, cloudwatch, spec, where, now=now, lambda_client=lambda_client)
            start, charts = queue_charts(cloudwatch, spec, _queue_name(where.url), _queue_name(where.dlq_url), now=now)
            found.append(QueueOverview(spec=spec, status=status, chart_start=start, chart_end=now, charts=charts))
        return found

    def status(self, queue: str) -> QueueStatus:
        """The queue's status, with its flow limits and what their store holds now (a queue page's)."""
        spec, where = self._where(queue)
        limits = self.catalog.flow_limits(spec.name)
        return queue_status(
            self._client("sqs"),
            self._client("cloudwatch"),
            spec,
            where,
            lambda_client=self._client("lambda"),
            limits=limits,
            dynamodb=self._client("dynamodb") if limits else None,
        )

    def dead_letters(self, queue: str) -> list[DeadLetter]:
        _, where = self._where(queue)
        return self._peek(queue, where)

    def _peek(self, queue: str, where: QueueLocation) -> list[DeadLetter]:
        with self._dlq_turn(queue):
            return self._dlq(where).peek()

    def groups(self, letters: list[DeadLetter]) -> list[DeadLetterGroup]:
        members: dict[str, list[DeadLetter]] = {}
        for letter in letters:
            members.setdefault(group_id(letter), []).append(letter)
        summaries = group(letters, by="error")
        by_sample = {entry["sample_message_id"]: entry for entry in summaries}
        found = [
            DeadLetterGroup(id=gid, summary=by_sample[items[0].message_id], letters=items)
            for gid, items in members.items()
        ]
        return sorted(found, key=lambda item: -len(item.letters))

    def letter(self, queue: str, message_id: str) -> DeadLetter | None:
        _, where = self._where(queue)
        with self._dlq_turn(queue):
            return self._dlq(where).find(message_id)

    def find_job(self, queue: str, job: str, entity_id: str, key: str | None, tenant: str | None = None) -> JobLookup:
        spec, where = self._where(queue)
        return lookup(self._client, spec, where, job, entity_id, key, tenant=tenant)

    def find_batch(self, batch_id: str) -> BatchView:
        """A batch's members by state, callbacks and times (sqs_jobs.cli.batch_lookup)."""
        from sqs_jobs.cli.batch_lookup import batch_table, look_up_batch

        return look_up_batch(self._client("dynamodb"), batch_table(self._client("ssm"), self.stack), batch_id)

    def _idempotency_table(self) -> str:
        """The table the workers keep their records in (one per stack), from the first queue's worker."""
        first = next(iter(self._locations().values()))
        return idempotency_table(self._client("lambda"), first.arn)

    def in_flight(self, job: str | None = None, text: str | None = None) -> InFlight:
        """The keys in flight of every queue (sqs_jobs.cli.job_life), those of `job` matching `text`."""
        return jobs_in_flight(
            self._client("dynamodb"),
            self._idempotency_table(),
            self.catalog.queue_names,
            job=job,
            text=text,
            per_shard=IN_FLIGHT_PER_SHARD,
        )

    def dead_letters_matching(self, job: str | None, text: str | None) -> list[tuple[str, DeadLetter]]:
        """The dead letters of `job` (every queue's, without one) whose ID or body contains `text` (any case): a
        scan of each DLQ searched, one at a time as every DLQ read is."""
        queues = [self.catalog.queue_for_job(job).name] if job else list(self.catalog.queue_names)
        needle = (text or "").casefold()
        found = []
        for queue in queues:
            for letter in self.dead_letters(queue):
                if job and letter.job != job:
                    continue
                if needle and needle not in letter.entity_id.casefold() and needle not in letter.body.casefold():
                    continue
                found.append((queue, letter))
        return found

    def schedules(self) -> Schedules:
        return list_schedules(self._client("scheduler"), self.stack, limit=SCHEDULES_SHOWN)

    def cancel(
        self, job: str, entity_id: str, key: str | None, *, undo: bool = False, tenant: str | None = None
    ) -> CancelResult:
        """`jobctl job cancel` (or `--undo`) from the console, as the operator whose credentials it runs on."""
        spec = self.catalog.queue_for_job(job)
        target = target_for(spec, job, entity_id, key, tenant)
        dynamodb = self._client("dynamodb")
        if spec.job(job).durable is not None:  # its durable record, and its execution (sqs_jobs.cli.job_cancel)
            if undo:
                return withdraw_durable(dynamodb, self._idempotency_table(), target)
            stop = stop_execution_with(self._durable_api())
            by = operator_identity(self._client("sts"))
            return cancel_durable(dynamodb, self._idempotency_table(), target, by, stop)[0]
        if undo:
            return withdraw(dynamodb, self._idempotency_table(), target)
        return cancel_job(dynamodb, self._idempotency_table(), target, operator_identity(self._client("sts")))

    def select(self, queue: str, *, group: str | None = None, ids: list[str] | None = None) -> Selection:
        """The dead letters of a group, of explicit message IDs, or (neither) all of them."""
        _, where = self._where(queue)
        letters = self._peek(queue, where)
        if group is not None:
            letters = [letter for letter in letters if group_id(letter) == group]
        elif ids is not None:
            wanted = set(ids)
            letters = [letter for letter in letters if letter.message_id in wanted]
        dead = self._dlq(where)
        return Selection(
            queue=queue,
            letters=letters,
            not_idempotent=not_idempotent(letters, self.catalog),
            lanes=lane_counts(dead, dead.destinations(letters)),
        )

    # Acting

    def pause(self, queue: str) -> list[queue_control.Mapping]:
        _, where = self._where(queue)
        return queue_control.pause(self._client("lambda"), *(source.arn for source in where.sources))

    def resume(self, queue: str) -> list[queue_control.Mapping]:
        _, where = self._where(queue)
        return queue_control.resume(self._client("lambda"), *(source.arn for source in where.sources))

    def redrive(self, queue: str, ids: list[str], rate_per_s: float | None, operation: Operation) -> dict[str, Any]:
        """The CLI's redrive, client side: copy then delete each chosen message, at most `rate_per_s`, then
        follow the moved jobs and count those that came back to the DLQ."""
        _, where = self._where(queue)
        dead = self._dlq(where)
        since = datetime.now(UTC)
        operation.enter("moving")
        with self._dlq_turn(queue):
            report = dead.move(Filter(), rate_per_s=rate_per_s, progress=operation.advance, only=set(ids))
        checked = None
        if report.moved:
            operation.enter("verifying: waiting for the moved jobs to be processed")
            checked = verify(self._client("sqs"), dead, report.moved_letters, since=since, timeout_s=VERIFY_TIMEOUT_S)
        lanes = lane_counts(dead, report.moved_to)
        return {
            "moved": report.moved,
            **({"lanes": lanes} if lanes is not None else {}),
            "asked": len(ids),
            "failed": report.failed,
            "verified": None if checked is None else checked.drained,
            "returned_to_dlq": None if checked is None else checked.returned_to_dlq,
            "returned": [] if checked is None else [letter.to_dict() for letter in checked.returned],
            "problem": bool(report.failed) or bool(checked and (checked.returned_to_dlq or not checked.drained)),
        }

    def discard(self, queue: str, ids: list[str], archive: Path, operation: Operation) -> dict[str, Any]:
        """Delete the chosen messages, each written to `archive` (JSON Lines, synced to disk) before its deletion,
        as `jobctl dlq discard --archive` does: the copy exists before the message is gone."""
        _, where = self._where(queue)
        operation.enter("discarding")
        with self._dlq_turn(queue), open_archive(archive) as sink:
            discarded = self._dlq(where).discard(Filter(), archive=sink, progress=operation.advance, only=set(ids))
        operation.archive = str(archive)
        return {"discarded": len(discarded), "asked": len(ids), "archive": str(archive), "problem": False}


def _queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
