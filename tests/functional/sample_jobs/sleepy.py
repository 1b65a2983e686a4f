"""Hangs on ids starting with "hang" until RELEASE is set (a downstream that never answers); else succeeds."""

from __future__ import annotations

import threading

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

RELEASE = threading.Event()
DONE: list[str] = []


def run(envelope: Envelope, context: JobContext) -> None:
    if envelope.id.startswith("hang"):
        RELEASE.wait(timeout=30)
        return
    DONE.append(envelope.id)
