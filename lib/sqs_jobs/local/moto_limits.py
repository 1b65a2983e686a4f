"""moto's SQS, taught what SQS refuses in a message, checked before the message is stored: its size as SQS counts
it, more than 10 attributes, an attribute name SQS doesn't accept, a MessageGroupId SQS doesn't take, and a
deduplication ID on a standard queue.

SQS refuses a message whose body (UTF-8 bytes) and attributes (each one's name, data type and value; strings as
UTF-8, binary values as raw bytes) exceed the queue's MaximumMessageSize, and one with more than 10 attributes (AWS's
SQS API Reference, MessageAttributeValue and SetQueueAttributes; "Amazon SQS message quotas"). moto 5 compares the
body's length in characters alone with that limit and takes any number of attributes, so a dead letter or a
hand-back copy too big for real SQS would pass there. This patch makes moto refuse them as SQS does, with SQS's
error (InvalidParameterValue, "Message must be shorter than N bytes.").

An attribute's name may hold only A-Z, a-z, 0-9, underscore, hyphen and period, at most 256 characters, must not
start with `AWS.` or `Amazon.` (in any case), must not start or end with a period nor hold two in a row (the SQS
Developer Guide, "Message metadata for Amazon SQS", Message attribute components:
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html#message-attribute-components).
SQS refuses a SendMessage that breaks this and stores nothing. moto 5.2.5 checks the characters only when it
computes the attributes' MD5 for its answer, after it stored the message: the sender gets the error, the message
stays, and from then on every ReceiveMessage asking for the attributes (`MessageAttributeNames=["All"]`, as the local
engine's event source emulator does) fails on that queue, which then never drains. Here moto's own character check
(`Message.validate_attribute_name`) and the rest of the documented rule run before anything is stored.

A message group ID is 1 to 128 alphanumeric or punctuation characters, on a FIFO queue and on a standard one, where
it names the message's tenant for SQS's fair queues; a deduplication ID is for FIFO queues only (the SQS API
Reference, SendMessage: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html).
SQS refuses a standard queue's message with a deduplication ID ("Value ... for parameter MessageDeduplicationId is
invalid. Reason: The request include parameter that is not valid for this queue type.", InvalidParameterValue).
moto 5.2.5 stores either unchecked on any queue: a dead letter or a copy that would fail on SQS would pass here.
On a standard queue moto delivers a grouped message like any other (SQS's fair queues only change whose messages a
receive returns first while a tenant is noisy; they limit no tenant's rate), and ReceiveMessage returns the group
as the MessageGroupId attribute, as SQS does.

In a SendMessageBatch every entry is checked before any is stored (moto checked the size entry by entry while
storing them, so an entry too big failed the request after the ones before it were stored). One difference
stays: moto then fails the whole request where SQS fails the one entry.

Used by the local engine and the tests (tests/functional/conftest.py); `enforce_message_limits()` is idempotent.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from typing import Any

from moto.sqs.exceptions import InvalidParameterValue, MessageAttributesInvalid
from moto.sqs.models import Message, SQSBackend

from sqs_jobs.worker.provenance import SQS_MAX_ATTRIBUTES, attributes_size

_PATCH_LOCK = threading.Lock()
_PATCHED = "_jobs_enforces_message_limits"
# SQS's rule for a message attribute's name, beyond its characters (the Developer Guide, cited above).
ATTRIBUTE_NAME_MAX_CHARS = 256
RESERVED_NAME_PREFIXES = ("aws.", "amazon.")
# What SQS takes as a MessageGroupId (the API Reference, cited above).
MESSAGE_GROUP_MAX_CHARS = 128
_MESSAGE_GROUP = re.compile(rf"[!-~]{{1,{MESSAGE_GROUP_MAX_CHARS}}}")


def check_attribute_name(name: str) -> None:
    """Raise moto's MessageAttributesInvalid (SQS's InvalidParameterValue) for a name SQS doesn't accept."""
    Message.validate_attribute_name(name)  # the characters: moto's own check, as its answer would make it
    problem = None
    if len(name) > ATTRIBUTE_NAME_MAX_CHARS:
        problem = f"is {len(name)} characters long; at most {ATTRIBUTE_NAME_MAX_CHARS} are accepted"
    elif name.lower().startswith(RESERVED_NAME_PREFIXES):
        problem = "starts with a prefix reserved by AWS (AWS. or Amazon., in any case)"
    elif name.startswith(".") or name.endswith("."):
        problem = "starts or ends with a period"
    elif ".." in name:
        problem = "holds two periods in a row"
    if problem:
        raise MessageAttributesInvalid(f"The message attribute name '{name}' is invalid: it {problem}.")


def check_group_fields(queue: Any, group_id: str | None, deduplication_id: str | None) -> None:
    """Raise SQS's InvalidParameterValue for a MessageGroupId it doesn't take, or a deduplication ID sent to a
    standard queue."""
    if group_id is not None and not _MESSAGE_GROUP.fullmatch(group_id):
        raise InvalidParameterValue(
            f"Value {group_id} for parameter MessageGroupId is invalid. Reason: MessageGroupId can only include "
            f"alphanumeric and punctuation characters. 1 to {MESSAGE_GROUP_MAX_CHARS} in length."
        )
    if deduplication_id is not None and not queue.fifo_queue:
        raise InvalidParameterValue(
            f"Value {deduplication_id} for parameter MessageDeduplicationId is invalid. Reason: The request include "
            "parameter that is not valid for this queue type."
        )


def check_message(queue: Any, message_body: str, attributes: dict[str, Any]) -> None:
    """Raise what SQS raises for a message its queue wouldn't take: too many attributes, a name SQS refuses, or
    more bytes, attributes counted, than the queue's MaximumMessageSize."""
    if len(attributes) > SQS_MAX_ATTRIBUTES:
        raise InvalidParameterValue(
            f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum [{SQS_MAX_ATTRIBUTES}]."
        )
    for name in attributes:
        check_attribute_name(name)
    limit = int(queue.maximum_message_size)
    if len(message_body.encode("utf-8")) + attributes_size(attributes) > limit:
        raise InvalidParameterValue(
            f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
        )


def _limited(send: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(send)
    def checked(
        self: SQSBackend,
        queue_name: str,
        message_body: str,
        message_attributes: dict[str, Any] | None = None,
        delay_seconds: int | None = None,
        deduplication_id: str | None = None,
        group_id: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        attributes = message_attributes or {}
        queue = self.get_queue(queue_name)
        check_group_fields(queue, group_id, deduplication_id)
        check_message(queue, message_body, attributes)
        return send(
            self,
            queue_name,
            message_body,
            attributes or None,
            delay_seconds,
            deduplication_id,
            group_id,
            *args,
            **kwargs,
        )

    return checked


def _limited_batch(send_batch: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(send_batch)
    def checked(
        self: SQSBackend, queue_name: str, entries: dict[str, dict[str, Any]], *args: Any, **kwargs: Any
    ) -> Any:
        queue = self.get_queue(queue_name)
        for entry in entries.values():
            check_group_fields(queue, entry.get("MessageGroupId"), entry.get("MessageDeduplicationId"))
            check_message(queue, entry["MessageBody"], entry.get("MessageAttributes") or {})
        return send_batch(self, queue_name, entries, *args, **kwargs)

    return checked


def enforce_message_limits() -> None:
    """Patch moto's SQS, once per process, to refuse before storing it a message SQS would refuse for its size, its
    attributes (their number, their names) or its message group and deduplication IDs."""
    with _PATCH_LOCK:
        if getattr(SQSBackend, _PATCHED, False):
            return
        SQSBackend.send_message = _limited(SQSBackend.send_message)  # type: ignore[method-assign]
        SQSBackend.send_message_batch = _limited_batch(SQSBackend.send_message_batch)  # type: ignore[method-assign]
        setattr(SQSBackend, _PATCHED, True)
