"""Asks for the follow-ups its envelope's `then` field names (`job:id` pairs, comma-separated), counts its runs,
and then fails transiently when its `fail` field says so (after asking: a failed run's follow-ups are never sent)."""

from __future__ import annotations

import threading
from collections import Counter

from sqs_jobs.envelope import Envelope
from sqs_jobs.errors import TransientError
from sqs_jobs.worker.jobs import JobContext

_LOCK = threading.Lock()
RUNS: Counter[tuple[str, str]] = Counter()


def reset() -> None:
    with _LOCK:
        RUNS.clear()


def run(envelope: Envelope, context: JobContext) -> str:
    with _LOCK:
        RUNS[(envelope.job, envelope.id)] += 1
    for pair in str(envelope.extra.get("then", "")).split(","):
        if pair:
            job, entity_id = pair.split(":", 1)
            context.then(job, entity_id)
    if envelope.extra.get("fail") == "transient":
        raise TransientError("the downstream is unavailable")
    return f"done {envelope.id}"
