"""The job bench.debounce publishes: it records when each of its runs began, and under which key."""

from __future__ import annotations

import threading
import time

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

RUNS: list[tuple[float, str]] = []
_LOCK = threading.Lock()


def run(envelope: Envelope, context: JobContext) -> None:
    with _LOCK:
        RUNS.append((time.time(), context.key))
