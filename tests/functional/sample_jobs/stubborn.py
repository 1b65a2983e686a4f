"""Catches what it shouldn't, as badly written jobs do: the id says how. It keeps the CPU busy (the job's own
code) rather than sleeping, so the time limit's interruption lands at once instead of when a sleep ends."""

from __future__ import annotations

import time

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import TimeLimitInterrupt
from sqs_jobs.worker.jobs import JobContext

OUTCOMES: list[str] = []


def _spin(seconds: float) -> None:
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        pass


def run(envelope: Envelope, context: JobContext) -> None:
    if envelope.id == "except-exception":
        try:
            _spin(5)
        except Exception:
            OUTCOMES.append("swallowed")
    elif envelope.id == "catch-then-finish":
        try:
            _spin(5)
        except TimeLimitInterrupt:
            OUTCOMES.append("caught")
    elif envelope.id == "catch-then-hang":
        try:
            _spin(5)
        except BaseException:
            OUTCOMES.append("caught")
        _spin(5)
    OUTCOMES.append("finished")
