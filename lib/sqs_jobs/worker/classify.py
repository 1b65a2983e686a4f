"""Transient or permanent: decided by exception types, never by message text.

Order: the job's own overrides (`PERMANENT_ERRORS` / `TRANSIENT_ERRORS` tuples in its module), then the
runtime's own types, then common library exceptions, then the exception's explicit cause (`raise ... from`).
Anything unknown is transient - retried with backoff, bounded by the queue's max attempts - because a wrong
"permanent" loses a job that would have worked, while a wrong "transient" only costs a few retries.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from sqs_jobs.worker.errors import PermanentError, TransientError


class Kind(Enum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"


@dataclass(frozen=True)
class Classification:
    kind: Kind
    # Why, for logs and metrics: the rule that matched.
    reason: str
    # A delay the failure itself asks for (HTTP Retry-After), a floor for the backoff.
    retry_after_s: float | None = None

    @property
    def transient(self) -> bool:
        return self.kind is Kind.TRANSIENT


# AWS error codes that mean "slow down" or "try again": transient whatever their HTTP status.
AWS_TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "SlowDown",
        "TransactionConflictException",
        "TransactionInProgressException",
        "PriorRequestNotComplete",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "EC2ThrottledException",
        "LimitExceededException",
    }
)
# HTTP statuses that may succeed later; every other 4xx will not.
HTTP_TRANSIENT_STATUSES = frozenset({408, 425, 429})

# Exceptions of libraries the runtime does not import, by qualified class name (a type check, not text).
_TRANSIENT_TYPE_NAMES = frozenset(
    {
        "psycopg.errors.DeadlockDetected",
        "psycopg.errors.SerializationFailure",
        "psycopg.errors.LockNotAvailable",
        "psycopg2.errors.DeadlockDetected",
        "psycopg2.errors.SerializationFailure",
        "psycopg2.errors.LockNotAvailable",
        "psycopg2.extensions.TransactionRollbackError",
        "psycopg.OperationalError",
        "psycopg2.OperationalError",
        "pymysql.err.OperationalError",
        "MySQLdb.OperationalError",
        "sqlalchemy.exc.OperationalError",
        "sqlalchemy.exc.TimeoutError",
        "sqlalchemy.exc.DisconnectionError",
        "redis.exceptions.ConnectionError",
        "redis.exceptions.TimeoutError",
        "requests.exceptions.ConnectionError",
        "requests.exceptions.Timeout",
        "httpx.TimeoutException",
        "httpx.NetworkError",
        "urllib3.exceptions.TimeoutError",
        "urllib3.exceptions.ProtocolError",
        "urllib3.exceptions.NewConnectionError",
        "botocore.exceptions.ConnectionError",
        "botocore.exceptions.HTTPClientError",
        "botocore.exceptions.ReadTimeoutError",
        "botocore.exceptions.ConnectTimeoutError",
        "botocore.exceptions.EndpointConnectionError",
    }
)
_PERMANENT_TYPE_NAMES = frozenset(
    {
        "pydantic_core._pydantic_core.ValidationError",
        "pydantic.ValidationError",
        "jsonschema.exceptions.ValidationError",
        "psycopg.errors.IntegrityError",
        "psycopg2.errors.UniqueViolation",
        "psycopg2.IntegrityError",
        "pymysql.err.IntegrityError",
        "sqlalchemy.exc.IntegrityError",
        "sqlalchemy.exc.NoResultFound",
        "botocore.exceptions.ParamValidationError",
    }
)
# Built-in exceptions: network trouble is transient.
_TRANSIENT_BUILTINS: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError, socket.timeout, socket.gaierror)


def _type_names(error: BaseException) -> Iterator[str]:
    for cls in type(error).__mro__:
        yield f"{cls.__module__}.{cls.__qualname__}"


def _aws(error: BaseException) -> Classification | None:
    response = getattr(error, "response", None)
    if not isinstance(response, dict) or "Error" not in response:
        return None
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in AWS_TRANSIENT_CODES:
        return Classification(Kind.TRANSIENT, f"aws:{code}")
    if isinstance(status, int) and status >= 500:
        return Classification(Kind.TRANSIENT, f"aws:http-{status}")
    if isinstance(status, int) and 400 <= status < 500:
        return Classification(Kind.PERMANENT, f"aws:{code or status}")
    return None


def _own(error: BaseException) -> Classification | None:
    status = getattr(error, "status", None)
    retry_after = getattr(error, "retry_after_s", None)
    label = f"http-{status}" if isinstance(status, int) else type(error).__name__
    if isinstance(error, PermanentError):
        return Classification(Kind.PERMANENT, label)
    if isinstance(error, TransientError):
        return Classification(Kind.TRANSIENT, label, retry_after)
    return None


def _known(error: BaseException) -> Classification | None:
    names = set(_type_names(error))
    if names & _PERMANENT_TYPE_NAMES:
        return Classification(Kind.PERMANENT, type(error).__name__)
    if isinstance(error, _TRANSIENT_BUILTINS) or names & _TRANSIENT_TYPE_NAMES:
        return Classification(Kind.TRANSIENT, type(error).__name__)
    return _aws(error)


def classify(
    error: BaseException,
    permanent: tuple[type[BaseException], ...] = (),
    transient: tuple[type[BaseException], ...] = (),
) -> Classification:
    """Classify `error`; `permanent` / `transient` are a job's overrides and win over every built-in rule."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if permanent and isinstance(current, permanent):
            return Classification(Kind.PERMANENT, f"job:{type(current).__name__}")
        if transient and isinstance(current, transient):
            return Classification(Kind.TRANSIENT, f"job:{type(current).__name__}")
        found = _own(current) or _known(current)
        if found is not None:
            return found
        # Only an explicit `raise ... from cause`: an implicit context may be an unrelated earlier error.
        current = current.__cause__
    return Classification(Kind.TRANSIENT, f"unknown:{type(error).__name__}")
