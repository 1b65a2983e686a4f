"""Dead-lettering with evidence: the failed message, byte for byte, plus why and when it failed.

SQS allows 10 message attributes. The evidence takes up to 10 `jobs.*` attributes; when the original message
carried attributes of its producer, they travel as one JSON attribute, `jobs.original_attributes`, in place of
`jobs.job` and `jobs.id` (both are in the body anyway), so a redrive can restore the message exactly. Which
attributes are the producer's is decided by who sent the message (functions/worker/provenance.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from functions.worker.provenance import (
    HELD_SINCE,
    ORIGINAL_ATTRIBUTES,
    PRIOR_ATTEMPTS,
    RUNTIME_PREFIX,
    Attributes,
    MessageAttributes,
)
from sqs_jobs.envelope import Envelope

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

# Why a message was dead-lettered.
FAILURE_PERMANENT = "permanent"
FAILURE_EXHAUSTED = "retries_exhausted"

MAX_ERROR_MESSAGE_CHARS = 1024
MAX_TRACEBACK_CHARS = 8192
# SQS counts the body and every attribute's name, type and value in a message's size; its default limit is
# 256 KiB. The original fitted its queue's limit: its copy, evidence added, must fit the DLQ's.
SQS_DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
# When the evidence would not fit, the least useful goes first: the traceback is cut, then whole attributes.
# A body at the very limit leaves no room at all: it is dead-lettered bare (the worker's log line has the error).
_EVIDENCE_DROP_ORDER = (
    TRACEBACK,
    FIRST_FAILED_AT,
    LAST_FAILED_AT,
    SOURCE_QUEUE,
    JOB,
    ID,
    ERROR_MESSAGE,
    ATTEMPTS,
    FAILURE,
    ERROR_TYPE,
    ORIGINAL_ATTRIBUTES,
)


@functools.cache
def _not_sqs_text() -> re.Pattern[str]:
    # SQS accepts #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF in attribute values. Compiled on first
    # use: it costs milliseconds, and a cold start only pays it if a job fails.
    return re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _sqs_text(text: str, limit: int, keep_tail: bool = False) -> str:
    text = _not_sqs_text().sub("?", text)
    if len(text) <= limit:
        return text
    marker = "...[truncated]..."
    if keep_tail:  # a traceback's last frames say most
        return marker + text[-(limit - len(marker)) :]
    return text[: limit - len(marker)] + marker


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


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def evidence_attributes(evidence: Evidence, producer: Attributes) -> dict[str, dict[str, Any]]:
    """The dead letter's attributes: the evidence, and the producer's own attributes packed (or, when it set none,
    the job and ID). Evidence of an earlier failure is never carried over: it is replaced."""
    attributes: dict[str, dict[str, Any]] = {
        ERROR_TYPE: _string(_sqs_text(evidence.error_type, 256)),
        ERROR_MESSAGE: _string(_sqs_text(evidence.error_message or "(no message)", MAX_ERROR_MESSAGE_CHARS)),
        TRACEBACK: _string(_sqs_text(evidence.traceback or "(none)", MAX_TRACEBACK_CHARS, keep_tail=True)),
        FAILURE: _string(evidence.failure),
        ATTEMPTS: {"DataType": "Number", "StringValue": str(evidence.attempts)},
        FIRST_FAILED_AT: _string(evidence.first_failed_at),
        LAST_FAILED_AT: _string(evidence.last_failed_at),
        SOURCE_QUEUE: _string(evidence.source_queue),
    }
    packed = MessageAttributes(bookkeeping={}, producer=producer).packed_producer()
    if packed:
        attributes.update(packed)
    elif evidence.envelope is not None:
        attributes[JOB] = _string(evidence.envelope.job)
        attributes[ID] = _string(evidence.envelope.id)
    return attributes


def message_size(body: str, attributes: dict[str, Any]) -> int:
    """A message's size as SQS counts it; `attributes` in SendMessage's or Lambda's event shape."""
    size = len(body.encode("utf-8"))
    for name, attribute in attributes.items():
        data_type = attribute.get("DataType") or attribute.get("dataType") or ""
        value = attribute.get("StringValue", attribute.get("stringValue", attribute.get("BinaryValue")))
        if value is None:
            value = attribute.get("binaryValue") or ""
        size += len(name.encode("utf-8")) + len(data_type.encode("utf-8"))
        size += len(value) if isinstance(value, bytes) else len(str(value).encode("utf-8"))
    return size


def fit_evidence(body: str, attributes: dict[str, dict[str, Any]], limit: int) -> dict[str, dict[str, Any]]:
    """Evidence cut down so the dead-lettered copy fits `limit`: a body near SQS's limit (hostile input) would
    otherwise make the send fail, and the message go round until SQS's redrive moved it, without evidence."""
    over = message_size(body, attributes) - limit
    if over <= 0:
        return attributes
    fitted = dict(attributes)
    traceback_text = fitted[TRACEBACK]["StringValue"].encode("utf-8")
    if len(traceback_text) - over >= 64:
        # Keep the tail (the last frames say most), cut by the excess plus room for the marker.
        kept = traceback_text[over + 32 :].decode("utf-8", errors="ignore")
        fitted[TRACEBACK] = _string("...[truncated]..." + kept)
        if message_size(body, fitted) <= limit:
            return fitted
    for name in _EVIDENCE_DROP_ORDER:
        fitted.pop(name, None)
        if message_size(body, fitted) <= limit:
            break
    return fitted


class DeadLetterQueue:
    """Sends failed records to the queue's DLQ (and deferred ones back to their queue). The caller acknowledges
    the original only after the send returns, so a crash in between duplicates a message, never loses one."""

    def __init__(self, sqs_client: Any, dlq_url: str) -> None:
        self._sqs = sqs_client
        self._dlq_url = dlq_url

    def send(self, body: str, evidence: Evidence, record: dict[str, Any], attributes: MessageAttributes) -> str:
        """Dead-letter `record` (a Lambda SQS record) whose attributes, split by sender, are `attributes`."""
        request: dict[str, Any] = {
            "QueueUrl": self._dlq_url,
            "MessageBody": body,
            "MessageAttributes": fit_evidence(
                body,
                evidence_attributes(evidence, attributes.producer),
                max(SQS_DEFAULT_MAX_MESSAGE_BYTES, message_size(body, record.get("messageAttributes") or {})),
            ),
        }
        group_id = (record.get("attributes") or {}).get("MessageGroupId")
        if group_id:  # a FIFO DLQ needs the group; the source message ID makes a resend of this one a no-op
            request["MessageGroupId"] = group_id
            request["MessageDeduplicationId"] = record["messageId"]
        response = self._sqs.send_message(**request)
        return str(response["MessageId"])

    def requeue(
        self,
        queue_url: str,
        body: str,
        attributes: MessageAttributes,
        prior: int,
        delay_s: int = 0,
        held_since: float | None = None,
    ) -> str:
        """Send an unrun copy of a record back to its (standard) queue, due in `delay_s`, remembering `prior`
        runs and, if open breakers held it, since when; the producer's attributes go with it, packed."""
        sent = attributes.packed_producer()
        sent[PRIOR_ATTEMPTS] = {"DataType": "Number", "StringValue": str(max(0, prior))}
        if held_since is not None:
            sent[HELD_SINCE] = {"DataType": "Number", "StringValue": f"{held_since:.3f}"}
        response = self._sqs.send_message(
            QueueUrl=queue_url, MessageBody=body, MessageAttributes=sent, DelaySeconds=delay_s
        )
        return str(response["MessageId"])
