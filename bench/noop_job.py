"""A job that does nothing: what bench.overhead runs to measure the runtime around it."""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext


def run(envelope: Envelope, context: JobContext) -> None:
    return None
