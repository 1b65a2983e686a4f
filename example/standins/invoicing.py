"""A fake of the external invoicing API that `generate_invoice` calls, with the failure modes of the article's
incident on a switch. The local engine starts one; tests start their own.

    POST /invoices    JSON {invoice_id, customer, amount, currency} + Idempotency-Key header -> 201 + a PDF
    POST /_control    JSON {"mode": ..., "delay_s": ..., "only_ids": [...], "retry_after": ...} -> the stats
    POST /_reset      forget every invoice and counter, back to mode ok
    GET  /_stats      mode, invoices created, requests per key, requests waiting

Like Stripe, the Idempotency-Key makes a retry safe: the first request with a key creates the invoice, every
later one with the same key gets the same PDF back and creates nothing (a different payload under the same key
is refused with 409). Modes, optionally for some invoice IDs only (`only_ids`; the others are served normally):

    ok      create and answer at once
    slow    create, then answer after `delay_s`
    hang    create, then answer only once the mode changes or the server stops (the incident's API)
    503     refuse with 503 and Retry-After, create nothing (an outage)
    429     refuse with 429 and Retry-After, create nothing (throttling)
    422     refuse with 422, create nothing (the API rejects the invoice: permanent)
    401     refuse with 401, create nothing (the deployment's API key is wrong or was rotated: held, not failed)

Like the real thing, it has a rate limit of its own (`rate_per_s`, `burst`: a token bucket, 10 requests a second
with a burst of 25 by default): a POST /invoices beyond it is answered 429 with Retry-After and creates nothing,
and counted (`over_rate` in the stats). The catalog's limit on the endpoint (10 a second, burst 20) keeps the jobs
inside it with a margin for requests that arrive closer together than their tokens were taken. Every POST's
arrival time is kept (`arrivals()`), for the benchmark's calls per second.

Slow and hung requests wait on a condition that every mode change and `stop()` wake, so a stop is prompt even
with requests stuck in `hang`: they are answered 503 and the server closes.

With chaos (sqs_jobs.local.chaos) it also fails some requests by itself (503, or a late answer after creating the
invoice) and drips some answers: the status line, headers and body a byte at a time over `drip_s`, so a client
whose timeouts are per socket read never times out (the jobs' HTTP client bounds the whole call).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqs_jobs.local.chaos import Chaos

MODES = ("ok", "slow", "hang", "503", "429", "422", "401")
IDEMPOTENCY_HEADER = "Idempotency-Key"
REQUIRED_FIELDS = ("invoice_id", "customer", "amount", "currency")
# The API's own rate limit (a token bucket): what the catalog's RateLimit on the endpoint must stay within.
API_RATE_PER_S = 10.0
API_BURST = 25
# A connection that sends nothing is dropped after this long, so no handler thread waits forever on a client.
CLIENT_SOCKET_TIMEOUT_S = 30.0
MAX_BODY_BYTES = 64 * 1024


class InvalidModeError(ValueError):
    """A mode, delay or ID list the fake API doesn't know."""


@dataclass(frozen=True)
class _Invoice:
    invoice_id: str
    payload: dict[str, Any]
    pdf: bytes


def most_in_any_window(times: Sequence[float], window_s: float) -> int:
    """The most of the sorted `times` within any `window_s` seconds (sliding, both ends inclusive)."""
    most, start = 0, 0
    for end, moment in enumerate(times):
        while moment - times[start] > window_s:
            start += 1
        most = max(most, end - start + 1)
    return most


def render_pdf(invoice_id: str, customer: str, amount: str, currency: str) -> bytes:
    """A small, well-formed one-page PDF (correct xref offsets) that names the invoice."""
    text = f"Invoice {invoice_id} - {customer} - {amount} {currency}"
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1", "replace")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref_at = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref_at}\n%%EOF\n".encode()
    return bytes(out)


def standin(
    host: str, chaos: Chaos | None = None, mode: str = "ok", port: str = "0", rate: str = str(API_RATE_PER_S)
) -> FakeInvoicingApi:
    """The catalog's stand-in of the invoicing API (`jobctl local --standin invoicing_api_url:mode=hang,port=N`);
    `rate=off` lifts its own rate limit (a benchmark of the runtime's throughput, not of the API's limit)."""
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"port {port!r} is not a number in 0..65535")
    try:
        rate_per_s = None if rate == "off" else float(rate)
    except ValueError:
        rate_per_s = -1.0
    if rate_per_s is not None and not rate_per_s > 0:
        raise ValueError(f"rate {rate!r} is neither requests per second above 0 nor 'off'")
    return FakeInvoicingApi(host=host, port=int(port), mode=mode, chaos=chaos, rate_per_s=rate_per_s)


class FakeInvoicingApi:
    """The fake API: `start()` serves on 127.0.0.1 (port 0: a free one), `stop()` returns promptly."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        mode: str = "ok",
        delay_s: float = 0.0,
        chaos: Chaos | None = None,
        rate_per_s: float | None = API_RATE_PER_S,
        burst: int = API_BURST,
    ) -> None:
        self._host = host
        # The API's own rate limit (None: none): tokens, and when they were last counted.
        self._rate_per_s = rate_per_s
        self._burst = burst
        self._tokens = float(burst)
        self._counted_at = time.monotonic()
        self._over_rate = 0
        self._arrivals: list[float] = []
        # Injected faults (`jobctl local --chaos`), on top of the mode: a 503 or a hang for a share of requests.
        self._chaos = chaos
        self._port = port
        self._lock = threading.Lock()
        # Notified on every mode change and on stop: what slow and hung requests wait on.
        self._changed = threading.Condition(self._lock)
        self._stopping = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._mode = "ok"
        self._delay_s = 0.0
        self._only_ids: frozenset[str] | None = None
        self._retry_after: str | None = "1"
        self._invoices: dict[str, _Invoice] = {}  # by Idempotency-Key
        self._requests: Counter[str] = Counter()  # POST /invoices per Idempotency-Key, whatever the answer
        self._waiting = 0
        self.set_mode(mode, delay_s=delay_s)

    # --- lifecycle --------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL jobs are given (`invoicing_api_url`); valid once started."""
        if self._server is None:
            raise RuntimeError("the fake invoicing API is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeInvoicingApi:
        server = ThreadingHTTPServer((self._host, self._port), _handler_for(self))
        server.daemon_threads = True  # a handler stuck on a silent client never blocks exit
        with self._lock:
            self._stopping = False
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fake-invoicing", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Wake every waiting request (answered 503), stop accepting, close. Never waits on a hung request."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> FakeInvoicingApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- control ----------------------------------------------------------------------------------------------

    def set_mode(
        self,
        mode: str,
        delay_s: float | None = None,
        only_ids: Iterable[str] | None = None,
        retry_after: str | None = "1",
    ) -> None:
        """Switch mode (waking slow and hung requests); `only_ids` limits it to those invoices, None to all.
        `retry_after` is the Retry-After header of 503/429 (seconds or an HTTP date; None: no header)."""
        if mode not in MODES:
            raise InvalidModeError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
        if delay_s is not None and (not isinstance(delay_s, int | float) or delay_s < 0):
            raise InvalidModeError(f"delay_s must be a number >= 0, not {delay_s!r}")
        if isinstance(only_ids, str):
            raise InvalidModeError("only_ids must be a list of invoice IDs, not one string")
        with self._changed:
            self._mode = mode
            if delay_s is not None:
                self._delay_s = float(delay_s)
            self._only_ids = frozenset(only_ids) if only_ids is not None else None
            self._retry_after = retry_after
            self._changed.notify_all()

    def reset(self) -> None:
        """Forget every invoice and counter; back to mode ok (wakes any waiting request)."""
        with self._changed:
            self._invoices.clear()
            self._requests.clear()
            self._arrivals.clear()
            self._over_rate = 0
            self._tokens = float(self._burst)
        self.set_mode("ok", delay_s=0.0)

    def created_count(self, invoice_id: str | None = None) -> int:
        """Invoices created (distinct Idempotency-Keys that created one), for one invoice ID or in all."""
        with self._lock:
            return sum(1 for item in self._invoices.values() if invoice_id in (None, item.invoice_id))

    def requests_for(self, key: str) -> int:
        """POST /invoices requests received with this Idempotency-Key, whatever they were answered."""
        with self._lock:
            return self._requests[key]

    @property
    def waiting(self) -> int:
        """Requests being held right now (slow or hung)."""
        with self._lock:
            return self._waiting

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "mode": self._mode,
                "delay_s": self._delay_s,
                "only_ids": sorted(self._only_ids) if self._only_ids is not None else None,
                "created": len(self._invoices),
                "invoices": {key: item.invoice_id for key, item in self._invoices.items()},
                "requests": dict(self._requests),
                "waiting": self._waiting,
                "over_rate": self._over_rate,
            }

    # --- the API ----------------------------------------------------------------------------------------------

    def answer_drip_s(self) -> float:
        """How long the next answer takes to send, a byte at a time (0.0: sent at once)."""
        return self._chaos.drip_s("invoicing") if self._chaos is not None else 0.0

    def pause(self, seconds: float) -> bool:
        """Wait `seconds` (a dripping answer between two bytes); False when the server is stopping."""
        with self._changed:
            return not self._changed.wait_for(lambda: self._stopping, timeout=seconds)

    def _mode_for(self, invoice_id: str | None) -> str:
        # Under the lock. Invoices outside `only_ids` (and requests without an ID) are served normally.
        if self._only_ids is not None and invoice_id not in self._only_ids:
            return "ok"
        return self._mode

    def handle_invoice(self, key: str | None, payload: Any) -> tuple[int, dict[str, str], bytes]:
        """POST /invoices: (status, headers, body). Runs on the request's own handler thread."""
        if not key:
            return _problem(HTTPStatus.BAD_REQUEST, f"the {IDEMPOTENCY_HEADER} header is required")
        invoice_id = payload.get("invoice_id") if isinstance(payload, dict) else None
        fault = self._chaos.downstream_fault("invoicing") if self._chaos is not None else None
        with self._changed:
            self._requests[key] += 1
            self._arrivals.append(time.monotonic())
            if not self._take_token():
                self._over_rate += 1
                return _problem(HTTPStatus.TOO_MANY_REQUESTS, "rate limit exceeded", {"Retry-After": "1"})
            mode = self._mode_for(invoice_id if isinstance(invoice_id, str) else None)
            if fault == "transient":
                mode = "503"
            delay_s = self._delay_s
            if fault == "hang" and self._chaos is not None and mode in ("ok", "slow"):
                mode, delay_s = "slow", self._chaos.settings.hang_s
            if mode in ("503", "429"):
                headers = {"Retry-After": self._retry_after} if self._retry_after else {}
                return _problem(HTTPStatus(int(mode)), "try again later", headers)
            if mode == "422":
                return _problem(HTTPStatus.UNPROCESSABLE_ENTITY, f"invoice {invoice_id!r} is rejected")
            if mode == "401":  # the deployment's API key is wrong or was rotated
                return _problem(HTTPStatus.UNAUTHORIZED, "invalid API key")
            found = self._invoices.get(key)
            if found is None:
                missing = [name for name in REQUIRED_FIELDS if not isinstance(payload, dict) or not payload.get(name)]
                if missing:
                    return _problem(HTTPStatus.UNPROCESSABLE_ENTITY, f"missing fields: {', '.join(missing)}")
                assert isinstance(payload, dict)
                fields = {name: str(payload[name]) for name in REQUIRED_FIELDS}
                found = _Invoice(invoice_id=fields["invoice_id"], payload=payload, pdf=render_pdf(**fields))
                self._invoices[key] = found
            elif found.payload != payload:
                return _problem(HTTPStatus.CONFLICT, f"{IDEMPOTENCY_HEADER} {key!r} was used with another payload")
            # The invoice exists from here on: a slow or hung answer is the case an Idempotency-Key is for.
            if mode in ("slow", "hang") and not self._wait(found.invoice_id, mode, delay_s):
                return _problem(HTTPStatus.SERVICE_UNAVAILABLE, "shutting down", {"Retry-After": "1"})
        return HTTPStatus.CREATED, {"Content-Type": "application/pdf"}, found.pdf

    def _take_token(self) -> bool:
        """One token of the API's own bucket (lock held); False when it is empty."""
        if self._rate_per_s is None:
            return True
        now = time.monotonic()
        self._tokens = min(float(self._burst), self._tokens + (now - self._counted_at) * self._rate_per_s)
        self._counted_at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def arrivals(self) -> list[float]:
        """When each POST /invoices arrived (time.monotonic()), in order, whatever it was answered."""
        with self._lock:
            return list(self._arrivals)

    def most_calls_within(self, window_s: float) -> int:
        """The most POST /invoices that arrived within any `window_s` seconds (sliding, both ends inclusive)."""
        return most_in_any_window(self.arrivals(), window_s)

    def _wait(self, invoice_id: str, mode: str, delay_s: float) -> bool:
        """Hold the request (lock held): `slow` for delay_s, `hang` until the mode changes. False on stop."""
        self._waiting += 1
        try:
            if mode == "slow":
                self._changed.wait_for(lambda: self._stopping, timeout=delay_s)
            else:
                self._changed.wait_for(lambda: self._stopping or self._mode_for(invoice_id) != "hang")
            return not self._stopping
        finally:
            self._waiting -= 1

    def control(self, payload: Any) -> dict[str, Any]:
        """POST /_control: the same as set_mode, from JSON."""
        if not isinstance(payload, dict) or "mode" not in payload:
            raise InvalidModeError('expected a JSON object with "mode"')
        only_ids = payload.get("only_ids")
        if only_ids is not None and not (isinstance(only_ids, list) and all(isinstance(i, str) for i in only_ids)):
            raise InvalidModeError("only_ids must be a list of invoice IDs")
        retry_after = payload.get("retry_after", "1")
        self.set_mode(
            str(payload["mode"]),
            delay_s=payload.get("delay_s"),
            only_ids=only_ids,
            retry_after=str(retry_after) if retry_after is not None else None,
        )
        return self.stats()


def _problem(
    status: HTTPStatus, detail: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"status": int(status), "title": status.phrase, "detail": detail}).encode()
    return int(status), {"Content-Type": "application/problem+json", **(headers or {})}, body


def _handler_for(api: FakeInvoicingApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no idle keep-alive connection outlives a stop.
        protocol_version = "HTTP/1.0"
        timeout = CLIENT_SOCKET_TIMEOUT_S
        server_version = "FakeInvoicing/1.0"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: tests and `jobctl local` read the counters, not an access log

        def do_GET(self) -> None:
            if self.path == "/_stats":
                self._send(HTTPStatus.OK, {"Content-Type": "application/json"}, json.dumps(api.stats()).encode())
            else:
                self._send(*_problem(HTTPStatus.NOT_FOUND, f"no such resource {self.path!r}"))

        def do_POST(self) -> None:
            try:
                payload = self._json()
            except ValueError as error:
                self._send(*_problem(HTTPStatus.BAD_REQUEST, str(error)))
                return
            if self.path == "/invoices":
                answer = api.handle_invoice(self.headers.get(IDEMPOTENCY_HEADER), payload)
                self._send(*answer, drip_s=api.answer_drip_s())
            elif self.path == "/_control":
                try:
                    stats = api.control(payload)
                except InvalidModeError as error:
                    self._send(*_problem(HTTPStatus.BAD_REQUEST, str(error)))
                else:
                    self._send(HTTPStatus.OK, {"Content-Type": "application/json"}, json.dumps(stats).encode())
            elif self.path == "/_reset":
                api.reset()
                self._send(HTTPStatus.OK, {"Content-Type": "application/json"}, json.dumps(api.stats()).encode())
            else:
                self._send(*_problem(HTTPStatus.NOT_FOUND, f"no such resource {self.path!r}"))

        def _json(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise ValueError(f"body over {MAX_BODY_BYTES} bytes")
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return None
            try:
                return json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise ValueError(f"body is not JSON: {error}") from None

        def _send(self, status: int, headers: dict[str, str], body: bytes, drip_s: float = 0.0) -> None:
            try:
                if drip_s > 0:
                    self._drip(status, headers, body, drip_s)
                    return
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (its read timeout, a cut run): nothing to answer to

        def _drip(self, status: int, headers: dict[str, str], body: bytes, drip_s: float) -> None:
            """The whole answer, status line first, one byte at a time over `drip_s` (the connection unbuffered)."""
            head = [f"{self.protocol_version} {status} {HTTPStatus(status).phrase}"]
            head += [f"{name}: {value}" for name, value in {**headers, "Content-Length": str(len(body))}.items()]
            answer = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
            between_s = drip_s / len(answer)
            for index in range(len(answer)):
                self.wfile.write(answer[index : index + 1])
                if not api.pause(between_s):
                    return  # stopping: the client gets a truncated answer, as from a server going away

    return Handler
