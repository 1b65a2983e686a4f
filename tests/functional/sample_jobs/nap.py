"""Uses up its invocation's time: sleeps `float(id)` seconds, after failing (transiently) while FAILURES[id] > 0."""

from __future__ import annotations

import time
from collections import Counter

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

FAILURES: Counter[str] = Counter()


def run(envelope: Envelope, context: JobContext) -> None:
    if FAILURES[envelope.id] > 0:
        FAILURES[envelope.id] -= 1
        raise ConnectionRefusedError("downstream refused the connection")
    time.sleep(float(envelope.id))
