"""The classifier: transient or permanent by exception type, never by message text."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError, ReadTimeoutError

from sqs_jobs.worker.classify import Kind, classify
from sqs_jobs.worker.errors import (
    EnvelopeNotJSONError,
    HttpPermanentError,
    HttpTransientError,
    JobTimeLimitError,
    PermanentError,
    RecordNotFoundError,
    TransientError,
)


def aws_error(code: str, status: int) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "Op")


def foreign(module: str, name: str, base: type[Exception] = Exception) -> Exception:
    """An exception of a library this project doesn't install, built with that library's module path."""
    error: Exception = type(name, (base,), {"__module__": module})("boom")
    return error


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (TransientError("x"), Kind.TRANSIENT),
        (PermanentError("x"), Kind.PERMANENT),
        (RecordNotFoundError("x"), Kind.PERMANENT),
        (EnvelopeNotJSONError("x"), Kind.PERMANENT),
        (JobTimeLimitError("x"), Kind.TRANSIENT),
        (TimeoutError(), Kind.TRANSIENT),
        (TimeoutError(), Kind.TRANSIENT),
        (ConnectionRefusedError(), Kind.TRANSIENT),
        (ConnectionResetError(), Kind.TRANSIENT),
        (socket.gaierror(), Kind.TRANSIENT),
        (HttpTransientError("x", status=503), Kind.TRANSIENT),
        (HttpTransientError("x", status=429), Kind.TRANSIENT),
        (HttpPermanentError("x", status=422), Kind.PERMANENT),
        (HttpPermanentError("x", status=404), Kind.PERMANENT),
        (aws_error("ThrottlingException", 400), Kind.TRANSIENT),
        (aws_error("ProvisionedThroughputExceededException", 400), Kind.TRANSIENT),
        (aws_error("TransactionConflictException", 400), Kind.TRANSIENT),
        (aws_error("SlowDown", 503), Kind.TRANSIENT),
        (aws_error("InternalServerError", 500), Kind.TRANSIENT),
        (aws_error("ServiceUnavailable", 503), Kind.TRANSIENT),
        (aws_error("AccessDeniedException", 403), Kind.PERMANENT),
        (aws_error("ValidationException", 400), Kind.PERMANENT),
        (aws_error("ResourceNotFoundException", 400), Kind.PERMANENT),
        (aws_error("MessageRejected", 400), Kind.PERMANENT),
        (EndpointConnectionError(endpoint_url="https://x"), Kind.TRANSIENT),
        (ReadTimeoutError(endpoint_url="https://x"), Kind.TRANSIENT),
        (ParamValidationError(report="bad"), Kind.PERMANENT),
        (foreign("psycopg.errors", "DeadlockDetected"), Kind.TRANSIENT),
        (foreign("psycopg2.errors", "DeadlockDetected"), Kind.TRANSIENT),
        (foreign("pymysql.err", "OperationalError"), Kind.TRANSIENT),
        (foreign("sqlalchemy.exc", "OperationalError"), Kind.TRANSIENT),
        (foreign("requests.exceptions", "Timeout"), Kind.TRANSIENT),
        (foreign("httpx", "TimeoutException"), Kind.TRANSIENT),
        (foreign("pydantic_core._pydantic_core", "ValidationError", ValueError), Kind.PERMANENT),
        (foreign("sqlalchemy.exc", "IntegrityError"), Kind.PERMANENT),
        (RuntimeError("no idea"), Kind.TRANSIENT),
        (KeyError("k"), Kind.TRANSIENT),
    ],
)
def test_common_exceptions(error: Exception, kind: Kind) -> None:
    assert classify(error).kind is kind


def test_unknown_errors_are_transient_and_say_so() -> None:
    classification = classify(RuntimeError("?"))
    assert classification.transient
    assert classification.reason == "unknown:RuntimeError"


def test_subclass_of_a_known_library_error_is_classified_like_it() -> None:
    base = type("DeadlockDetected", (Exception,), {"__module__": "psycopg.errors"})
    sub = type("MyDeadlock", (base,), {"__module__": "myapp"})
    assert classify(sub("x")).kind is Kind.TRANSIENT


def test_the_message_text_never_decides() -> None:
    assert classify(RuntimeError("404 not found, permanent")).kind is Kind.TRANSIENT
    assert classify(PermanentError("timeout, please retry")).kind is Kind.PERMANENT


def test_an_explicit_cause_is_followed() -> None:
    try:
        try:
            raise TimeoutError("downstream")
        except TimeoutError as cause:
            raise RuntimeError("wrapped") from cause
    except RuntimeError as error:
        assert classify(error).kind is Kind.TRANSIENT
    try:
        try:
            raise HttpPermanentError("422", status=422)
        except HttpPermanentError as cause:
            raise RuntimeError("wrapped") from cause
    except RuntimeError as error:
        assert classify(error).kind is Kind.PERMANENT


def test_an_implicit_context_is_not_followed() -> None:
    try:
        try:
            raise PermanentError("earlier, unrelated")
        except PermanentError:
            raise RuntimeError("new problem")  # noqa: B904 - the point of the test
    except RuntimeError as error:
        assert classify(error).kind is Kind.TRANSIENT


def test_job_overrides_win() -> None:
    assert classify(ValueError("x"), permanent=(ValueError,)).kind is Kind.PERMANENT
    assert classify(PermanentError("x"), transient=(PermanentError,)).kind is Kind.TRANSIENT
    assert classify(ValueError("x"), permanent=(ValueError,)).reason == "job:ValueError"


def test_retry_after_is_carried_for_the_backoff_floor() -> None:
    classification = classify(HttpTransientError("x", status=429, retry_after_s=7.0))
    assert classification.retry_after_s == 7.0
    assert classification.reason == "http-429"


def test_a_cause_cycle_does_not_loop() -> None:
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert classify(first).kind is Kind.TRANSIENT
