"""A job that does nothing: what bench.overhead runs to measure the runtime around it."""

from __future__ import annotations

from functions.worker.jobs import JobContext
from sqs_jobs.envelope import Envelope


def run(envelope: Envelope, context: JobContext) -> None:
    return None
