"""Counts its runs per entity ID; unique (or debounced) by the envelope's `document` field, which it must carry."""

from __future__ import annotations

from collections import Counter

from functions.worker.jobs import JobContext
from sqs_jobs.envelope import Envelope

RUNS: Counter[str] = Counter()


def unique_key(envelope: Envelope) -> str:
    return str(envelope.extra["document"])


def run(envelope: Envelope, context: JobContext) -> None:
    RUNS[envelope.id] += 1
