"""sample_jobs/awaits_approval.py's job, whose wait that times out is waited again (EventTimeoutError listed as
transient), up to its queue's max_attempts waits."""

from __future__ import annotations

from sqs_jobs.worker.errors import EventTimeoutError
from tests.functional.sample_jobs.awaits_approval import run

TRANSIENT_ERRORS = (EventTimeoutError,)

__all__ = ["TRANSIENT_ERRORS", "run"]
