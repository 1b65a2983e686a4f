"""Counts its runs per entity ID; unique (or debounced) by the envelope's `document` field, which it must carry."""

from __future__ import annotations

from collections import Counter

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

RUNS: Counter[str] = Counter()


def unique_key(envelope: Envelope) -> str:
    return str(envelope.extra["document"])


def run(envelope: Envelope, context: JobContext) -> None:
    RUNS[envelope.id] += 1
