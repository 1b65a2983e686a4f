"""The HTTP client for jobs: the article's fix for its incident, as the default.

- connect 10 s / read 30 s timeouts, always (no call can hang a worker);
- no retries inside the job: the queue retries, with backoff, and counts attempts;
- the job's idempotency key sent as `Idempotency-Key`, so an API that supports it never acts twice;
- failures raised as types the runtime understands: HttpTransientError (timeouts, refused or reset
  connections, 408/425/429/5xx, with Retry-After) or HttpPermanentError (other 4xx).

Built on urllib3, which the Lambda runtime already has (botocore depends on it).
"""

from __future__ import annotations

import json as jsonlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error

from functions.worker.downstream import guard_http
from functions.worker.errors import HttpPermanentError, HttpTransientError

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 30.0
IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]
    data: bytes

    def json(self) -> Any:
        return jsonlib.loads(self.data)


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def raise_for_status(method: str, url: str, response: HttpResponse) -> HttpResponse:
    status = response.status
    if status < 400:
        return response
    from functions.worker.classify import HTTP_TRANSIENT_STATUSES  # failure path: loaded by the first error

    what = f"{method} {url} answered {status}"
    if status >= 500 or status in HTTP_TRANSIENT_STATUSES:
        raise HttpTransientError(what, status=status, retry_after_s=retry_after_s(response.headers.get("Retry-After")))
    raise HttpPermanentError(what, status=status)


class HttpClient:
    """One connection pool per worker; safe to share across the jobs of a queue."""

    def __init__(
        self,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        pool: urllib3.PoolManager | None = None,
        connections_per_host: int = 1,
    ) -> None:
        self.timeout = urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)
        # One kept-alive connection per record running at once: fewer and parallel records open a new
        # connection per call and throw it away again.
        self._pool = pool or urllib3.PoolManager(maxsize=max(1, connections_per_host))

    def request(
        self,
        method: str,
        url: str,
        *,
        idempotency_key: str | None = None,
        json: Any = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        """Send one request, no retries, no redirects followed; raise HttpTransientError/HttpPermanentError.

        From a job's run it passes the time limit's fence and the host's circuit breaker
        (functions/worker/downstream.py)."""
        return guard_http(method, url, lambda: self._request(method, url, idempotency_key, json, body, headers))

    def _request(
        self,
        method: str,
        url: str,
        idempotency_key: str | None,
        json: Any,
        body: bytes | None,
        headers: Mapping[str, str] | None,
    ) -> HttpResponse:
        sent_headers = dict(headers or {})
        if idempotency_key is not None:
            sent_headers[IDEMPOTENCY_HEADER] = idempotency_key
        if json is not None:
            body = jsonlib.dumps(json, separators=(",", ":")).encode()
            sent_headers.setdefault("Content-Type", "application/json")
        try:
            raw = self._pool.request(
                method, url, body=body, headers=sent_headers, timeout=self.timeout, retries=False, redirect=False
            )
        except Urllib3Error as error:
            # Timeouts, refused and reset connections, broken responses: may work later.
            raise HttpTransientError(f"{method} {url} failed: {type(error).__name__}") from error
        # urllib3's HTTPHeaderDict: header names stay case-insensitive (`retry-after` is `Retry-After`).
        response = HttpResponse(status=raw.status, headers=raw.headers, data=raw.data)
        return raise_for_status(method, url, response)


@dataclass(frozen=True)
class JobHttp:
    """The client as a job sees it: every request carries the job's idempotency key."""

    client: HttpClient
    idempotency_key: str

    def request(self, method: str, url: str, **kwargs: Any) -> HttpResponse:
        return self.client.request(method, url, idempotency_key=self.idempotency_key, **kwargs)

    def get(self, url: str, **kwargs: Any) -> HttpResponse:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> HttpResponse:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> HttpResponse:
        return self.request("PUT", url, **kwargs)
