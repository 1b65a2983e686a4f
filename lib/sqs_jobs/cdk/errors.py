"""What a synth can refuse, each with a one-line message saying what to do: a CDK app prints it, not a traceback."""

from __future__ import annotations

from sqs_jobs.cdk.asset_staging import BytecodeError, HandlerNotShippedError, WrongInterpreterError
from sqs_jobs.cdk.context import ContextError
from sqs_jobs.cdk.dependencies_layer import LayerMissingError
from sqs_jobs.cdk.job_results import NotDurableJobsError
from sqs_jobs.cdk.monitoring import MonitoringError
from sqs_jobs.cdk.resource_providers import MissingResourceError

SYNTH_ERRORS: tuple[type[Exception], ...] = (
    ContextError,
    LayerMissingError,
    MissingResourceError,
    MonitoringError,
    NotDurableJobsError,
    WrongInterpreterError,
    BytecodeError,
    HandlerNotShippedError,
    FileNotFoundError,
)
