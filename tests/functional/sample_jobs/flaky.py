"""Fails with a transient error while FAILURES[id] > 0, then performs its side effect (counted)."""

from __future__ import annotations

from collections import Counter

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import PermanentError
from sqs_jobs.worker.jobs import JobContext

FAILURES: Counter[str] = Counter()
SIDE_EFFECTS: Counter[str] = Counter()
ATTEMPTS_SEEN: list[int] = []


class RejectedByDownstreamError(PermanentError):
    """The downstream said this can never work."""


def run(envelope: Envelope, context: JobContext) -> dict[str, int]:
    ATTEMPTS_SEEN.append(context.attempt)
    if envelope.id.startswith("reject"):
        raise RejectedByDownstreamError(f"downstream rejected {envelope.id}")
    if FAILURES[envelope.id] > 0:
        FAILURES[envelope.id] -= 1
        raise ConnectionRefusedError("downstream refused the connection")
    SIDE_EFFECTS[envelope.id] += 1
    return {"effects": SIDE_EFFECTS[envelope.id]}
