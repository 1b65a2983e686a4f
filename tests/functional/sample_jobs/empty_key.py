"""A job whose own idempotency key comes out empty: the runtime must refuse it, not hash it."""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

RUNS: list[str] = []


def idempotency_key(envelope: Envelope) -> str:
    return envelope.tenant or ""


def run(envelope: Envelope, context: JobContext) -> None:
    RUNS.append(envelope.id)
