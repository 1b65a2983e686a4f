"""sqs-jobs for the services that publish jobs: the job contract (the catalog of queues and jobs, the ID-only
envelope and its errors) and `JobPublisher`. Needs only boto3.

    import boto3
    from sqs_jobs import JobPublisher

    publisher = JobPublisher(boto3.client("sqs"), queue_urls={"orders": "https://sqs..."})
    publisher.publish("order_confirmation", "1001")
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from sqs_jobs.catalog import CATALOG
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

try:
    __version__ = version("sqs-jobs")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "CATALOG",
    "Access",
    "Bucket",
    "Catalog",
    "ConflictingDelaysError",
    "Endpoint",
    "Envelope",
    "EnvelopeError",
    "EnvelopeFieldError",
    "EnvelopeNotJSONError",
    "EnvelopeNotObjectError",
    "EnvelopeTooLargeError",
    "InvalidDelayError",
    "JobPublisher",
    "JobSpec",
    "KeyType",
    "MailSender",
    "Network",
    "PartialPublishError",
    "PublishError",
    "QueueNotConfiguredError",
    "QueueSpec",
    "SchedulingNotConfiguredError",
    "Secret",
    "SecretStore",
    "Table",
    "UnknownJobError",
    "__version__",
    "build_envelope",
    "parse_envelope",
]
