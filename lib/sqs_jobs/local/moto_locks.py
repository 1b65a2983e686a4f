"""Serialize moto's SQS and DynamoDB backends, which are not thread-safe, for the local engine's many threads.

moto (5.2) is built for tests in one thread. Under the engine's concurrent pollers:

- SQS: DeleteMessage rebuilds a queue's message list without a lock, so a message sent at the same moment is
  lost and a delete racing another delete comes undone; two concurrent receives can hand out the same message;
  ReceiveMessage can fail with "Set changed size during iteration". Measured: 4 lost and 19 delivered twice of
  3,000 messages, 5 threads.
- DynamoDB: a conditional PutItem checks, then writes, without a lock, so two writers of the same new key can
  both succeed. The idempotency record relies on exactly that condition: the chaos soak caught two runs of one
  job sending two mails. Measured: 11 of 300 keys had two winners, 4 threads each.
- DynamoDB: UpdateItem's response handler reads the item for `ReturnValues=ALL_OLD` in a call of its own before
  the update, so a write between the two returns an "old" item that was never the one updated. DynamoDB returns
  the item as it was just before this update ("ALL_OLD - Returns all of the attributes of the item, as they
  appeared before the UpdateItem operation", DynamoDB API Reference, UpdateItem). The model of a job's life caught
  a run start that read another life's run count this way (a run numbered 4 of 3).

- SQS FIFO: ReceiveMessage notes which message groups have a message in flight once, before its long poll waits,
  and hands out messages by that note when it wakes: a group whose first message another poller received in the
  meantime gives its next messages to this one, out of order. SQS returns no more messages of a group while one
  of its messages is in flight ("Amazon SQS FIFO queue delivery logic", SQS Developer Guide: "you can't receive
  additional messages from the same message group ID in subsequent requests unless the currently received
  messages are deleted, or they become visible again"). The chaos soak caught an order's updates mailed out of
  order (u1, u3, u2); measured directly: 4 of 30 long polls got a group's later messages.
- SQS FIFO: moto counts a message as in flight (holding its group) only from a receive until it is visible again,
  so a message made visible (a duplicate delivery) and then hidden again by its first receiver's
  ChangeMessageVisibility (a retry's backoff) holds nothing, and the next message of its group is handed out
  before it. SQS refuses that change (`MessageNotInflight`, AWS SQS API Reference, ChangeMessageVisibility), so
  there the message stays visible and comes next in its group. The 10,000-job soak mailed three orders' updates out
  of order this way (the head of each group in a retry's backoff, the next one delivered). Here a message hidden
  again holds its group until it is visible, which keeps the group's order as SQS does; moto still honours the
  change where SQS would refuse it.
- SQS FIFO: moto notes a group as in flight while any of its received messages is, even one whose visibility ended,
  and finds that message visible only when its receive reaches it: a group whose later message held it (its
  receiver's change of visibility failed, so it waited out its timeout while the head was made visible at once)
  gets that later message handed out alone, before the head it skipped on the stale note. The soak with throttled
  runtime calls mailed an order's updates as u3, u1, u2 this way. Here a receive first lets go of every message in
  flight whose visibility has ended.

- DynamoDB: GetItem, Query and Scan build their answer from the live items after the backend's call returns, so a
  write in between fails the read ("dictionary changed size during iteration"); DynamoDB's reads never fail so.

On AWS all of these hold. `serialize_moto()` wraps every public operation of the two backends, and DynamoDB's item
write and read handlers (read and write as one), in one process-wide lock (re-entrant per thread: operations call each
other), released while an SQS long poll waits for messages so a waiting ReceiveMessage never holds up the others; a
long poll looks at the queue afresh each time it wakes (one pass of moto's own receive, then a wait outside the
lock); a message hidden again holds its FIFO group; and a receive first lets go of the messages in flight whose
visibility has ended. It is idempotent and changes only timing and FIFO groups' order: tests on `mock_aws` in the
same process see the same behaviour, minus the races.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.responses import DynamoHandler
from moto.sqs.models import Queue, SQSBackend

_lock = threading.Lock()
_held = threading.local()  # this thread's nesting depth inside the lock
_PATCHED = "_jobctl_serialized"
SERIALIZED_BACKENDS: tuple[type, ...] = (SQSBackend, DynamoDBBackend)
# How soon a long poll looks again when the only visible messages belong to groups in flight (moto would spin).
HELD_BACK_RECHECK_S = 0.2


def _depth() -> int:
    return int(getattr(_held, "depth", 0))


def _serialized(operation: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(operation)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth = _depth()
        if depth == 0:
            _lock.acquire()
        _held.depth = depth + 1
        try:
            return operation(*args, **kwargs)
        finally:
            _held.depth = depth
            if depth == 0:
                _lock.release()

    return wrapper


def _releasing_while_waiting(wait: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(wait)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth = _depth()
        if depth == 0:
            return wait(*args, **kwargs)
        _held.depth = 0
        _lock.release()
        try:
            return wait(*args, **kwargs)
        finally:
            _lock.acquire()
            _held.depth = depth

    return wrapper


def _fresh_long_poll(receive: Callable[..., Any]) -> Callable[..., Any]:
    """ReceiveMessage as passes of moto's own receive that don't wait (each under the lock, each looking at the
    queue's in-flight groups afresh), with the long poll's waiting done between them, outside the lock."""

    @functools.wraps(receive)
    def wrapper(
        self: SQSBackend,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> Any:
        queue = self.get_queue(queue_name)
        if _depth() > 0:  # called from inside another operation: it can't wait without holding everyone up
            _release_visible(queue)
            return receive(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names)
        deadline = time.monotonic() + max(0, int(wait_seconds_timeout or 0))
        while True:
            _serialized(_release_visible)(queue)
            received = receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            left_s = deadline - time.monotonic()
            if received or left_s <= 0:
                return received
            if _serialized(lambda: bool(queue.messages))():
                time.sleep(min(left_s, HELD_BACK_RECHECK_S))  # visible, but their groups are in flight
            else:
                # moto annotates an int; its Condition.wait_for takes any number of seconds.
                queue.wait_for_messages(min(left_s, 1))  # type: ignore[arg-type]

    return wrapper


def _release_visible(queue: Queue) -> None:
    """Messages in flight whose visibility ended are in flight no more, before a receive judges the groups: moto
    notes the groups in flight once, then finds such a message visible only when it reaches it in the queue's order,
    so a group's later message that held it (its receiver's change of visibility failed, it waited out its timeout)
    was handed out alone, before the group's head (skipped on the stale note)."""
    for message in [message for message in queue.pending_messages if message.visible]:
        queue.pending_messages.remove(message)


def _holding_its_group(change: Callable[..., Any]) -> Callable[..., Any]:
    """ChangeMessageVisibility that leaves a message it hides in flight, holding its FIFO group."""

    @functools.wraps(change)
    def wrapper(self: SQSBackend, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
        change(self, queue_name, receipt_handle, visibility_timeout)
        queue = self.get_queue(queue_name)
        for message in queue._messages:
            if message.had_receipt_handle(receipt_handle):
                if not message.visible:
                    queue.pending_messages.add(message)
                return

    return wrapper


def serialize_moto() -> None:
    """Patch the backends once per process (later calls do nothing)."""
    with _lock:
        for backend in SERIALIZED_BACKENDS:
            if getattr(backend, _PATCHED, False):
                continue
            if backend is SQSBackend:  # before the lock's wrapping below, so that it runs under the lock
                SQSBackend.change_message_visibility = _holding_its_group(  # type: ignore[method-assign]
                    SQSBackend.change_message_visibility
                )
            for name, member in list(vars(backend).items()):
                if not name.startswith("_") and callable(member) and not isinstance(member, staticmethod | classmethod):
                    setattr(backend, name, _serialized(member))
            if backend is SQSBackend:
                SQSBackend.receive_message = _fresh_long_poll(SQSBackend.receive_message)  # type: ignore[method-assign]
            setattr(backend, _PATCHED, True)
        if not getattr(DynamoHandler, _PATCHED, False):
            # The reads too: their answer is built from the live item after the backend's call returns, so a write
            # in between made GetItem fail ("dictionary changed size during iteration": the durable model, reading
            # a record while an execution wrote it).
            for name in ("update_item", "put_item", "delete_item", "get_item", "query", "scan", "batch_get_item"):
                setattr(DynamoHandler, name, _serialized(getattr(DynamoHandler, name)))
            setattr(DynamoHandler, _PATCHED, True)
        if not getattr(Queue, _PATCHED, False):
            Queue.wait_for_messages = _releasing_while_waiting(Queue.wait_for_messages)  # type: ignore[method-assign]
            setattr(Queue, _PATCHED, True)
