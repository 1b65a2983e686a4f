"""moto's SQS, taught SQS's limits on a message: its size as SQS counts it, and at most 10 attributes.

SQS refuses a message whose body (UTF-8 bytes) and attributes (each one's name, data type and value; strings as
UTF-8, binary values as raw bytes) exceed the queue's MaximumMessageSize, and one with more than 10 attributes (AWS's
SQS API Reference, MessageAttributeValue and SetQueueAttributes; "Amazon SQS message quotas"). moto 5 compares the
body's length in characters alone with that limit and takes any number of attributes, so a dead letter or a
hand-back copy too big for real SQS would pass there. This patch makes moto refuse them as SQS does, with SQS's
error (InvalidParameterValue, "Message must be shorter than N bytes."). One difference stays: in a
SendMessageBatch moto fails the whole request where SQS fails the one entry.

Used by the local engine and the tests (tests/functional/conftest.py); `enforce_message_limits()` is idempotent.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.sqs.exceptions import InvalidParameterValue
from moto.sqs.models import SQSBackend

from functions.worker.provenance import SQS_MAX_ATTRIBUTES, attributes_size

_PATCH_LOCK = threading.Lock()
_PATCHED = "_jobs_enforces_message_limits"


def _limited(send: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(send)
    def checked(
        self: SQSBackend,
        queue_name: str,
        message_body: str,
        message_attributes: dict[str, Any] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        attributes = message_attributes or {}
        if len(attributes) > SQS_MAX_ATTRIBUTES:
            raise InvalidParameterValue(
                f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum [{SQS_MAX_ATTRIBUTES}]."
            )
        limit = int(self.get_queue(queue_name).maximum_message_size)  # type: ignore[attr-defined]
        if len(message_body.encode("utf-8")) + attributes_size(attributes) > limit:
            raise InvalidParameterValue(
                f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
            )
        return send(self, queue_name, message_body, attributes or None, *args, **kwargs)

    return checked


def enforce_message_limits() -> None:
    """Patch moto's SQS, once per process, to refuse messages SQS would refuse for their size or attributes."""
    with _PATCH_LOCK:
        if getattr(SQSBackend, _PATCHED, False):
            return
        SQSBackend.send_message = _limited(SQSBackend.send_message)  # type: ignore[method-assign]
        setattr(SQSBackend, _PATCHED, True)
