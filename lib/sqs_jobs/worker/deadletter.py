"""Dead-lettering with evidence: the failed message, byte for byte, plus why and when it failed.

SQS allows 10 message attributes. The evidence takes up to 8 `jobs.*` attributes, plus `jobs.job` and `jobs.id`
(both are in the body anyway) or, for a failed HTTP call, `jobs.http` (its status and the start of the response)
in their place; the producer's own attributes travel packed in one, `jobs.original_attributes`
(sqs_jobs.worker.provenance), in place of `jobs.job` and `jobs.id`, so a redrive can restore the message
exactly. Which attributes are the
producer's is decided by who sent the message.

Sizes are counted as SQS counts them (`message_size`). The evidence is bounded (`EVIDENCE_MAX_BYTES`) and the
packing adds a fixed few bytes per attribute, so a dead letter is at most `DEAD_LETTER_HEADROOM_BYTES` bigger than
its original: the DLQ's limit is that much above its queue's (functions.catalog). Should it still not fit (a queue
whose deployed limit was raised by hand), `fit_evidence` shortens the traceback, then the HTTP excerpt, then the
error message, then drops the timestamps, source and job/ID; the error type, failure class and attempts always
stay, and the producer's attributes are never dropped: they go to the attribute store instead
(sqs_jobs.worker.attribute_store).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqs_jobs.envelope import Envelope, tenant_of
from sqs_jobs.limits import SQS_DEFAULT_MAX_MESSAGE_BYTES, SQS_MAX_MESSAGE_BYTES
from sqs_jobs.worker.attribute_store import AttributeStore, StoredAttributes, StoredAttributesError
from sqs_jobs.worker.errors import DeadLetterError
from sqs_jobs.worker.names import DeadLetterFailure
from sqs_jobs.worker.provenance import (
    HELD_SINCE,
    ORIGINAL_MESSAGE,
    PRIOR_ATTEMPTS,
    RUNTIME_PREFIX,
    SENT_AT,
    SQS_MAX_ATTRIBUTES,
    STORED_ATTRIBUTES,
    Attributes,
    MessageAttributes,
    attributes_size,
    pack,
    packed_attribute,
)

ATTRIBUTE_PREFIX = RUNTIME_PREFIX
ERROR_TYPE = "jobs.error_type"
ERROR_MESSAGE = "jobs.error_message"
TRACEBACK = "jobs.traceback"
FAILURE = "jobs.failure"
ATTEMPTS = "jobs.attempts"
FIRST_FAILED_AT = "jobs.first_failed_at"
LAST_FAILED_AT = "jobs.last_failed_at"
SOURCE_QUEUE = "jobs.source_queue"
JOB = "jobs.job"
ID = "jobs.id"
# A failed HTTP call's status and the start of the response's body, "<status> <body>": what an operator groups
# and redrives by. One attribute: SQS allows 10, and a dead letter that has it leaves out jobs.job and jobs.id.
HTTP = "jobs.http"


# Each evidence value's most bytes (UTF-8, as SQS counts them).
MAX_ERROR_TYPE_BYTES = 256
MAX_ERROR_MESSAGE_BYTES = 1024
MAX_TRACEBACK_BYTES = 8192
MAX_FIELD_BYTES = 1024  # the source queue's ARN, the job and the ID
MAX_HTTP_BYTES = 512
_MAX_NUMBER_DIGITS = 20
_ISO_STAMP_BYTES = len("2000-01-01T00:00:00.000+00:00")
_LIMITS = {
    ERROR_TYPE: ("String", MAX_ERROR_TYPE_BYTES),
    ERROR_MESSAGE: ("String", MAX_ERROR_MESSAGE_BYTES),
    TRACEBACK: ("String", MAX_TRACEBACK_BYTES),
    FAILURE: ("String", max(len(DeadLetterFailure.PERMANENT), len(DeadLetterFailure.RETRIES_EXHAUSTED))),
    ATTEMPTS: ("Number", _MAX_NUMBER_DIGITS),
    FIRST_FAILED_AT: ("String", _ISO_STAMP_BYTES),
    LAST_FAILED_AT: ("String", _ISO_STAMP_BYTES),
    SOURCE_QUEUE: ("String", MAX_FIELD_BYTES),
    JOB: ("String", MAX_FIELD_BYTES),
    ID: ("String", MAX_FIELD_BYTES),
    HTTP: ("String", MAX_HTTP_BYTES),
}
# The most the evidence attributes can weigh, as SQS counts them.
EVIDENCE_MAX_BYTES = sum(len(name) + len(data_type) + limit for name, (data_type, limit) in _LIMITS.items())

# When a dead letter would not fit its DLQ: shortened first (keeping the traceback's last frames and the message's
# start), then dropped; what is never dropped (the error type, failure class and attempts) is left out of both.
_SHORTENED_FIRST = ((TRACEBACK, True), (HTTP, False), (ERROR_MESSAGE, False))
_DROPPED_NEXT = (FIRST_FAILED_AT, LAST_FAILED_AT, SOURCE_QUEUE, JOB, ID)
# A shortened text keeps at least this much, or goes.
_MIN_SHORTENED_BYTES = 64
_MARKER = "...[truncated]..."


class DeadLetterTooLargeError(DeadLetterError):
    """Even the essential evidence can't fit the DLQ beside the original body: the record stays on its queue and
    SQS's redrive policy moves it whole (attributes included, without evidence)."""


class CopyTooLargeError(DeadLetterError):
    """A hand-back copy would not fit its queue: the caller makes the original visible again instead."""


@functools.cache
def _not_sqs_text() -> re.Pattern[str]:
    # SQS accepts #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF in attribute values. Compiled on first
    # use: it costs milliseconds, and a cold start only pays it if a job fails.
    return re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def shorten(text: str, max_bytes: int, keep_tail: bool = False) -> str:
    """`text` in at most `max_bytes` UTF-8 bytes (and at least the marker's), marked where it was cut; never
    splits a character."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    room = max(0, max_bytes - len(_MARKER))
    if keep_tail:  # a traceback's last frames say most
        return _MARKER + data[len(data) - room :].decode("utf-8", errors="ignore")
    return data[:room].decode("utf-8", errors="ignore") + _MARKER


def _sqs_text(text: str, max_bytes: int, keep_tail: bool = False) -> str:
    return shorten(_not_sqs_text().sub("?", text), max_bytes, keep_tail)


def iso_from_epoch_ms(epoch_ms: int | float) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Evidence:
    error_type: str
    error_message: str
    traceback: str
    failure: str
    attempts: int
    first_failed_at: str
    last_failed_at: str
    source_queue: str
    envelope: Envelope | None
    # A failed HTTP call's status and the start of its response body, when the job's error was one.
    http_status: int | None = None
    http_body: str | None = None


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def evidence_attributes(evidence: Evidence, with_envelope: bool) -> Attributes:
    """The dead letter's own attributes: the evidence, each value within its limit, and (`with_envelope`, when
    the producer set no attribute of its own) the job and ID. Evidence of an earlier failure is never carried
    over: it is replaced. SQS refuses empty values, so an unknown one is left out."""
    texts = {
        ERROR_TYPE: _sqs_text(evidence.error_type or "(unknown)", MAX_ERROR_TYPE_BYTES),
        ERROR_MESSAGE: _sqs_text(evidence.error_message or "(no message)", MAX_ERROR_MESSAGE_BYTES),
        TRACEBACK: _sqs_text(evidence.traceback or "(none)", MAX_TRACEBACK_BYTES, keep_tail=True),
        FAILURE: evidence.failure,
        FIRST_FAILED_AT: evidence.first_failed_at,
        LAST_FAILED_AT: evidence.last_failed_at,
        SOURCE_QUEUE: _sqs_text(evidence.source_queue, MAX_FIELD_BYTES),
    }
    http = evidence.http_status is not None and 100 <= evidence.http_status <= 999
    if http:
        texts[HTTP] = _sqs_text(f"{evidence.http_status} {evidence.http_body or ''}".rstrip(), MAX_HTTP_BYTES)
    elif with_envelope and evidence.envelope is not None:  # the body holds them too; SQS allows 10 attributes
        texts[JOB] = _sqs_text(evidence.envelope.job, MAX_FIELD_BYTES)
        texts[ID] = _sqs_text(evidence.envelope.id, MAX_FIELD_BYTES)
    attributes = {name: _string(text) for name, text in texts.items() if text}
    attributes[ATTEMPTS] = {"DataType": "Number", "StringValue": str(evidence.attempts)[:_MAX_NUMBER_DIGITS]}
    return attributes


def message_size(body: str, attributes: Attributes) -> int:
    """A message's size as SQS counts it: the body's UTF-8 bytes and each attribute's name, data type and value
    (strings as UTF-8, binary values as raw bytes). `attributes` in SendMessage's (or ReceiveMessage's) shape."""
    return len(body.encode("utf-8")) + attributes_size(attributes)


def fit_evidence(body: str, evidence: Attributes, carried: Attributes, limit: int) -> Attributes | None:
    """`evidence` and `carried` (the producer's attributes, packed or referenced: never cut) as one set of
    attributes for a message of `body` within `limit`: the evidence shortened and then thinned in the documented
    order, or None when even the error type, failure class and attempts leave no room."""
    fitted = dict(evidence)

    def excess() -> int:
        return message_size(body, {**fitted, **carried}) - limit

    over = excess()
    for name, keep_tail in _SHORTENED_FIRST:
        if over <= 0:
            break
        if name not in fitted:
            continue
        text = str(fitted[name]["StringValue"])
        room = len(text.encode("utf-8")) - over
        if room >= _MIN_SHORTENED_BYTES:
            fitted[name] = _string(shorten(text, room, keep_tail=keep_tail))
        else:
            del fitted[name]
        over = excess()
    for name in _DROPPED_NEXT:
        if over <= 0:
            break
        if fitted.pop(name, None) is not None:
            over = excess()
    return {**fitted, **carried} if over <= 0 else None


class DeadLetterQueue:
    """Sends failed records to the queue's DLQ (and deferred ones back to their queue). The caller acknowledges
    the original only after the send returns, so a crash in between duplicates a message, never loses one.

    `dlq_max_bytes` and `queue_max_bytes` are the queues' MaximumMessageSize (the catalog's
    `dlq_max_message_bytes` and `max_message_bytes`); `attribute_store` keeps a dead letter's producer attributes
    when they can't travel in it (without one, such a record stays on its queue: DeadLetterTooLargeError)."""

    def __init__(
        self,
        sqs_client: Any,
        dlq_url: str,
        *,
        dlq_max_bytes: int = SQS_MAX_MESSAGE_BYTES,
        queue_max_bytes: int = SQS_DEFAULT_MAX_MESSAGE_BYTES,
        attribute_store: AttributeStore | None = None,
    ) -> None:
        self._sqs = sqs_client
        self._dlq_url = dlq_url
        # A FIFO queue's name, so its URL, ends in .fifo (SQS's CreateQueue); only a FIFO queue takes a
        # deduplication ID: a standard one refuses the message (InvalidParameterValue).
        self._fifo = dlq_url.endswith(".fifo")
        self._dlq_max_bytes = dlq_max_bytes
        self._queue_max_bytes = queue_max_bytes
        self._store = attribute_store

    def dead_letter(self, body: str, evidence: Evidence, attributes: MessageAttributes) -> Attributes:
        """The attributes `body` is dead-lettered with: the evidence, fitted to the DLQ, and the producer's own
        attributes, packed in it or (only if they can't fit) stored and referenced."""
        producer = dict(attributes.producer)
        carried: Attributes = {}
        reference = attributes.bookkeeping.get(STORED_ATTRIBUTES)
        if reference:  # a dead letter of ours that SQS moved back whole: its attributes are still stored
            try:
                if self._store is None:
                    raise StoredAttributesError("no attribute store to read them from")
                producer = {**self._store.load(StoredAttributes.parse(reference)), **producer}
            except StoredAttributesError:
                carried = {STORED_ATTRIBUTES: _string(reference)}  # passed on as it came: never lost here
        own = evidence_attributes(evidence, with_envelope=not producer and not carried)
        carried = {**packed_attribute(producer), **carried}
        fitted = fit_evidence(body, own, carried, self._dlq_max_bytes)
        if fitted is None and producer and self._store is not None:
            stored = self._store.put(pack(producer))
            fitted = fit_evidence(body, own, stored.to_attribute(), self._dlq_max_bytes)
        if fitted is None:
            raise DeadLetterTooLargeError(
                f"a dead letter of a {message_size(body, {})}-byte body with its producer's attributes "
                f"({attributes_size(producer)} bytes) and the essential evidence exceeds the DLQ's "
                f"{self._dlq_max_bytes} bytes"
                + ("" if self._store is not None else ", and no attribute store was given")
            )
        return fitted

    def send(self, body: str, evidence: Evidence, record: dict[str, Any], attributes: MessageAttributes) -> str:
        """Dead-letter `record` (a Lambda SQS record) whose attributes, split by sender, are `attributes`."""
        request: dict[str, Any] = {
            "QueueUrl": self._dlq_url,
            "MessageBody": body,
            "MessageAttributes": self.dead_letter(body, evidence, attributes),
        }
        group_id = (record.get("attributes") or {}).get("MessageGroupId")
        if group_id:  # a FIFO DLQ's order, or on a standard one the tenant's (fair queues)
            request["MessageGroupId"] = group_id
            if self._fifo:  # the source message ID makes a resend of this one a no-op
                request["MessageDeduplicationId"] = record["messageId"]
        response = self._sqs.send_message(**request)
        return str(response["MessageId"])

    def copy_attributes(
        self,
        body: str,
        attributes: MessageAttributes,
        prior: int | None = None,
        held_since: float | None = None,
        sent_at_ms: int | None = None,
        original_message: str | None = None,
    ) -> Attributes:
        """A hand-back copy's attributes. The producer's travel as they came (same names and values: the copy is
        no bigger than the original, bookkeeping aside) unless one is named `jobs.*`, which on a message the
        runtime sent would read as bookkeeping, or there would be more than SQS's 10: then they are packed, and
        CopyTooLargeError says when that copy would not fit the queue. `sent_at_ms`: when the original was first
        sent, which the copy's own SentTimestamp no longer says."""
        bookkeeping: Attributes = {}
        if prior is not None:
            bookkeeping[PRIOR_ATTEMPTS] = {"DataType": "Number", "StringValue": str(max(0, prior))}
        if held_since is not None:
            bookkeeping[HELD_SINCE] = {"DataType": "Number", "StringValue": f"{held_since:.3f}"}
        if sent_at_ms is not None:
            bookkeeping[SENT_AT] = {"DataType": "Number", "StringValue": str(sent_at_ms)}
        if original_message is not None:
            bookkeeping[ORIGINAL_MESSAGE] = {"DataType": "String", "StringValue": original_message}
        reference = attributes.bookkeeping.get(STORED_ATTRIBUTES)
        if reference:
            bookkeeping[STORED_ATTRIBUTES] = _string(reference)
        producer = attributes.producer
        as_they_came = (
            not any(name.startswith(RUNTIME_PREFIX) for name in producer)
            and len(producer) + len(bookkeeping) <= SQS_MAX_ATTRIBUTES
        )
        sent = {**(producer if as_they_came else packed_attribute(producer)), **bookkeeping}
        size = message_size(body, sent)
        if size > self._queue_max_bytes:
            raise CopyTooLargeError(
                f"a hand-back copy of {size} bytes (its producer's attributes "
                f"{'as they came' if as_they_came else 'packed'}) exceeds its queue's {self._queue_max_bytes} bytes"
            )
        return sent

    def requeue(
        self,
        queue_url: str,
        body: str,
        attributes: MessageAttributes,
        prior: int | None = None,
        delay_s: int = 0,
        held_since: float | None = None,
        sent_at_ms: int | None = None,
        original_message: str | None = None,
    ) -> str:
        """Send an unrun copy of a record back to its (standard) queue, due in `delay_s`, remembering `prior`
        runs, if open breakers held it, since when, and when its original was first sent (each only when given); see
        `copy_attributes`. The copy keeps its tenant's message group, so SQS's fair queues still count it as the
        tenant's."""
        sent = self.copy_attributes(
            body,
            attributes,
            prior=prior,
            held_since=held_since,
            sent_at_ms=sent_at_ms,
            original_message=original_message,
        )
        request: dict[str, Any] = {"QueueUrl": queue_url, "MessageBody": body, "DelaySeconds": delay_s}
        if sent:
            request["MessageAttributes"] = sent
        tenant = tenant_of(body)
        if tenant is not None:
            request["MessageGroupId"] = tenant
        response = self._sqs.send_message(**request)
        return str(response["MessageId"])
