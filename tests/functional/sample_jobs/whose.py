"""Records whose job each run was: the tenant as the job sees it, in its envelope and in its context's."""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

SEEN: list[tuple[str, str | None, str | None]] = []


def run(envelope: Envelope, context: JobContext) -> None:
    SEEN.append((envelope.id, envelope.tenant, context.envelope.tenant))
