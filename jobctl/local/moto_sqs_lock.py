"""Serialize moto's SQS backend, which is not thread-safe, for the local engine's many concurrent pollers.

moto (5.2) rebuilds a queue's message list in DeleteMessage without a lock, so a message sent at the same moment
is lost and a delete racing another delete comes undone; two concurrent receives can hand out the same message;
ReceiveMessage can fail with "Set changed size during iteration". Measured with the engine's pollers: about one
message lost and dozens of deletes undone per few thousand jobs. A lost message is a job that never runs, which
the engine must never do.

`serialize_sqs()` wraps every public SQSBackend operation in one process-wide lock, released while a long poll
waits for messages, so a waiting ReceiveMessage never holds up the others. It is idempotent and changes only
timing: moto's own tests of the same operations behave the same (`mock_aws` in this process included).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.sqs.models import Queue, SQSBackend

_lock = threading.Lock()
_held = threading.local()  # this thread's nesting depth inside the lock (backend operations call each other)
_PATCHED = "_jobctl_serialized"


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


def serialize_sqs() -> None:
    """Patch moto's SQS backend once per process (later calls do nothing)."""
    with _lock:
        if getattr(SQSBackend, _PATCHED, False):
            return
        for name, member in list(vars(SQSBackend).items()):
            if not name.startswith("_") and callable(member) and not isinstance(member, (staticmethod, classmethod)):
                setattr(SQSBackend, name, _serialized(member))
        Queue.wait_for_messages = _releasing_while_waiting(Queue.wait_for_messages)  # type: ignore[method-assign]
        setattr(SQSBackend, _PATCHED, True)
