"""JobPublisher: how other Python services enqueue jobs, checked by the same rules the worker applies.

    publisher = JobPublisher(sqs_client, queue_urls={"orders": url})
    publisher.publish("order_confirmation", "123")                      # -> SQS message ID
    publisher.publish_many([("order_confirmation", "124"), ...])        # SendMessageBatch, chunks of 10

Works against AWS or the local engine alike: pass a client built with the engine's endpoint_url.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqs_jobs.catalog import CATALOG, Catalog
from sqs_jobs.envelope import Envelope, Scalar, build_envelope

SQS_BATCH_MAX = 10
# SQS's limit for DelaySeconds on a message.
MAX_DELAY_S = 900


class PublishError(Exception):
    """Base of publisher errors (envelope errors are raised as they are: EnvelopeError subclasses)."""


class QueueNotConfiguredError(PublishError):
    """The job's queue has no URL in this publisher."""


class InvalidDelayError(PublishError):
    """A delay outside SQS's 0..900 seconds."""


@dataclass(frozen=True)
class FailedEntry:
    envelope: Envelope
    code: str
    message: str
    sender_fault: bool


class PartialPublishError(PublishError):
    """Some messages of a batch were not accepted by SQS; `sent` has the IDs of those that were, in order."""

    def __init__(self, sent: list[str | None], failed: list[FailedEntry]) -> None:
        first = failed[0]
        super().__init__(
            f"{len(failed)} of {len(sent)} jobs were not enqueued (first: {first.envelope.job}:{first.envelope.id}"
            f" {first.code}: {first.message})"
        )
        self.sent = sent
        self.failed = failed


JobRequest = tuple[str, str] | Envelope


class JobPublisher:
    def __init__(self, sqs_client: Any, queue_urls: Mapping[str, str], catalog: Catalog = CATALOG) -> None:
        self._sqs = sqs_client
        self._queue_urls = dict(queue_urls)
        self._catalog = catalog

    def envelope(
        self, job: str, entity_id: str, key: str | None = None, extra: Mapping[str, Scalar] | None = None
    ) -> Envelope:
        """Build and check an envelope; raises the EnvelopeError subclass a worker would dead-letter it for."""
        return build_envelope(job, entity_id, self._catalog.job_names, key=key, extra=extra)

    def _fifo_fields(self, envelope: Envelope, delay_s: int, group: str | None) -> dict[str, Any]:
        """FIFO queues need a message group (default: the entity ID, so one entity's jobs keep their order)
        and take no per-message delay."""
        if not self._catalog.queue_for_job(envelope.job).fifo:
            if group is not None:
                raise PublishError(f"job {envelope.job!r} is on a standard queue; message groups are for FIFO queues")
            return {"DelaySeconds": delay_s} if delay_s else {}
        if delay_s:
            raise InvalidDelayError(f"job {envelope.job!r} is on a FIFO queue, which takes no per-message delay")
        return {"MessageGroupId": group or envelope.id}

    def _queue_url(self, job: str) -> str:
        queue = self._catalog.queue_for_job(job).name
        try:
            return self._queue_urls[queue]
        except KeyError:
            raise QueueNotConfiguredError(
                f"no URL for queue {queue!r} (job {job!r}); configured: {', '.join(sorted(self._queue_urls)) or 'none'}"
            ) from None

    @staticmethod
    def _check_delay(delay_s: int) -> None:
        if not 0 <= delay_s <= MAX_DELAY_S:
            raise InvalidDelayError(f"delay {delay_s}s is outside SQS's 0..{MAX_DELAY_S} seconds")

    def publish(
        self,
        job: str,
        entity_id: str,
        key: str | None = None,
        delay_s: int = 0,
        extra: Mapping[str, Scalar] | None = None,
        group: str | None = None,
    ) -> str:
        """Enqueue one job; returns the SQS message ID. `group` is the FIFO message group (default: the ID)."""
        self._check_delay(delay_s)
        envelope = self.envelope(job, entity_id, key=key, extra=extra)
        request: dict[str, Any] = {"QueueUrl": self._queue_url(job), "MessageBody": envelope.to_json()}
        request.update(self._fifo_fields(envelope, delay_s, group))
        return str(self._sqs.send_message(**request)["MessageId"])

    def publish_many(self, jobs: Iterable[JobRequest], delay_s: int = 0) -> list[str]:
        """Enqueue many jobs with SendMessageBatch (chunks of 10 per queue); returns message IDs in input order.

        Every envelope is checked before anything is sent. Entries SQS rejects raise PartialPublishError, which
        carries the IDs of those that were sent, so the caller can retry only the failures.
        """
        self._check_delay(delay_s)
        envelopes = [job if isinstance(job, Envelope) else self.envelope(*job) for job in jobs]
        by_queue: dict[str, list[int]] = {}
        for index, envelope in enumerate(envelopes):
            by_queue.setdefault(self._queue_url(envelope.job), []).append(index)
        sent: list[str | None] = [None] * len(envelopes)
        failed: list[FailedEntry] = []
        for url, indexes in by_queue.items():
            for start in range(0, len(indexes), SQS_BATCH_MAX):
                failed += self._send_chunk(url, indexes[start : start + SQS_BATCH_MAX], envelopes, sent, delay_s)
        if failed:
            raise PartialPublishError(sent, failed)
        return [message_id for message_id in sent if message_id is not None]

    def _send_chunk(
        self,
        url: str,
        indexes: Sequence[int],
        envelopes: Sequence[Envelope],
        sent: list[str | None],
        delay_s: int,
    ) -> list[FailedEntry]:
        entries = [
            {
                "Id": str(index),
                "MessageBody": envelopes[index].to_json(),
                **self._fifo_fields(envelopes[index], delay_s, None),
            }
            for index in indexes
        ]
        response = self._sqs.send_message_batch(QueueUrl=url, Entries=entries)
        for success in response.get("Successful", []):
            sent[int(success["Id"])] = success["MessageId"]
        return [
            FailedEntry(
                envelope=envelopes[int(failure["Id"])],
                code=failure.get("Code", ""),
                message=failure.get("Message", ""),
                sender_fault=bool(failure.get("SenderFault")),
            )
            for failure in response.get("Failed", [])
        ]
