"""Serialize moto's SQS and DynamoDB backends, which are not thread-safe, for the local engine's many threads.

moto (5.2) is built for tests in one thread. Under the engine's concurrent pollers:

- SQS: DeleteMessage rebuilds a queue's message list without a lock, so a message sent at the same moment is
  lost and a delete racing another delete comes undone; two concurrent receives can hand out the same message;
  ReceiveMessage can fail with "Set changed size during iteration". Measured: 4 lost and 19 delivered twice of
  3,000 messages, 5 threads.
- DynamoDB: a conditional PutItem checks, then writes, without a lock, so two writers of the same new key can
  both succeed. The idempotency record relies on exactly that condition: the chaos soak caught two runs of one
  job sending two mails. Measured: 11 of 300 keys had two winners, 4 threads each.

On AWS both are atomic. `serialize_moto()` wraps every public operation of the two backends in one process-wide
lock (re-entrant per thread: operations call each other), released while an SQS long poll waits for messages so
a waiting ReceiveMessage never holds up the others. It is idempotent and changes only timing: tests on
`mock_aws` in the same process see the same behaviour, minus the races.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.dynamodb.models import DynamoDBBackend
from moto.sqs.models import Queue, SQSBackend

_lock = threading.Lock()
_held = threading.local()  # this thread's nesting depth inside the lock
_PATCHED = "_jobctl_serialized"
SERIALIZED_BACKENDS: tuple[type, ...] = (SQSBackend, DynamoDBBackend)


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


def serialize_moto() -> None:
    """Patch the backends once per process (later calls do nothing)."""
    with _lock:
        for backend in SERIALIZED_BACKENDS:
            if getattr(backend, _PATCHED, False):
                continue
            for name, member in list(vars(backend).items()):
                if not name.startswith("_") and callable(member) and not isinstance(member, staticmethod | classmethod):
                    setattr(backend, name, _serialized(member))
            setattr(backend, _PATCHED, True)
        if not getattr(Queue, _PATCHED, False):
            Queue.wait_for_messages = _releasing_while_waiting(Queue.wait_for_messages)  # type: ignore[method-assign]
            setattr(Queue, _PATCHED, True)
