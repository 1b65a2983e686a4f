"""moto's SQS at a backlog of thousands: the same answers, without re-scanning the queue for every message.

moto 5.2.5 works out a message's visibility and delay with its datetime helpers (`unix_time_millis`: a naive
`utcnow()` less the epoch, a timedelta's parts added up), several microseconds a call; and for every message a
receive hands out it checks the retention period by computing all of the queue's attributes, three times (each
attribute scans every message for the approximate counts). A standard queue's SendMessage computes them all once
too, to read `ContentBasedDeduplication`. So a receive of 10 at a backlog of 5,000 took over a second and sending
5,000 took 96 s (measured on the engine's machine), while the event source emulator's pollers hold moto's lock
(sqs_jobs.local.moto_locks) for each: one backed-up queue held up every other queue's receive, which is what a
priority lane (docs/priorities.md) must not suffer.

DeleteMessage went twice over every message of the queue for each handle, and rebuilt its list.

Here `Message.visible` and `Message.delayed` compare with `time.time()` (what moto's helper computes, to the
microsecond), the retention check reads the queue's `MessageRetentionPeriod` itself, and DeleteMessage stops at
the message that had the handle. Nothing else changes:
the same messages are visible, delayed, kept or expired. Used by the local engine; `speed_up_backlogs()` is
idempotent.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from moto.sqs.exceptions import ReceiptHandleIsInvalid
from moto.sqs.models import Message, Queue, SQSBackend

_PATCH_LOCK = threading.Lock()
_PATCHED = "_jobs_fast_backlogs"


def _visible(self: Message) -> bool:
    return bool(time.time() * 1000.0 > self.visible_at)


def _delayed(self: Message) -> bool:
    return bool(time.time() * 1000.0 < self.delayed_until)


def _within_retention(self: SQSBackend, queue_name: str, message: Message) -> bool:
    """moto's rule (kept until its sent time plus the queue's retention), from the queue's own setting."""
    retention_s: Any = self.get_queue(queue_name).message_retention_period  # type: ignore[attr-defined]
    return bool(int(retention_s) + message.sent_timestamp / 1000 > time.time())  # type: ignore[operator]


def _delete_message(self: Queue, receipt_handle: str) -> None:
    """moto's DeleteMessage (a handle deleted before is no error; one no message had is ReceiptHandleIsInvalid),
    finding the message in one pass that stops at it (a handle is one message's, and received messages are near the
    front of the queue) rather than two passes over every message and a rebuilt list."""
    if receipt_handle in self.deleted_messages:
        return
    for index, message in enumerate(self._messages):
        if message.had_receipt_handle(receipt_handle):
            del self._messages[index]
            self.pending_messages.discard(message)
            self.deleted_messages.update(message.all_receipt_handles)  # type: ignore[arg-type]
            return
    raise ReceiptHandleIsInvalid()


def speed_up_backlogs() -> None:
    """Patch moto's SQS once per process (later calls do nothing)."""
    with _PATCH_LOCK:
        if getattr(SQSBackend, _PATCHED, False):
            return
        Message.visible = property(_visible)  # type: ignore[assignment,method-assign]
        Message.delayed = property(_delayed)  # type: ignore[assignment,method-assign]
        SQSBackend.is_message_valid_based_on_retention_period = _within_retention  # type: ignore[method-assign]
        Queue.delete_message = _delete_message  # type: ignore[method-assign]
        setattr(SQSBackend, _PATCHED, True)
