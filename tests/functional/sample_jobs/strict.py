"""Declares ValueError permanent for itself: bad input it parses can never succeed on retry."""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

PERMANENT_ERRORS = (ValueError,)
TRANSIENT_ERRORS = (LookupError,)


def run(envelope: Envelope, context: JobContext) -> None:
    if envelope.id.startswith("lookup"):
        raise KeyError(envelope.id)
    int(envelope.id)  # ValueError for a non-numeric id
