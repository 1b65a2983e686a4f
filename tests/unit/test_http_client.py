"""The jobs' HTTP client against a real server (the fake invoicing API): statuses become error types, timeouts
and refused connections are transient, the Idempotency-Key is sent, Retry-After is read."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from urllib3.exceptions import NewConnectionError, ReadTimeoutError

from example.standins.invoicing import FakeInvoicingApi
from sqs_jobs.worker.errors import HttpPermanentError, HttpTransientError, PermanentError, TransientError
from sqs_jobs.worker.http import IDEMPOTENCY_HEADER, HttpClient, JobHttp, retry_after_s

pytestmark = pytest.mark.timeout(30)

INVOICE = {"invoice_id": "INV-1", "customer": "Aiko", "amount": "42.00", "currency": "EUR"}


@pytest.fixture
def api() -> Iterator[FakeInvoicingApi]:
    with FakeInvoicingApi() as running:
        yield running


def post_invoice(api: FakeInvoicingApi, client: HttpClient | None = None, **kwargs: Any) -> Any:
    kwargs.setdefault("idempotency_key", "generate_invoice:INV-1")
    return (client or HttpClient()).request("POST", f"{api.url}/invoices", json=INVOICE, **kwargs)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed on exit: nothing listens there


def test_a_success_returns_the_response_and_sends_the_idempotency_key(api: FakeInvoicingApi) -> None:
    response = post_invoice(api, idempotency_key="generate_invoice:INV-1")

    assert response.status == 201
    assert response.headers["Content-Type"] == "application/pdf"
    assert response.data.startswith(b"%PDF-1.4") and response.data.rstrip().endswith(b"%%EOF")
    assert api.requests_for("generate_invoice:INV-1") == 1
    assert api.created_count("INV-1") == 1


def test_job_http_sends_the_jobs_key_on_every_request(api: FakeInvoicingApi) -> None:
    http = JobHttp(HttpClient(), "generate_invoice:INV-1")

    first = http.post(f"{api.url}/invoices", json=INVOICE)
    second = http.post(f"{api.url}/invoices", json=INVOICE)

    assert first.data == second.data
    assert api.stats()["requests"] == {"generate_invoice:INV-1": 2}
    assert api.created_count() == 1


@pytest.mark.parametrize("status", [503, 429])
def test_overload_statuses_are_transient_with_their_retry_after(api: FakeInvoicingApi, status: int) -> None:
    api.set_mode(str(status))

    with pytest.raises(HttpTransientError) as raised:
        post_invoice(api)

    assert isinstance(raised.value, TransientError)
    assert (raised.value.status, raised.value.retry_after_s) == (status, 1.0)
    assert api.created_count() == 0


def test_422_is_permanent(api: FakeInvoicingApi) -> None:
    api.set_mode("422")

    with pytest.raises(HttpPermanentError) as raised:
        post_invoice(api)

    assert isinstance(raised.value, PermanentError)
    assert raised.value.status == 422
    assert raised.value.retry_after_s is None


def test_404_is_permanent(api: FakeInvoicingApi) -> None:
    with pytest.raises(HttpPermanentError) as raised:
        HttpClient().request("GET", f"{api.url}/no-such-thing")

    assert raised.value.status == 404


def test_400_is_permanent(api: FakeInvoicingApi) -> None:
    # The API requires an Idempotency-Key; a request without one is a bad request, never worth retrying.
    with pytest.raises(HttpPermanentError) as raised:
        post_invoice(api, idempotency_key=None)

    assert raised.value.status == 400
    assert api.created_count() == 0
    # What the API said is kept for the operator, as text.
    assert raised.value.body_excerpt
    assert raised.value.body_excerpt.isprintable()


def test_an_error_bodys_excerpt_is_bounded_and_its_hidden_characters_escaped() -> None:
    from sqs_jobs.worker.http import HTTP_BODY_EXCERPT_BYTES, body_excerpt

    assert body_excerpt(b"") is None
    assert body_excerpt(b'  {"error": "key expired"}\n') == '{"error": "key expired"}'
    assert body_excerpt(b"\x1b]52;c;ZXZpbA==\x07bad \xe2\x80\xae") == "\\x1b]52;c;ZXZpbA==\\x07bad \\u202e"
    long = body_excerpt(b"x" * 10_000)
    assert long is not None and len(long) == HTTP_BODY_EXCERPT_BYTES


def test_a_refused_connection_is_transient() -> None:
    with pytest.raises(HttpTransientError) as raised:
        HttpClient(connect_timeout_s=2).request("GET", f"http://127.0.0.1:{closed_port()}/invoices")

    assert raised.value.status is None
    assert isinstance(raised.value.__cause__, NewConnectionError)


def test_a_read_timeout_is_transient_and_bounded(api: FakeInvoicingApi) -> None:
    api.set_mode("slow", delay_s=5)
    started = time.monotonic()

    with pytest.raises(HttpTransientError) as raised:
        post_invoice(api, HttpClient(read_timeout_s=0.3))

    assert time.monotonic() - started < 3
    assert raised.value.status is None
    assert isinstance(raised.value.__cause__, ReadTimeoutError)
    # The API did create the invoice; only the answer was lost: what the Idempotency-Key is for.
    assert api.created_count() == 1


def test_a_hung_server_is_cut_by_the_read_timeout(api: FakeInvoicingApi) -> None:
    api.set_mode("hang")
    started = time.monotonic()

    with pytest.raises(HttpTransientError):
        post_invoice(api, HttpClient(read_timeout_s=0.3))

    assert time.monotonic() - started < 3
    assert api.waiting == 1  # the server still holds it: the client, not the server, ended the wait


def test_retry_after_as_an_http_date_reaches_the_error(api: FakeInvoicingApi) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    api.set_mode("503", retry_after=format_datetime(when, usegmt=True))

    with pytest.raises(HttpTransientError) as raised:
        post_invoice(api)

    assert raised.value.retry_after_s is not None
    assert 25 <= raised.value.retry_after_s <= 31


def test_a_transient_status_without_retry_after_has_none(api: FakeInvoicingApi) -> None:
    api.set_mode("429", retry_after=None)

    with pytest.raises(HttpTransientError) as raised:
        post_invoice(api)

    assert raised.value.retry_after_s is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        (" 7 ", 7.0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 37.0),  # 37 s after `now` below
        ("Sun, 06 Nov 1994 08:48:00 GMT", 0.0),  # in the past: no wait, never negative
        ("soon", None),
        ("-5", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_parsing(value: str | None, expected: float | None) -> None:
    now = datetime(1994, 11, 6, 8, 49, 0, tzinfo=UTC).timestamp()

    assert retry_after_s(value, now=now) == expected


def test_the_header_name_is_the_one_apis_expect() -> None:
    assert IDEMPOTENCY_HEADER == "Idempotency-Key"


def test_header_names_are_case_insensitive() -> None:
    # Servers and proxies send `retry-after` in any case; urllib3's HTTPHeaderDict keeps the lookup insensitive.
    from urllib3 import HTTPHeaderDict

    from sqs_jobs.worker.errors import HttpTransientError as Transient
    from sqs_jobs.worker.http import HttpResponse, raise_for_status

    response = HttpResponse(status=503, headers=HTTPHeaderDict({"retry-after": "7"}), data=b"")
    with pytest.raises(Transient) as raised:
        raise_for_status("POST", "https://api.example.com/x", response)
    assert raised.value.retry_after_s == 7.0


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_their_own_permanent_error_outside_a_job_run(status: int) -> None:
    from sqs_jobs.worker.errors import HttpCredentialsRefusedError, HttpPermanentError
    from sqs_jobs.worker.http import HttpResponse, raise_for_status

    with pytest.raises(HttpCredentialsRefusedError) as raised:
        raise_for_status("POST", "https://api.example.com/x", HttpResponse(status=status, headers={}, data=b""))

    assert isinstance(raised.value, HttpPermanentError) and raised.value.status == status
