"""The regular DLQ review: read every queue's DLQ without consuming it and publish one summary to the alarm topic.

Reading never consumes: messages are received with a short visibility timeout and made visible again as soon as
the queue's scan ends (as `jobctl dlq list` does). Each scan is bounded (`MAX_READ_PER_QUEUE` messages, and the
whole review `SCAN_BUDGET_S`), so counts past the bound are "at least". Error types are the runtime's evidence,
believed only on messages the queue's worker role sent (sqs_jobs.worker.provenance).

One summary is published on every run, empty DLQs included: silence means the review did not run. A DLQ that
can't be read is reported as such; a summary that can't be published fails the run, which is then retried.
The envelope's ID is the scheduled time, so a firing delivered twice publishes once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqs_jobs.envelope import Envelope
from sqs_jobs.maintenance.dlq_summary import QueueReview, stack_of, summarize
from sqs_jobs.worker.deadletter import ERROR_TYPE
from sqs_jobs.worker.dlq_reader import DlqReader
from sqs_jobs.worker.errors import PermanentError, TransientError
from sqs_jobs.worker.jobs import JobContext
from sqs_jobs.worker.names import NO_EVIDENCE
from sqs_jobs.worker.provenance import MessageAttributes, Provenance, from_received

# Long enough for one queue's scan (a receive takes milliseconds); if the run dies, messages reappear after it.
SCAN_VISIBILITY_S = 60
MAX_READ_PER_QUEUE = 1000
# The whole review's reading, well inside the job's time limit (half the maintenance queue's timeout), so the
# summary is always published.
SCAN_BUDGET_S = 30.0
# A receive waits this long for messages (long polling asks every SQS server, not a sample of them).
RECEIVE_WAIT_S = 1


class DeadLetterQueuesResourceError(PermanentError):
    """The `dead_letter_queues` resource is not the JSON the stack writes: a deployment bug, retries won't help."""


class SummaryNotPublishedError(TransientError):
    """SNS did not take the summary; the review runs again (its ID is not recorded as done)."""


@dataclass(frozen=True)
class WatchedQueue:
    """One entry of `dead_letter_queues`: a catalog queue's DLQ and the role whose messages carry evidence."""

    queue: str
    dlq_url: str
    worker_role_id: str


def watched_queues(resource: str) -> list[WatchedQueue]:
    """`dead_letter_queues`: {"<queue>": {"dlq_url": ..., "worker_role_id": ...}, ...}."""
    try:
        decoded = json.loads(resource)
        if not isinstance(decoded, dict) or not decoded:
            raise TypeError("not a non-empty JSON object")
        return [
            WatchedQueue(queue=str(name), dlq_url=str(entry["dlq_url"]), worker_role_id=str(entry["worker_role_id"]))
            for name, entry in decoded.items()
        ]
    except (ValueError, TypeError, KeyError) as error:
        raise DeadLetterQueuesResourceError(
            f'resource dead_letter_queues must be {{"<queue>": {{"dlq_url": ..., "worker_role_id": ...}}}}: {error}'
        ) from None


class _ReviewedDlq:
    """One DLQ of the review, read without consuming (sqs_jobs.worker.dlq_reader)."""

    def __init__(self, sqs: Any, watched: WatchedQueue) -> None:
        self.reader = DlqReader(sqs, watched.dlq_url, visibility_s=SCAN_VISIBILITY_S, wait_s=RECEIVE_WAIT_S)
        self._provenance = Provenance.of([watched.worker_role_id])

    def messages(self, deadline: float) -> Iterator[dict[str, Any]]:
        """Each message once, until the queue seems empty, or until `deadline` (time.monotonic())."""
        for batch in self.reader.scan(deadline=deadline, fresh_only=True):
            yield from batch

    def error_type(self, message: dict[str, Any]) -> str:
        """The runtime's evidence, only on a message the queue's worker role sent; anyone else's `jobs.*`
        attributes are a producer's data."""
        system = message.get("Attributes") or {}
        attributes = MessageAttributes.split(
            from_received(message.get("MessageAttributes") or {}),
            sent_by_runtime=self._provenance.sent_by_runtime(system.get("SenderId")),
        )
        return attributes.bookkeeping.get(ERROR_TYPE) or NO_EVIDENCE


def _sent_at(message: Mapping[str, Any]) -> datetime | None:
    stamp = (message.get("Attributes") or {}).get("SentTimestamp")
    return datetime.fromtimestamp(int(stamp) / 1000, tz=UTC) if stamp else None


def review_queue(sqs: Any, watched: WatchedQueue, deadline: float, context: JobContext) -> QueueReview:
    """What one DLQ holds; a DLQ that can't be read (denied, deleted) is reported, not raised."""
    review = QueueReview(queue=watched.queue)
    dlq = _ReviewedDlq(sqs, watched)
    try:
        review.depth = dlq.reader.depth()
        for message in dlq.messages(deadline):
            review.add(message["MessageId"], dlq.error_type(message), _sent_at(message))
            if review.read >= MAX_READ_PER_QUEUE:
                break
        review.complete = dlq.reader.exhausted
    except (ClientError, BotoCoreError) as error:
        review.unreadable = str(error)
    finally:
        failures = dlq.reader.release(dlq.reader.received, keep_going=True)
        if failures:
            context.logger.warning(
                "some dead letters could not be made visible again; they reappear after the scan's timeout",
                extra={"queue": watched.queue, "failures": failures[:10], "visibility_s": SCAN_VISIBILITY_S},
            )
    return review


def run(envelope: Envelope, context: JobContext) -> dict[str, Any]:
    queues = watched_queues(context.resource("dead_letter_queues"))
    sqs = context.client("sqs")
    deadline = time.monotonic() + SCAN_BUDGET_S
    reviews = [review_queue(sqs, watched, deadline, context) for watched in queues]
    stack = stack_of({watched.queue: watched.dlq_url for watched in queues})
    summary = summarize(reviews, review_id=envelope.id, now=datetime.now(UTC), stack=stack)
    try:
        published = context.client("sns").publish(
            TopicArn=context.resource("alarm_topic"), Subject=summary.subject, Message=summary.message
        )
    except (ClientError, BotoCoreError) as error:
        raise SummaryNotPublishedError(f"the DLQ review's summary was not published: {error}") from error
    context.logger.info("DLQ review published", extra={"subject": summary.subject})
    return {
        "sns_message_id": str(published["MessageId"]),
        "dead_letters": sum(review.dead_letters for review in reviews if review.unreadable is None),
        "unreadable": [review.queue for review in reviews if review.unreadable is not None],
    }
