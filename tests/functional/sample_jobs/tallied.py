"""Counts its runs by job and ID; an ID starting "bad" fails permanently until the test puts it in FIXED."""

from __future__ import annotations

import threading
from collections import Counter

from sqs_jobs.envelope import Envelope
from sqs_jobs.errors import PermanentError
from sqs_jobs.worker.jobs import JobContext

_LOCK = threading.Lock()
RUNS: Counter[tuple[str, str]] = Counter()
KEYS: list[str] = []
FIXED: set[str] = set()


def reset() -> None:
    with _LOCK:
        RUNS.clear()
        KEYS.clear()
        FIXED.clear()


def run(envelope: Envelope, context: JobContext) -> None:
    if envelope.id.startswith("bad") and envelope.id not in FIXED:
        raise PermanentError(f"entity {envelope.id} can't be processed")
    with _LOCK:
        RUNS[(envelope.job, envelope.id)] += 1
        KEYS.append(context.key)
