"""The Lambda entry point of a durable job's function (handler `sqs_jobs.durable.entry.handler`).

Which job it runs comes from its environment (JOBS_DURABLE_JOB beside the worker's variables), read on the first
invocation. The durable execution SDK's decorator turns Lambda's durable invocation input into a DurableContext and
checkpoints what the job's steps return.
"""

from __future__ import annotations

import os
from typing import Any

from aws_durable_execution_sdk_python.context import DurableContext
from aws_durable_execution_sdk_python.execution import durable_execution

from sqs_jobs.durable.runtime import DurableRuntime, DurableSettings
from sqs_jobs.worker.clients import ClientFactory

_runtime: DurableRuntime | None = None


def _execution(event: Any, context: DurableContext) -> Any:
    global _runtime  # noqa: PLW0603 - one runtime per execution environment, built on first use
    if _runtime is None:
        _runtime = DurableRuntime(DurableSettings.from_environ(os.environ), ClientFactory())
    return _runtime.run(event, context)


handler = durable_execution(_execution)
