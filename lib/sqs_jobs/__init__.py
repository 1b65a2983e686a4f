"""sqs-jobs: background jobs on SQS + Lambda that are hard to break.

`pip install sqs-jobs` is what a publishing service needs (boto3 only):

    import boto3
    from sqs_jobs import JobPublisher

    publisher = JobPublisher.from_stack(boto3.client("ssm"), boto3.client("sqs"))
    publisher.publish("send_receipt", "1001")

The rest comes with an extra and lives in its own subpackage: the worker (`sqs_jobs.worker`, `[worker]`), the CDK
constructs (`sqs_jobs.cdk`, `[cdk]`), jobctl and the local engine (`sqs_jobs.cli`, `sqs_jobs.local`, `[cli]`) and
the testing API (`sqs_jobs.testing`, `[testing]`). A project's catalog is its own, given to the framework by
reference (`[tool.sqs-jobs] catalog` in its pyproject.toml; sqs_jobs.catalog_ref), never imported by it.

Importing this package loads nothing: each name below is imported from its module on first use, so the worker's
cold start and jobctl's start-up pay only for what they use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqs_jobs.contract import UnknownPriorityError
    from sqs_jobs.envelope import Envelope, build_envelope, parse_envelope
    from sqs_jobs.errors import (
        EnvelopeError,
        EnvelopeFieldError,
        EnvelopeNotJSONError,
        EnvelopeNotObjectError,
        EnvelopeTooLargeError,
        UnknownJobError,
    )
    from sqs_jobs.publisher import (
        ConflictingDelaysError,
        ContractNotGivenError,
        InvalidDelayError,
        JobPublisher,
        PartialPublishError,
        PublishError,
        QueueNotConfiguredError,
        SchedulingNotConfiguredError,
    )
    from sqs_jobs.resources import (
        Access,
        Bucket,
        Endpoint,
        KeyType,
        MailSender,
        Network,
        Secret,
        SecretStore,
        Table,
    )
    from sqs_jobs.specs import Catalog, JobSpec, QueueSpec

# Each public name and the module that defines it.
_EXPORTS = {
    "Envelope": "sqs_jobs.envelope",
    "build_envelope": "sqs_jobs.envelope",
    "parse_envelope": "sqs_jobs.envelope",
    "EnvelopeError": "sqs_jobs.errors",
    "EnvelopeFieldError": "sqs_jobs.errors",
    "EnvelopeNotJSONError": "sqs_jobs.errors",
    "EnvelopeNotObjectError": "sqs_jobs.errors",
    "EnvelopeTooLargeError": "sqs_jobs.errors",
    "UnknownJobError": "sqs_jobs.errors",
    "UnknownPriorityError": "sqs_jobs.contract",
    "ConflictingDelaysError": "sqs_jobs.publisher",
    "ContractNotGivenError": "sqs_jobs.publisher",
    "InvalidDelayError": "sqs_jobs.publisher",
    "JobPublisher": "sqs_jobs.publisher",
    "PartialPublishError": "sqs_jobs.publisher",
    "PublishError": "sqs_jobs.publisher",
    "QueueNotConfiguredError": "sqs_jobs.publisher",
    "SchedulingNotConfiguredError": "sqs_jobs.publisher",
    "Access": "sqs_jobs.resources",
    "Bucket": "sqs_jobs.resources",
    "Endpoint": "sqs_jobs.resources",
    "KeyType": "sqs_jobs.resources",
    "MailSender": "sqs_jobs.resources",
    "Network": "sqs_jobs.resources",
    "Secret": "sqs_jobs.resources",
    "SecretStore": "sqs_jobs.resources",
    "Table": "sqs_jobs.resources",
    "Catalog": "sqs_jobs.specs",
    "JobResult": "sqs_jobs.results",
    "JobResults": "sqs_jobs.results",
    "JobState": "sqs_jobs.results",
    "ResultsNotConfiguredError": "sqs_jobs.results",
    "JobSpec": "sqs_jobs.specs",
    "QueueSpec": "sqs_jobs.specs",
}

__all__ = [
    "Access",
    "Bucket",
    "Catalog",
    "ConflictingDelaysError",
    "ContractNotGivenError",
    "Endpoint",
    "Envelope",
    "EnvelopeError",
    "EnvelopeFieldError",
    "EnvelopeNotJSONError",
    "EnvelopeNotObjectError",
    "EnvelopeTooLargeError",
    "InvalidDelayError",
    "JobPublisher",
    "JobResult",
    "JobResults",
    "JobSpec",
    "JobState",
    "KeyType",
    "MailSender",
    "Network",
    "PartialPublishError",
    "PublishError",
    "QueueNotConfiguredError",
    "QueueSpec",
    "ResultsNotConfiguredError",
    "SchedulingNotConfiguredError",
    "Secret",
    "SecretStore",
    "Table",
    "UnknownJobError",
    "UnknownPriorityError",
    "__version__",
    "build_envelope",
    "parse_envelope",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("sqs-jobs")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            return "0+unknown"
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sqs_jobs' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # the next access is a plain global
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
