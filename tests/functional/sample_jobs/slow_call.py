"""Calls the URL in its envelope's `url` field with `context.http` and returns the answer's status: a job whose
downstream call may outlast its time limit."""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext


def run(envelope: Envelope, context: JobContext) -> int:
    return context.http.get(str(envelope.extra["url"])).status
