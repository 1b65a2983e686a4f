"""Reading, redriving and discarding dead-lettered jobs, client side, safely.

- Reading never consumes: messages are received with a visibility timeout long enough for the scan and made
  visible again at once when it ends.
- Moving never loses: a message is deleted from the DLQ only after its copy was accepted by the target queue.
  A crash in between leaves a duplicate, harmless because jobs are idempotent on their business key.
- Discarding with an archive writes (and fsyncs) the JSON Lines record before the message is deleted.
- Evidence is what the runtime itself attached: `jobs.*` attributes count only on messages the queue's worker
  role sent (their SenderId); on any other message they are the producer's attributes, shown and redriven as
  such (sqs_jobs.worker.provenance).
- A redrive restores the producer's attributes: packed in the dead letter, or, when they could not fit it, read
  back from the attribute store it names (sqs_jobs.worker.attribute_store); a letter whose attributes can't
  be read stays in the DLQ.
- A queue with priority lanes (docs/priorities.md) has one DLQ for every lane: a redrive sends each dead letter back
  to the lane its evidence names (`jobs.source_queue`, the ARN of the queue its record came from), and any other
  (no evidence, a queue that is not one of its lanes) to the default lane's queue. Only this queue's lanes are
  ever a destination, whatever a message says.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, ClassVar, TextIO

from sqs_jobs.cli.discovery import LaneLocation, QueueLocation
from sqs_jobs.cli.errors import EXIT_USAGE, OperatorError
from sqs_jobs.envelope import tenant_of
from sqs_jobs.limits import SQS_BATCH_MAX
from sqs_jobs.specs import Catalog
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.attribute_store import StoredAttributes, StoredAttributesError, read_attributes
from sqs_jobs.worker.dlq_reader import DlqReader
from sqs_jobs.worker.names import NO_EVIDENCE
from sqs_jobs.worker.provenance import (
    STORED_ATTRIBUTES,
    Attributes,
    MessageAttributes,
    Provenance,
    from_received,
    portable,
)

# Long enough to scan a large DLQ in one pass; if jobctl dies, messages reappear after this.
SCAN_VISIBILITY_S = 300
# SQS's range for a move task's MaxNumberOfMessagesPerSecond.
MOVE_TASK_MAX_RATE = 500
# A move task's final states (before them: RUNNING, CANCELLING).
MOVE_TASK_FINAL = ("COMPLETED", "CANCELLED", "FAILED")
# How a person is shown a dead letter without a tenant: a space makes it no tenant's name (docs/envelope.md, rule 8).
NO_TENANT = "(no tenant)"


class DlqError(OperatorError):
    """A DLQ operation could not be done."""


class BadFilterError(DlqError):
    """A filter option is not usable."""

    exit_code: ClassVar[int] = EXIT_USAGE


class BadRateError(DlqError):
    """A rate that SQS's move task can't take."""

    exit_code: ClassVar[int] = EXIT_USAGE


class MoveTaskFailedError(DlqError):
    """SQS's move task ended FAILED; the message carries its FailureReason."""


class NoMoveTaskError(DlqError):
    """No move task of this DLQ is running (nothing to cancel or follow)."""


@dataclass(frozen=True)
class DeadLetter:
    """One message in a DLQ: its evidence (only when the runtime dead-lettered it: a message SQS's redrive policy
    moved, or anything else sent to the DLQ, has none) and its producer's own attributes."""

    message_id: str
    receipt_handle: str
    body: str
    sent_at: datetime | None
    evidence: dict[str, str]
    publisher_attributes: Attributes
    # A FIFO DLQ's message group: a redrive sends the message back in the same group.
    group_id: str | None = None

    @classmethod
    def from_message(cls, message: dict[str, Any], provenance: Provenance) -> DeadLetter:
        system = message.get("Attributes") or {}
        attributes = MessageAttributes.split(
            from_received(message.get("MessageAttributes") or {}),
            sent_by_runtime=provenance.sent_by_runtime(system.get("SenderId")),
        )
        sent = system.get("SentTimestamp")
        return cls(
            message_id=message["MessageId"],
            receipt_handle=message["ReceiptHandle"],
            body=message["Body"],
            sent_at=datetime.fromtimestamp(int(sent) / 1000, tz=UTC) if sent else None,
            evidence=attributes.bookkeeping,
            publisher_attributes=attributes.producer,
            group_id=system.get("MessageGroupId"),
        )

    def _envelope_field(self, name: str) -> str | None:
        try:
            body = json.loads(self.body)
        except (json.JSONDecodeError, RecursionError):
            return None
        value = body.get(name) if isinstance(body, dict) else None
        return value if isinstance(value, str) else None

    @property
    def job(self) -> str:
        return self.evidence.get(deadletter.JOB) or self._envelope_field("job") or "(unknown)"

    @property
    def tenant(self) -> str | None:
        """The tenant its body names (the envelope's rule), or None."""
        return tenant_of(self.body)

    @property
    def envelope_key(self) -> str | None:
        """The idempotency key the publisher chose, if it chose one."""
        return self._envelope_field("key")

    @property
    def entity_id(self) -> str:
        return self.evidence.get(deadletter.ID) or self._envelope_field("id") or "(unknown)"

    @property
    def error_type(self) -> str:
        return self.evidence.get(deadletter.ERROR_TYPE) or NO_EVIDENCE

    @property
    def error_message(self) -> str:
        return self.evidence.get(deadletter.ERROR_MESSAGE, "")

    @property
    def http_status(self) -> int | None:
        """The status of the failed HTTP call behind the error, when there was one (its evidence says)."""
        status = self.evidence.get(deadletter.HTTP, "").partition(" ")[0]
        return int(status) if status.isdigit() else None

    @property
    def http_body(self) -> str | None:
        """The start of that call's response body, as the worker kept it."""
        return self.evidence.get(deadletter.HTTP, "").partition(" ")[2] or None

    @property
    def stored_attributes(self) -> StoredAttributes | None:
        """Where the producer's attributes are when they could not travel in the dead letter (None: they are in
        `publisher_attributes`). A reference that can't be parsed raises StoredAttributesError."""
        reference = self.evidence.get(STORED_ATTRIBUTES)
        return StoredAttributes.parse(reference) if reference else None

    @property
    def failed_at(self) -> datetime | None:
        """When it was dead-lettered: the runtime's timestamp, else when SQS accepted it into the DLQ."""
        stamp = self.evidence.get(deadletter.LAST_FAILED_AT)
        if stamp:
            try:
                return datetime.fromisoformat(stamp)
            except ValueError:
                pass
        return self.sent_at

    def to_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "body": self.body,
            "job": self.job,
            "id": self.entity_id,
            "tenant": self.tenant,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "failure": self.evidence.get(deadletter.FAILURE),
            "attempts": int(self.evidence[deadletter.ATTEMPTS]) if deadletter.ATTEMPTS in self.evidence else None,
            "first_failed_at": self.evidence.get(deadletter.FIRST_FAILED_AT),
            "last_failed_at": self.failed_at.isoformat() if self.failed_at else None,
            "source_queue": self.evidence.get(deadletter.SOURCE_QUEUE),
            "traceback": self.evidence.get(deadletter.TRACEBACK),
            "http_status": self.http_status,
            "http_body": self.http_body,
            # JSON-ready: binary values as base64 text.
            "attributes": portable(self.publisher_attributes),
            # Where the rest of them are kept, when they did not fit the dead letter: a redrive restores them.
            "attributes_stored": self.evidence.get(STORED_ATTRIBUTES),
            "group_id": self.group_id,
        }


@dataclass(frozen=True)
class Filter:
    """Which dead letters an operation applies to; every given criterion must match."""

    error_type: str | None = None
    match: str | None = None
    job: str | None = None
    tenant: str | None = None

    def __post_init__(self) -> None:
        for name in ("error_type", "match", "job", "tenant"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise BadFilterError(f"--{name.replace('_', '-')} is empty; give a value or leave the option out")

    def matches(self, letter: DeadLetter) -> bool:
        if self.error_type is not None and letter.error_type != self.error_type:
            return False
        if self.job is not None and letter.job != self.job:
            return False
        if self.tenant is not None and letter.tenant != self.tenant:
            return False
        if self.match is not None:
            haystack = f"{letter.error_message}\n{letter.body}".lower()
            if self.match.lower() not in haystack:
                return False
        return True

    @property
    def empty(self) -> bool:
        return self.error_type is None and self.match is None and self.job is None and self.tenant is None


@dataclass
class MoveReport:
    moved: int = 0
    matched: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    moved_letters: list[DeadLetter] = field(default_factory=list)
    # Per destination queue's URL, how many moved there (a queue with priority lanes: per lane).
    moved_to: dict[str, int] = field(default_factory=dict)


class DeadLetterQueue:
    """One catalog queue's DLQ and the source queue it redrives to. `provenance` says whose messages carry the
    runtime's evidence (the queue's worker role); without it, none does. `dynamodb` gives a DynamoDB client, on
    first need, to read producer attributes the runtime had to store beside a dead letter. `lanes`: the queue's
    priority lanes (the default lane's queue is `source_url`), each dead letter redriven to the one its evidence
    names; empty for a queue without lanes."""

    def __init__(
        self,
        sqs: Any,
        dlq_url: str,
        source_url: str,
        provenance: Provenance | None = None,
        scan_visibility_s: int = SCAN_VISIBILITY_S,
        receive_wait_s: int = 1,
        dynamodb: Callable[[], Any] | None = None,
        lanes: Iterable[LaneLocation] = (),
    ) -> None:
        self._sqs = sqs
        self._dynamodb = dynamodb
        self.dlq_url = dlq_url
        self.source_url = source_url
        self.provenance = provenance or Provenance.of(())
        self._visibility = scan_visibility_s
        self._wait_s = receive_wait_s
        self.lanes = tuple(lanes)
        # A lane's queue by what evidence may name it by: its ARN (the record's eventSourceARN), or its URL.
        self._lane_urls = {key: lane.url for lane in self.lanes for key in (lane.arn, lane.url)}

    @classmethod
    def of(cls, sqs: Any, where: QueueLocation, **options: Any) -> DeadLetterQueue:
        """A deployed queue's DLQ (`sqs_jobs.cli.discovery`), trusting as evidence only what its worker role sent."""
        return cls(sqs, where.dlq_url, where.url, Provenance.of([where.worker_role_id]), lanes=where.lanes, **options)

    def destination(self, letter: DeadLetter) -> str:
        """The URL of the queue a redrive sends `letter` to: the lane its evidence names, when that is one of this
        queue's lanes; else the queue's own (its default lane's). Evidence is only what the worker role sent, and
        only this queue's lanes are looked up, so no attribute sends a message anywhere else."""
        named = letter.evidence.get(deadletter.SOURCE_QUEUE)
        return self._lane_urls.get(named, self.source_url) if named else self.source_url

    def lane_of(self, url: str) -> str | None:
        """The name of the lane whose queue is `url`; None for a queue without lanes (or a URL of none of them)."""
        return next((lane.name for lane in self.lanes if lane.url == url), None)

    def destinations(self, letters: Iterable[DeadLetter]) -> dict[str, int]:
        """How many of `letters` a redrive sends to each queue (URL), in the lanes' order, the most urgent first."""
        counts: dict[str, int] = {}
        for letter in letters:
            url = self.destination(letter)
            counts[url] = counts.get(url, 0) + 1
        order = [lane.url for lane in self.lanes]
        return dict(sorted(counts.items(), key=lambda item: order.index(item[0]) if item[0] in order else -1))

    def restore(self, letter: DeadLetter) -> DeadLetter:
        """`letter` with all its producer's attributes, those the runtime stored beside it read back.
        StoredAttributesError when they can't be."""
        reference = letter.stored_attributes
        if reference is None:
            return letter
        if self._dynamodb is None:
            raise StoredAttributesError(
                f"its producer's attributes are stored in DynamoDB table {reference.table}, and no DynamoDB client "
                "was given to read them"
            )
        stored = read_attributes(self._dynamodb(), reference)
        return dataclasses.replace(letter, publisher_attributes={**stored, **letter.publisher_attributes})

    def _archived(self, letter: DeadLetter) -> DeadLetter:
        """What an archive keeps: the letter with its stored attributes when they can be read, else with the
        reference to them (they outlive the DLQ's retention)."""
        try:
            return self.restore(letter)
        except StoredAttributesError:
            return letter

    def _reader(self) -> DlqReader:
        # One per call: a reader remembers what it received, and this object may live as long as the console.
        return DlqReader(self._sqs, self.dlq_url, visibility_s=self._visibility, wait_s=self._wait_s)

    def depth(self) -> int:
        return self._reader().depth()

    def _scan(self, limit: int | None = None) -> Iterator[list[DeadLetter]]:
        """Batches of messages, each received once per scan; the caller must release or delete every one."""
        for batch in self._reader().scan(limit=limit):
            yield [DeadLetter.from_message(message, self.provenance) for message in batch]

    def release(self, letters: Iterable[DeadLetter]) -> None:
        """Make messages visible again now, unchanged."""
        self._reader().release(letter.receipt_handle for letter in letters)

    def peek(self, limit: int | None = None, progress: Callable[[int], None] | None = None) -> list[DeadLetter]:
        """Every message (up to `limit`) without consuming any: all are visible again when this returns.
        `progress` is told the size of each batch received."""
        letters: list[DeadLetter] = []
        try:
            for batch in self._scan(limit):
                letters.extend(batch)
                if progress is not None:
                    progress(len(batch))
        finally:
            self.release(letters)
        return letters[:limit] if limit is not None else letters

    def find(self, message_id: str, progress: Callable[[int], None] | None = None) -> DeadLetter | None:
        """The message with this ID, read without consuming it: the scan stops at the batch that holds it (an
        operator's look at one letter of a deep DLQ reads only as far as it), and everything read is released."""
        received: list[DeadLetter] = []
        try:
            for batch in self._scan():
                received.extend(batch)
                if progress is not None:
                    progress(len(batch))
                found = next((letter for letter in batch if letter.message_id == message_id), None)
                if found is not None:
                    return found
        finally:
            self.release(received)
        return None

    def _chosen_batches(
        self, chosen: Filter, limit: int | None, only: set[str] | None, kept: list[DeadLetter]
    ) -> Iterator[list[DeadLetter]]:
        """Scan, yielding each batch's chosen messages; the others go to `kept`, for the caller to release.

        `only`: the message IDs chosen beforehand (a `peek`). Pass it when workers are running: a redriven job that
        fails again comes back to the DLQ as a new message, and a scan without it would take that one too, and
        again, for ever."""
        pending = set(only) if only is not None else None
        taken = 0
        for batch in self._scan():
            matching = [
                letter
                for letter in batch
                if chosen.matches(letter) and (pending is None or letter.message_id in pending)
            ]
            selected = matching if limit is None else matching[: max(0, limit - taken)]
            kept.extend(letter for letter in batch if letter not in selected)
            taken += len(selected)
            if selected:
                yield selected
            if pending is not None:
                pending -= {letter.message_id for letter in selected}
                if not pending:
                    return
            if limit is not None and taken >= limit:
                return

    def move(
        self,
        chosen: Filter,
        limit: int | None = None,
        rate_per_s: float | None = None,
        progress: Callable[[int], None] | None = None,
        target_url: str | None = None,
        only: set[str] | None = None,
    ) -> MoveReport:
        """Copy matching messages to the source queue (each to its lane's, `destination`; all to `target_url` when
        given), then delete each from the DLQ."""
        report = MoveReport()
        kept: list[DeadLetter] = []
        throttle = _Throttle(rate_per_s)
        try:
            for selected in self._chosen_batches(chosen, limit, only, kept):
                report.matched += len(selected)
                throttle.wait(len(selected))
                by_target: dict[str, list[DeadLetter]] = {}
                for letter in selected:
                    by_target.setdefault(target_url or self.destination(letter), []).append(letter)
                moved = sum(
                    self._copy_then_delete(letters, target, report, kept) for target, letters in by_target.items()
                )
                if progress:
                    progress(moved)
        finally:
            self.release(kept)
        return report

    def _copy_then_delete(
        self, letters: list[DeadLetter], target_url: str, report: MoveReport, kept: list[DeadLetter]
    ) -> int:
        restored: list[DeadLetter] = []
        for letter in letters:
            try:
                restored.append(self.restore(letter))
            except StoredAttributesError as error:
                kept.append(letter)  # without its producer's attributes it would not be the same message
                report.failed.append({"message_id": letter.message_id, "error": str(error)})
        letters = restored
        if not letters:
            return 0
        fifo = target_url.endswith(".fifo")  # a FIFO queue's name ends in .fifo (SQS's CreateQueue)
        sent = self._sqs.send_message_batch(
            QueueUrl=target_url, Entries=[_redrive_entry(str(i), letter, fifo) for i, letter in enumerate(letters)]
        )
        copied = [letters[int(item["Id"])] for item in sent.get("Successful", [])]
        for failure in sent.get("Failed", []):
            letter = letters[int(failure["Id"])]
            kept.append(letter)  # not copied: it stays in the DLQ
            report.failed.append({"message_id": letter.message_id, "error": failure.get("Message", failure["Code"])})
        self.delete(copied)
        report.moved += len(copied)
        report.moved_letters.extend(copied)
        if copied:
            report.moved_to[target_url] = report.moved_to.get(target_url, 0) + len(copied)
        return len(copied)

    def delete(self, letters: list[DeadLetter]) -> None:
        for start in range(0, len(letters), SQS_BATCH_MAX):
            chunk = letters[start : start + SQS_BATCH_MAX]
            response = self._sqs.delete_message_batch(
                QueueUrl=self.dlq_url,
                Entries=[{"Id": str(i), "ReceiptHandle": letter.receipt_handle} for i, letter in enumerate(chunk)],
            )
            if response.get("Failed"):
                raise DlqError(f"could not delete {len(response['Failed'])} message(s) from the DLQ")

    def discard(
        self,
        chosen: Filter,
        archive: IO[str] | None = None,
        limit: int | None = None,
        progress: Callable[[int], None] | None = None,
        only: set[str] | None = None,
    ) -> list[DeadLetter]:
        """Delete matching messages, each written to `archive` (JSON Lines, synced) before its deletion."""
        discarded: list[DeadLetter] = []
        kept: list[DeadLetter] = []
        try:
            for selected in self._chosen_batches(chosen, limit, only, kept):
                if archive is not None:
                    for letter in selected:
                        archive.write(json.dumps(self._archived(letter).to_dict(), sort_keys=True) + "\n")
                    archive.flush()
                    os.fsync(archive.fileno())
                self.delete(selected)
                discarded.extend(selected)
                if progress:
                    progress(len(selected))
        finally:
            self.release(kept)
        return discarded


@dataclass(frozen=True)
class MoveTaskStatus:
    """One ListMessageMoveTasks entry."""

    status: str
    moved: int
    to_move: int | None
    failure_reason: str | None
    handle: str | None

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> MoveTaskStatus:
        to_move = entry.get("ApproximateNumberOfMessagesToMove")
        return cls(
            status=str(entry.get("Status", "")),
            moved=int(entry.get("ApproximateNumberOfMessagesMoved", 0)),
            to_move=int(to_move) if to_move is not None else None,
            failure_reason=entry.get("FailureReason"),
            handle=entry.get("TaskHandle"),
        )

    @property
    def final(self) -> bool:
        return self.status in MOVE_TASK_FINAL


class MoveTasks:
    """SQS's own redrive of one DLQ: StartMessageMoveTask, always naming the destination.

    The runtime dead-letters with SendMessage (that is how its evidence travels), so SQS never recorded a source
    queue for those messages: a task without DestinationArn - which is also what the console's "Redrive to
    source queue(s)" starts - has nowhere to send them. The destination here is the queue's own source queue."""

    def __init__(self, sqs: Any, dlq_arn: str, destination_arn: str) -> None:
        self._sqs = sqs
        self.dlq_arn = dlq_arn
        self.destination_arn = destination_arn

    @staticmethod
    def check_rate(rate_per_s: float | None) -> int | None:
        """SQS takes a whole number of messages a second, 1 to 500."""
        if rate_per_s is None:
            return None
        if rate_per_s != int(rate_per_s) or not 1 <= rate_per_s <= MOVE_TASK_MAX_RATE:
            raise BadRateError(
                f"--rate {rate_per_s:g} can't be a move task's rate: SQS takes a whole number of messages a second "
                f"from 1 to {MOVE_TASK_MAX_RATE}"
            )
        return int(rate_per_s)

    def start(self, rate_per_s: int | None = None) -> str:
        request: dict[str, Any] = {"SourceArn": self.dlq_arn, "DestinationArn": self.destination_arn}
        if rate_per_s is not None:
            request["MaxNumberOfMessagesPerSecond"] = rate_per_s
        return str(self._sqs.start_message_move_task(**request)["TaskHandle"])

    def latest(self) -> MoveTaskStatus | None:
        """The DLQ's most recent move task (one at a time may run)."""
        entries = self._sqs.list_message_move_tasks(SourceArn=self.dlq_arn, MaxResults=1).get("Results", [])
        return MoveTaskStatus.from_entry(entries[0]) if entries else None

    def follow(
        self,
        on_progress: Callable[[MoveTaskStatus], None] | None = None,
        poll_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> MoveTaskStatus:
        """Poll the latest task until it ends; raise MoveTaskFailedError with SQS's reason if it failed."""
        while True:
            task = self.latest()
            if task is None:
                raise NoMoveTaskError(f"no move task found for {self.dlq_arn}")
            if on_progress is not None:
                on_progress(task)
            if task.final:
                if task.status == "FAILED":
                    raise MoveTaskFailedError(
                        f"the move task failed after moving {task.moved} message(s): "
                        f"{task.failure_reason or 'SQS gave no reason'}"
                    )
                return task
            sleep(poll_s)

    def cancel(self) -> MoveTaskStatus:
        """Cancel the running task; messages it has not moved yet stay in the DLQ."""
        task = self.latest()
        if task is None or task.status != "RUNNING" or not task.handle:
            state = f"the latest is {task.status}" if task else "there is none"
            raise NoMoveTaskError(f"no move task is running for {self.dlq_arn} ({state})")
        self._sqs.cancel_message_move_task(TaskHandle=task.handle)
        return task


def _redrive_entry(entry_id: str, letter: DeadLetter, fifo: bool) -> dict[str, Any]:
    """SendMessageBatch's entry for a dead letter going back: its body and producer's attributes, and its message
    group: on a FIFO queue its order's, deduplicated on its DLQ message ID so that a retried redrive of it is a
    no-op; on a standard queue its tenant's (fair queues), which takes no deduplication ID."""
    entry: dict[str, Any] = {"Id": entry_id, "MessageBody": letter.body}
    if letter.publisher_attributes:
        entry["MessageAttributes"] = letter.publisher_attributes
    group = letter.group_id if fifo else letter.group_id or letter.tenant
    if group:
        entry["MessageGroupId"] = group
    if fifo and group:
        entry["MessageDeduplicationId"] = letter.message_id
    return entry


class _Throttle:
    """At most `rate` messages a second, on average."""

    def __init__(self, rate_per_s: float | None) -> None:
        self._rate = rate_per_s
        self._start = time.monotonic()
        self._count = 0

    def wait(self, messages: int) -> None:
        if not self._rate:
            return
        self._count += messages
        due = self._start + self._count / self._rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def lane_counts(dead: DeadLetterQueue, counts: dict[str, int]) -> dict[str, int] | None:
    """Per priority lane, how many of `counts` (per destination queue URL: `destinations`, `MoveReport.moved_to`);
    None for a queue without lanes."""
    if not dead.lanes:
        return None
    return {str(dead.lane_of(url)): count for url, count in counts.items()}


def not_idempotent(letters: Iterable[DeadLetter], catalog: Catalog) -> list[str]:
    """The jobs among `letters` a redrive may run twice: marked not idempotent in the catalog, or unknown to it."""
    unsafe = set()
    for letter in letters:
        try:
            if not catalog.queue_for_job(letter.job).job(letter.job).idempotent:
                unsafe.add(letter.job)
        except KeyError:
            unsafe.add(letter.job)
    return sorted(unsafe)


def group_key(letter: DeadLetter) -> tuple[str, str, str]:
    """The error group a dead letter belongs to: its error type, its message with the varying parts blanked, and
    the failed HTTP call's status, so a 404 (bad data: discard) and a 401 (a bad key: fix, then redrive) that read
    alike are never one group."""
    status = letter.http_status
    return (letter.error_type, error_pattern(letter.error_message), "" if status is None else str(status))


# Quoted values and whole numbers; digits inside a word (a code point's U+001B, a version's v2) stay.
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|\b\d+\b")


def error_pattern(message: str) -> str:
    """An error message with its quoted values and numbers blanked, so one error's occurrences group together."""
    return _VARYING.sub("…", message)


def group(letters: Iterable[DeadLetter], by: str) -> list[dict[str, Any]]:
    """Group dead letters by error (type and message), job, tenant (None: none named), or day: count, first and
    last seen, a sample."""
    keyed: dict[tuple[str, ...], list[DeadLetter]] = {}
    for letter in letters:
        if by == "error":
            key: tuple[str, ...] = group_key(letter)
        elif by == "job":
            key = (letter.job,)
        elif by == "tenant":
            key = (letter.tenant or "",)
        elif by == "day":
            key = (letter.failed_at.date().isoformat() if letter.failed_at else "(unknown)",)
        else:
            raise BadFilterError(f"unknown grouping {by!r}; accepted: error, job, tenant, day")
        keyed.setdefault(key, []).append(letter)
    groups = []
    for key, members in keyed.items():
        stamps = sorted(letter.failed_at for letter in members if letter.failed_at)
        entry: dict[str, Any] = {
            "count": len(members),
            "first_seen": stamps[0].isoformat() if stamps else None,
            "last_seen": stamps[-1].isoformat() if stamps else None,
            "sample_message_id": members[0].message_id,
            "jobs": sorted({letter.job for letter in members}),
        }
        if by == "error":
            entry["error_type"], entry["error_message"] = key[0], key[1]
            entry["http_status"] = int(key[2]) if key[2] else None
        elif by == "tenant":
            entry["tenant"] = key[0] or None
        else:
            entry[by] = key[0]
        groups.append(entry)
    return sorted(groups, key=lambda entry: (-entry["count"], str(entry.get("last_seen"))))


@dataclass
class Verification:
    """What became of redriven jobs: drained from the source queue, and how many failed again."""

    drained: bool
    returned_to_dlq: int
    returned: list[DeadLetter]
    waited_s: float


def queue_busy(sqs: Any, url: str) -> int:
    """Messages visible, in flight or delayed: work the queue still holds."""
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(attributes.get(name, "0")) for name in names)


def verify(
    sqs: Any,
    dlq: DeadLetterQueue,
    moved: list[DeadLetter],
    since: datetime,
    timeout_s: float,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Verification:
    """Follow redriven jobs: wait until the queues they went to (each one's lane's) hold no work, then count those
    back in the DLQ."""
    started = clock()
    drained = False
    targets = list(dlq.destinations(moved)) or [dlq.source_url]
    while True:
        if all(queue_busy(sqs, url) == 0 for url in targets):
            drained = True
            break
        if clock() - started >= timeout_s:
            break
        sleep(poll_s)
    keys = {(letter.job, letter.entity_id) for letter in moved}
    returned = [
        letter
        for letter in dlq.peek()
        if (letter.job, letter.entity_id) in keys and letter.failed_at is not None and letter.failed_at >= since
    ]
    return Verification(drained=drained, returned_to_dlq=len(returned), returned=returned, waited_s=clock() - started)


def open_archive(path: Path) -> TextIO:
    """An archive of discarded dead letters, opened to append: created readable by its owner only (0600, its
    folder 0700), since it holds the messages' bodies and evidence. An existing file keeps its mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return open(descriptor, "a", encoding="utf-8")
