"""The Lambda entry point of every queue's worker (handler `sqs_jobs.worker.entry.handler`).

Which catalog it runs (JOBS_CATALOG) and which of its queues it drains (JOBS_QUEUE_NAME) come from its environment,
read on the first invocation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqs_jobs.worker.runtime import Worker, build_worker
from sqs_jobs.worker.settings import WorkerSettings

if TYPE_CHECKING:  # annotations only: Powertools' typing module stays out of the cold start
    from aws_lambda_powertools.utilities.typing import LambdaContext

_worker: Worker | None = None


def handler(event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _worker  # noqa: PLW0603 - one worker per execution environment, built on first use
    # Read before the build: a slow first build is the invocation's time, not less time for a job's limit.
    remaining_s = context.get_remaining_time_in_millis() / 1000
    if _worker is None:
        _worker = build_worker(WorkerSettings.from_environ(os.environ))
    _worker.invocation_started(remaining_s)
    return _worker.handle(event, context)
