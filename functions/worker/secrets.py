"""Secrets a job reads through its context (`context.secret(name)`): fetched from Secrets Manager on first use,
kept in the worker's memory for SECRET_CACHE_S, never put in an environment variable, never logged."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from functions.worker.errors import SecretUnavailableError
from sqs_jobs.resources import SECRET_CACHE_S


class SecretCache:
    """Values by secret ARN, each read again once it is older than `ttl_s` (a rotated secret reaches the worker
    within that time). Safe across the threads of a batch; a read that fails keeps nothing."""

    def __init__(
        self,
        client: Callable[[], Any],
        ttl_s: float = SECRET_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
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
            answer = self._client().get_secret_value(SecretId=secret_id)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "unknown")
            # The code says what is wrong (not found, access denied, no value yet); the value never appears.
            raise SecretUnavailableError(f"secret {name!r} can't be read: {code}") from error
        except BotoCoreError as error:
            raise SecretUnavailableError(f"secret {name!r} can't be read: {type(error).__name__}") from error
        value = answer.get("SecretString")
        if not isinstance(value, str):
            raise SecretUnavailableError(f"secret {name!r} holds no text value (SecretString); put one")
        with self._lock:
            self._values[secret_id] = (now, value)
        return value
