"""Secrets a job reads through its context (`context.secret(name)`): fetched from Secrets Manager, or Parameter
Store for a SecureString, on first use, kept in the worker's memory for SECRET_CACHE_S, never put in an environment
variable, never logged."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqs_jobs.resources import SECRET_CACHE_S
from sqs_jobs.worker.errors import SecretUnavailableError


class SecretCache:
    """Values by ARN (a Secrets Manager secret's, or a SecureString parameter's), each read again once it is older
    than `ttl_s` (a rotated secret reaches the worker within that time). `clients(service)` is the job's client
    factory. Safe across the threads of a batch; a read that fails keeps nothing."""

    def __init__(
        self,
        clients: Callable[[str], Any],
        ttl_s: float = SECRET_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clients = clients
        self._ttl_s = ttl_s
        self._clock = clock
        self._values: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def get(self, name: str, secret_id: str) -> str:
        now = self._clock()
        with self._lock:
            cached = self._values.get(secret_id)
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        try:
            value = self._read(name, secret_id)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "unknown")
            # The code says what is wrong (not found, access denied, no value yet); the value never appears.
            raise SecretUnavailableError(f"secret {name!r} can't be read: {code}") from error
        except BotoCoreError as error:
            raise SecretUnavailableError(f"secret {name!r} can't be read: {type(error).__name__}") from error
        with self._lock:
            self._values[secret_id] = (now, value)
        return value

    def _read(self, name: str, secret_id: str) -> str:
        if is_parameter_arn(secret_id):
            parameter = self._clients("ssm").get_parameter(Name=secret_id, WithDecryption=True)["Parameter"]
            if parameter.get("Type") != "SecureString":
                # A plain String would be readable by anyone allowed to describe parameters: not a secret.
                raise SecretUnavailableError(
                    f"secret {name!r} is a {parameter.get('Type')} parameter; a secret must be a SecureString"
                )
            return str(parameter["Value"])
        value = self._clients("secretsmanager").get_secret_value(SecretId=secret_id).get("SecretString")
        if not isinstance(value, str):
            raise SecretUnavailableError(f"secret {name!r} holds no text value (SecretString); put one")
        return value


def is_secret_arn(value: str) -> bool:
    """Whether a resource's value names a secret: a Secrets Manager secret's ARN or a parameter's."""
    return ":secretsmanager:" in value or is_parameter_arn(value)


def is_parameter_arn(value: str) -> bool:
    return value.startswith("arn:") and ":ssm:" in value and ":parameter/" in value
