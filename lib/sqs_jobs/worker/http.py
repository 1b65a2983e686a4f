"""The HTTP client for jobs: the article's fix for its incident, as the default.

- every call ends within its whole-call timeout, `total_timeout_s` (by default connect + read: 10 s + 30 s =
  40 s), whatever the server does: a status line, headers or body sent a byte at a time, a slow TLS handshake, a
  request body it doesn't read. urllib3's own timeouts are per socket operation, so the client enforces the
  deadline itself (sqs_jobs.worker.http_deadline). Past it the call raises HttpDeadlineError (transient) and
  its connection is closed, never reused. Connect 10 s / read 30 s still bound each connect and each read;
- a response body is held in memory up to `max_response_bytes` (5 MiB by default, after decompression): a
  larger successful answer raises HttpResponseTooLargeError (permanent: the same request gets the same answer);
- no retries inside the job: the queue retries, with backoff, and counts attempts;
- the job's idempotency key sent as `Idempotency-Key`, so an API that supports it never acts twice;
- failures raised as types the runtime understands: HttpTransientError (timeouts, refused or reset
  connections, 408/425/429/5xx, with Retry-After) or HttpPermanentError (other 4xx).

Built on urllib3, which the Lambda runtime already has (botocore depends on it).
"""

from __future__ import annotations

import json as jsonlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from http.client import HTTPException
from typing import TYPE_CHECKING, Any, TypeVar

import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error

from sqs_jobs.worker.downstream import guard_http
from sqs_jobs.worker.errors import HttpCredentialsRefusedError, HttpPermanentError, HttpTransientError
from sqs_jobs.worker.http_deadline import Deadline, DeadlinePoolManager, watching

if TYPE_CHECKING:
    from urllib3 import BaseHTTPResponse  # urllib3 2; Lambda's runtime may bring 1.26

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 30.0
# A body at the cap takes twice the cap for a moment (its chunks and the joined bytes): ten records side by side
# (parallel_records' default) then hold 100 MiB at most, within the default 256 MB function (docs/catalog.md).
DEFAULT_MAX_RESPONSE_BYTES = 5 * 1024 * 1024
_READ_CHUNK_BYTES = 64 * 1024
IDEMPOTENCY_HEADER = "Idempotency-Key"

_Number = TypeVar("_Number", int, float)
# Called in the calling thread just before a request is sent, with its method, URL and the seconds left of its
# whole-call timeout: an OSError it raises is the call's failure as a failed connection's would be (the local
# engine's chaos injects refused connections and hangs here). None in Lambda.
BeforeSend = Callable[[str, str, float], None]


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
    from sqs_jobs.worker.classify import HTTP_TRANSIENT_STATUSES  # failure path: loaded by the first error

    what = f"{method} {url} answered {status}"
    excerpt = body_excerpt(response.data)
    if status >= 500 or status in HTTP_TRANSIENT_STATUSES:
        raise HttpTransientError(
            what,
            status=status,
            retry_after_s=retry_after_s(response.headers.get("Retry-After")),
            body_excerpt=excerpt,
        )
    if status in CREDENTIALS_REFUSED_STATUSES:
        raise HttpCredentialsRefusedError(what, status=status, body_excerpt=excerpt)
    raise HttpPermanentError(what, status=status, body_excerpt=excerpt)


def body_excerpt(data: bytes) -> str | None:
    """The start of an error response's body, as text an operator can read: what the API said was wrong (a 404's
    "no such image" and a 401's "key expired" are different fixes). Hidden characters are escaped; None if empty."""
    from sqs_jobs.visible import visible

    text = data[:HTTP_BODY_EXCERPT_BYTES].decode("utf-8", errors="replace").strip()
    return visible(text) if text else None


# How much of an error response's body a failure keeps (the dead letter's evidence bounds it again, in bytes).
HTTP_BODY_EXCERPT_BYTES = 256


# Unauthorized, Forbidden: the credentials the deployment sends (an API key from a secret) are refused.
CREDENTIALS_REFUSED_STATUSES = frozenset({401, 403})


class HttpDeadlineError(HttpTransientError):
    """The call went past its whole-call timeout (`HttpClient.total_timeout_s`) and was cut: the server was too
    slow somewhere (connect, TLS, request, status line, headers, body). May work later."""


class HttpResponseTooLargeError(HttpPermanentError):
    """A successful answer's body was larger than the call's `max_response_bytes`: the same request would get the
    same answer, so it is not retried. `status` is the answer's status."""


class HttpClient:
    """One connection pool per worker; safe to share across the jobs of a queue and their threads."""

    def __init__(
        self,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        total_timeout_s: float | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        connections_per_host: int = 1,
        before_send: BeforeSend | None = None,
    ) -> None:
        """`total_timeout_s` bounds each call from its start to its last body byte (default: connect + read);
        `connect_timeout_s` bounds each connect and `read_timeout_s` each wait for data within it. `before_send`:
        see BeforeSend."""
        connect_timeout_s = _positive("connect_timeout_s", connect_timeout_s)
        read_timeout_s = _positive("read_timeout_s", read_timeout_s)
        total_timeout_s = connect_timeout_s + read_timeout_s if total_timeout_s is None else total_timeout_s
        self.total_timeout_s = float(_positive("total_timeout_s", total_timeout_s))
        self.max_response_bytes = int(_positive("max_response_bytes", max_response_bytes))
        # No single connect or read may outlast the call.
        self.timeout = urllib3.Timeout(
            connect=min(connect_timeout_s, self.total_timeout_s), read=min(read_timeout_s, self.total_timeout_s)
        )
        # One kept-alive connection per record running at once: fewer and parallel records open a new
        # connection per call and throw it away again.
        self._pool = DeadlinePoolManager(maxsize=max(1, connections_per_host))
        self._before_send = before_send

    def request(
        self,
        method: str,
        url: str,
        *,
        idempotency_key: str | None = None,
        json: Any = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int | None = None,
    ) -> HttpResponse:
        """Send one request, no retries, no redirects followed; raise HttpTransientError/HttpPermanentError.

        Ends within `total_timeout_s` (else HttpDeadlineError); holds at most `max_response_bytes` of body (the
        client's unless given here). From a job's run it passes the time limit's fence and the host's circuit
        breaker (sqs_jobs.worker.downstream)."""
        limit = (
            self.max_response_bytes
            if max_response_bytes is None
            else _positive("max_response_bytes", max_response_bytes)
        )
        return guard_http(method, url, lambda: self._request(method, url, idempotency_key, json, body, headers, limit))

    def _request(
        self,
        method: str,
        url: str,
        idempotency_key: str | None,
        json: Any,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        limit: int,
    ) -> HttpResponse:
        sent_headers = dict(headers or {})
        if idempotency_key is not None:
            sent_headers[IDEMPOTENCY_HEADER] = idempotency_key
        if json is not None:
            body = jsonlib.dumps(json, separators=(",", ":")).encode()
            sent_headers.setdefault("Content-Type", "application/json")
        with watching(Deadline(self.total_timeout_s)) as deadline:
            try:
                if self._before_send is not None:
                    self._before_send(method, url, deadline.left_s())
                raw = self._pool.request(
                    method,
                    url,
                    body=body,
                    headers=sent_headers,
                    timeout=self.timeout,
                    retries=False,
                    redirect=False,
                    preload_content=False,
                )
                data = _read_body(raw, limit)
            except (Urllib3Error, OSError, HTTPException) as error:
                # A connect or read timeout that ends at the deadline is the deadline too (CPython bounds a TLS
                # handshake or one sendall as a whole by the socket timeout, set to at most the time left).
                if deadline.fired or deadline.left_s() <= 0:
                    raise _past_deadline(method, url, deadline) from error
                # Timeouts, refused and reset connections, broken responses: may work later.
                raise HttpTransientError(f"{method} {url} failed: {type(error).__name__}") from error
            if deadline.fired:  # the answer ended at the cut: a body read to the connection's close looks whole
                raise _past_deadline(method, url, deadline)
        if data is None and raw.status < 400:
            raise HttpResponseTooLargeError(
                f"{method} {url} answered {raw.status} with a body over {limit} bytes", status=raw.status
            )
        # urllib3's HTTPHeaderDict: header names stay case-insensitive (`retry-after` is `Retry-After`).
        response = HttpResponse(status=raw.status, headers=raw.headers, data=data or b"")
        return raise_for_status(method, url, response)


def _positive(name: str, value: _Number) -> _Number:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"HttpClient {name} {value!r}: accepted is a number greater than 0")
    return value


def _past_deadline(method: str, url: str, deadline: Deadline) -> HttpDeadlineError:
    return HttpDeadlineError(f"{method} {url} took longer than its whole-call timeout of {deadline.timeout_s:g} s")


def _read_body(raw: BaseHTTPResponse, limit: int) -> bytes | None:
    """The whole body, decoded, or None when it is over `limit` bytes (then its connection is closed)."""
    declared = raw.headers.get("Content-Length", "")
    over = declared.isdigit() and int(declared) > limit
    chunks: list[bytes] = []
    size = 0
    try:
        if not over:
            for chunk in raw.stream(_READ_CHUNK_BYTES):
                size += len(chunk)
                if size > limit:
                    over = True
                    break
                chunks.append(chunk)
    except BaseException:
        _discard(raw)
        raise
    if over:
        _discard(raw)
        return None
    raw.release_conn()  # read to the end: it may serve the next call (a no-op if urllib3 released it already)
    return b"".join(chunks)


def _discard(raw: BaseHTTPResponse) -> None:
    """Close a response read only in part: the rest of it is still on the connection, which can't serve again."""
    raw.close()
    raw.release_conn()


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
