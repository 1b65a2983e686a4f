"""Declares ValueError permanent for itself: bad input it parses can never succeed on retry."""

from __future__ import annotations

from functions.worker.jobs import JobContext
from sqs_jobs.envelope import Envelope

PERMANENT_ERRORS = (ValueError,)
TRANSIENT_ERRORS = (LookupError,)


def run(envelope: Envelope, context: JobContext) -> None:
    if envelope.id.startswith("lookup"):
        raise KeyError(envelope.id)
    int(envelope.id)  # ValueError for a non-numeric id
