"""The fake invoicing API: Stripe-like idempotency, its modes, its control surface, and a prompt stop."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from example.standins.invoicing import FakeInvoicingApi, InvalidModeError, render_pdf

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def api() -> Iterator[FakeInvoicingApi]:
    with FakeInvoicingApi() as running:
        yield running


def invoice(invoice_id: str = "INV-1", **changes: str) -> dict[str, str]:
    return {"invoice_id": invoice_id, "customer": "Aiko", "amount": "42.00", "currency": "EUR", **changes}


def call(
    url: str, payload: Any = None, key: str | None = None, method: str = "POST", timeout_s: float = 5
) -> tuple[int, dict[str, str], bytes]:
    """One request with the standard library (not the client under test elsewhere); errors are answers too."""
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key is not None:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def in_background(target: Any) -> tuple[threading.Thread, list[Any]]:
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(target()), daemon=True)
    thread.start()
    return thread, results


def wait_until(condition: Any, timeout_s: float = 5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_the_pdf_is_well_formed_and_names_the_invoice() -> None:
    pdf = render_pdf("INV-7", "Aiko (Tokyo)", "42.00", "EUR")

    assert pdf.startswith(b"%PDF-1.4\n") and pdf.endswith(b"%%EOF\n")
    assert b"Invoice INV-7" in pdf and b"Aiko \\(Tokyo\\)" in pdf
    # The xref offsets point at the objects, so a PDF reader would open it.
    startxref = int(pdf.rsplit(b"startxref\n", 1)[1].split(b"\n", 1)[0])
    assert pdf[startxref:].startswith(b"xref\n")
    offsets = [int(line[:10]) for line in pdf[startxref:].split(b"\n")[3:8]]
    assert [pdf[offset:].split(b"\n", 1)[0] for offset in offsets] == [f"{n} 0 obj".encode() for n in range(1, 6)]


def test_the_same_key_returns_the_same_pdf_and_creates_once(api: FakeInvoicingApi) -> None:
    first = call(f"{api.url}/invoices", invoice(), key="generate_invoice:INV-1")
    again = call(f"{api.url}/invoices", invoice(), key="generate_invoice:INV-1")
    other = call(f"{api.url}/invoices", invoice("INV-2"), key="generate_invoice:INV-2")

    assert first[0] == again[0] == other[0] == 201
    assert first[1]["Content-Type"] == "application/pdf"
    assert first[2] == again[2] and b"INV-1" in first[2]
    assert b"INV-2" in other[2]
    assert api.created_count() == 2
    assert api.created_count("INV-1") == 1
    assert api.requests_for("generate_invoice:INV-1") == 2


def test_a_key_reused_with_another_payload_is_refused(api: FakeInvoicingApi) -> None:
    call(f"{api.url}/invoices", invoice(), key="k")

    status, _, body = call(f"{api.url}/invoices", invoice(amount="1.00"), key="k")

    assert status == 409
    assert json.loads(body)["detail"] == "Idempotency-Key 'k' was used with another payload"
    assert api.created_count() == 1


def test_the_idempotency_key_is_required(api: FakeInvoicingApi) -> None:
    status, _, body = call(f"{api.url}/invoices", invoice())

    assert status == 400
    assert "Idempotency-Key" in json.loads(body)["detail"]
    assert api.created_count() == 0


@pytest.mark.parametrize(
    ("payload", "status"),
    [(invoice(customer=""), 422), ({"invoice_id": "INV-1"}, 422), ([1, 2], 422), (None, 422)],
)
def test_an_incomplete_invoice_is_unprocessable(api: FakeInvoicingApi, payload: Any, status: int) -> None:
    assert call(f"{api.url}/invoices", payload, key="k")[0] == status
    assert api.created_count() == 0


@pytest.mark.parametrize(("mode", "status"), [("503", 503), ("429", 429), ("422", 422)])
def test_refusing_modes_answer_their_status_and_create_nothing(api: FakeInvoicingApi, mode: str, status: int) -> None:
    api.set_mode(mode)

    answer = call(f"{api.url}/invoices", invoice(), key="k")

    assert answer[0] == status
    assert answer[1].get("Retry-After") == ("1" if status != 422 else None)
    assert api.created_count() == 0
    assert api.requests_for("k") == 1


def test_slow_answers_after_the_delay(api: FakeInvoicingApi) -> None:
    api.set_mode("slow", delay_s=0.5)
    started = time.monotonic()

    status, _, _ = call(f"{api.url}/invoices", invoice(), key="k")

    assert status == 201
    assert 0.45 <= time.monotonic() - started < 3


def test_hang_holds_the_request_until_the_mode_changes(api: FakeInvoicingApi) -> None:
    api.set_mode("hang")
    thread, results = in_background(lambda: call(f"{api.url}/invoices", invoice(), key="k", timeout_s=10))
    wait_until(lambda: api.waiting == 1)
    time.sleep(0.3)
    assert thread.is_alive() and results == []  # still held

    api.set_mode("ok")
    thread.join(5)

    assert not thread.is_alive()
    assert results[0][0] == 201
    assert api.waiting == 0
    assert api.created_count() == 1  # created before the hang: the retry case an Idempotency-Key is for


def test_only_ids_limits_the_mode_to_those_invoices(api: FakeInvoicingApi) -> None:
    api.set_mode("hang", only_ids=["INV-stuck"])
    thread, results = in_background(lambda: call(f"{api.url}/invoices", invoice("INV-stuck"), key="s", timeout_s=10))
    wait_until(lambda: api.waiting == 1)

    # Everyone else is served at once while one invoice hangs.
    for number in range(3):
        assert call(f"{api.url}/invoices", invoice(f"INV-{number}"), key=f"k{number}")[0] == 201
    assert thread.is_alive()

    api.set_mode("ok")
    thread.join(5)
    assert results[0][0] == 201
    assert api.created_count() == 4


def test_stop_returns_promptly_with_a_hung_request(api: FakeInvoicingApi) -> None:
    api.set_mode("hang")
    thread, results = in_background(lambda: call(f"{api.url}/invoices", invoice(), key="k", timeout_s=20))
    wait_until(lambda: api.waiting == 1)
    started = time.monotonic()

    api.stop()

    assert time.monotonic() - started < 2
    thread.join(5)
    assert not thread.is_alive()
    assert results[0][0] == 503  # answered, not left hanging: the caller retries later


def test_control_and_stats_over_http(api: FakeInvoicingApi) -> None:
    status, _, body = call(f"{api.url}/_control", {"mode": "503", "only_ids": ["INV-9"], "delay_s": 2})
    assert status == 200
    assert json.loads(body)["mode"] == "503"

    assert call(f"{api.url}/invoices", invoice("INV-9"), key="a")[0] == 503
    assert call(f"{api.url}/invoices", invoice("INV-1"), key="b")[0] == 201

    status, _, body = call(f"{api.url}/_stats", method="GET")
    stats = json.loads(body)
    assert status == 200
    assert stats == {
        "mode": "503",
        "delay_s": 2.0,
        "only_ids": ["INV-9"],
        "created": 1,
        "invoices": {"b": "INV-1"},
        "requests": {"a": 1, "b": 1},
        "over_rate": 0,
        "waiting": 0,
    }

    assert call(f"{api.url}/_reset")[0] == 200
    assert api.stats()["created"] == 0 and api.stats()["mode"] == "ok"


@pytest.mark.parametrize(
    "payload",
    [{"mode": "broken"}, {"mode": "slow", "delay_s": -1}, {"mode": "hang", "only_ids": "INV-1"}, {}, None],
)
def test_bad_control_requests_are_refused(api: FakeInvoicingApi, payload: Any) -> None:
    assert call(f"{api.url}/_control", payload)[0] == 400
    assert api.stats()["mode"] == "ok"


def test_set_mode_refuses_unknown_modes(api: FakeInvoicingApi) -> None:
    with pytest.raises(InvalidModeError, match="unknown mode 'down'; known: ok, slow, hang, 503, 429, 422"):
        api.set_mode("down")


def test_reset_forgets_invoices_and_releases_hung_requests(api: FakeInvoicingApi) -> None:
    api.set_mode("hang")
    thread, results = in_background(lambda: call(f"{api.url}/invoices", invoice(), key="k", timeout_s=10))
    wait_until(lambda: api.waiting == 1)

    api.reset()
    thread.join(5)

    assert results[0][0] == 201
    api.reset()
    assert api.created_count() == 0
    assert api.requests_for("k") == 0


def test_past_its_own_rate_limit_the_api_answers_429_and_creates_nothing() -> None:
    with FakeInvoicingApi(rate_per_s=0.01, burst=3) as limited:
        answers = [call(f"{limited.url}/invoices", invoice(f"INV-{n}"), key=f"k{n}")[0] for n in range(5)]

        assert answers == [201, 201, 201, 429, 429]
        assert limited.created_count() == 3
        assert limited.stats()["over_rate"] == 2
        assert len(limited.arrivals()) == 5
