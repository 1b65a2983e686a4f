"""The job of bench.batch's members and its callbacks: one AWS call (where the chaos's transient faults land),
then a record of the run; a member whose ID starts "perm-" fails permanently until the bench fixes it."""

from __future__ import annotations

import threading
import time
from collections import Counter

from sqs_jobs.envelope import Envelope
from sqs_jobs.errors import PermanentError
from sqs_jobs.worker.jobs import JobContext

_LOCK = threading.Lock()
RUNS: Counter[str] = Counter()
# When each callback ran (time.monotonic), by its job, and when each member's run last ended.
CALLBACK_AT: dict[str, list[float]] = {}
LAST_MEMBER_RUN_AT = [0.0]
FIXED: set[str] = set()
CALLBACK_JOBS = ("bench_batch_succeeded", "bench_batch_completed")


def run(envelope: Envelope, context: JobContext) -> None:
    context.client("sqs").list_queues(MaxResults=1)
    if envelope.id.startswith("perm-") and envelope.id not in FIXED:
        raise PermanentError(f"entity {envelope.id} can't be processed (the bench's permanent fault)")
    with _LOCK:
        RUNS[envelope.job] += 1
        if envelope.job in CALLBACK_JOBS:
            CALLBACK_AT.setdefault(envelope.job, []).append(time.monotonic())
        else:
            LAST_MEMBER_RUN_AT[0] = max(LAST_MEMBER_RUN_AT[0], time.monotonic())
