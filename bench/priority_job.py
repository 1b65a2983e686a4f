"""A job that does nothing but note when its run ended, by entity ID: what bench.priorities and
tests/e2e/test_priorities_local.py read (the local engine runs the workers in this process)."""

from __future__ import annotations

import threading
import time

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

_lock = threading.Lock()
# Entity ID -> when its run ended (time.monotonic()); the order runs ended in.
_ended: dict[str, float] = {}
_order: list[str] = []


def run(envelope: Envelope, context: JobContext) -> None:
    with _lock:
        _ended[envelope.id] = time.monotonic()
        _order.append(envelope.id)


def ended_at(entity_id: str) -> float | None:
    with _lock:
        return _ended.get(entity_id)


def order() -> list[str]:
    """The entity IDs in the order their runs ended."""
    with _lock:
        return list(_order)


def clear() -> None:
    with _lock:
        _ended.clear()
        _order.clear()
