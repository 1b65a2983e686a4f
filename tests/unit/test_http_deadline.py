"""The jobs' HTTP client bounds the whole call (lib/sqs_jobs/worker/http.py, http_deadline.py), against real servers on
127.0.0.1 that send their answer one byte at a time: the call ends at its whole-call timeout with
HttpDeadlineError whatever phase drips, its connection is never reused, kept-alive connections still are, 100
calls in flight share one watchdog thread, a body over the size cap is refused, and a run cut at its time limit
in such a call has its thread end at the call's deadline."""

from __future__ import annotations

import gzip
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from sqs_jobs.worker.errors import (
    HttpPermanentError,
    HttpTransientError,
    JobTimeLimitError,
    PermanentError,
    TimeLimitInterrupt,
    TransientError,
)
from sqs_jobs.worker.http import (
    DEFAULT_MAX_RESPONSE_BYTES,
    HttpClient,
    HttpDeadlineError,
    HttpResponseTooLargeError,
    JobHttp,
)
from sqs_jobs.worker.http_deadline import WATCHDOG_THREAD_NAME, Deadline
from sqs_jobs.worker.time_limit import JobRun, JobRunner

pytestmark = pytest.mark.timeout(60)

DRIP_S = 0.2  # one byte every 0.2 s: each read gets a byte well within any read timeout below
TOTAL_S = 1.0
# The call ends at its deadline (1.000-1.003 s measured); the slack is for a loaded 2-core test machine, far
# below what any dripping phase below would take.
SLACK_S = 0.8
BODY = b"0123456789" * 10


def drip(write: Callable[[bytes], Any], data: bytes) -> None:
    for index in range(len(data)):
        write(data[index : index + 1])
        time.sleep(DRIP_S)


class Handler(BaseHTTPRequestHandler):
    """Routes: /ok; /drip/<phase> sends its answer at once up to <phase>, then one byte every 0.2 s;
    /bytes?n=&how=length|chunked|gzip|declared&status=; /read-slowly reads the request body 64 KiB per 0.1 s."""

    protocol_version = "HTTP/1.1"  # keep-alive
    server: Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        try:
            if path == "/ok":
                self.answer(200, b'{"ok":true}')
            elif path.startswith("/drip/"):
                self.drip(path.removeprefix("/drip/"))
            elif path == "/bytes":
                self.bytes_answer()
            else:
                self.answer(404, b"")
        except OSError:
            self.close_connection = True  # the client cut the call

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        try:
            while length > 0:
                length -= len(self.rfile.read(min(length, 64 * 1024)))
                time.sleep(0.1)
            self.answer(200, b"read")
        except OSError:
            self.close_connection = True

    def answer(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def drip(self, phase: str) -> None:
        write = self.wfile.write
        self.close_connection = True
        if phase == "status":
            drip(write, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        elif phase == "headers":
            write(b"HTTP/1.1 200 OK\r\n")
            drip(write, b"X-Slow: " + b"a" * 30 + b"\r\nContent-Length: 2\r\n\r\nok")
        elif phase == "body":
            write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY))
            drip(write, BODY)
        elif phase == "chunked":
            write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for index in range(len(BODY)):
                write(b"1\r\n" + BODY[index : index + 1] + b"\r\n")
                time.sleep(DRIP_S)
            write(b"0\r\n\r\n")
        elif phase == "until-close":  # no length: the body ends when the connection closes
            write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            drip(write, BODY)

    def bytes_answer(self) -> None:
        query = {name: values[0] for name, values in parse_qs(urlsplit(self.path).query).items()}
        size, how, status = int(query["n"]), query.get("how", "length"), int(query.get("status", "200"))
        body = b"x" * size
        if how == "length":
            self.answer(status, body)
        elif how == "gzip":
            self.answer(status, gzip.compress(body), Content_Encoding="gzip")
        elif how == "chunked":
            self.send_response(status)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, size, 64 * 1024):
                piece = body[start : start + 64 * 1024]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif how == "declared":  # declares `n` bytes, then sends them slowly
            self.close_connection = True
            self.send_response(status)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            drip(self.wfile.write, body[:50])


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # 100 connects at once: the default backlog of 5 would drop SYNs

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.connections = 0
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client that cut its call resets the connection
            super().handle_error(request, client_address)


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.server_close()


@pytest.fixture
def raw_server() -> Iterator[Callable[[Callable[[socket.socket], None]], int]]:
    """A bare TCP server on 127.0.0.1 running `handle(connection)` for each connection; returns its port."""
    listeners: list[socket.socket] = []

    def start(handle: Callable[[socket.socket], None]) -> int:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def accept() -> None:
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=serve_one, args=(connection,), daemon=True).start()

        def serve_one(connection: socket.socket) -> None:
            with connection, suppress(OSError):  # the client cut the call
                handle(connection)

        threading.Thread(target=accept, daemon=True).start()
        return int(listener.getsockname()[1])

    yield start
    for listener in listeners:
        listener.close()


def client(**kwargs: Any) -> HttpClient:
    # Connect and read timeouts far above the drip, so that only the whole-call timeout can end a dripping call
    # (even on a loaded machine whose server threads stall now and then).
    return HttpClient(connect_timeout_s=5, read_timeout_s=5, total_timeout_s=TOTAL_S, **kwargs)


def timed(call: Callable[[], Any]) -> tuple[BaseException | None, float]:
    started = time.monotonic()
    try:
        call()
    except BaseException as error:
        return error, time.monotonic() - started
    return None, time.monotonic() - started


def assert_cut_at_deadline(
    error: BaseException | None, elapsed_s: float, total_s: float = TOTAL_S, slack_s: float = SLACK_S
) -> None:
    assert isinstance(error, HttpDeadlineError), repr(error)
    assert isinstance(error, HttpTransientError) and isinstance(error, TransientError)
    assert error.status is None
    assert total_s - 0.05 <= elapsed_s <= total_s + slack_s


# --- the bound, phase by phase -------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["status", "headers", "body", "chunked", "until-close"])
def test_a_dripping_answer_is_cut_at_the_whole_call_timeout(server: Server, phase: str) -> None:
    # Each phase drips for 3 s to 20 s: without the whole-call bound the call would last that long.
    error, elapsed_s = timed(lambda: client().request("GET", f"{server.url}/drip/{phase}"))

    assert_cut_at_deadline(error, elapsed_s)


@pytest.mark.slow
def test_the_issues_example_ends_at_connect_plus_read(raw_server: Callable[..., int]) -> None:
    # A byte every 0.5 s held a call with 1 s + 1 s timeouts for 8 s.
    def handle(connection: socket.socket) -> None:
        connection.recv(65536)
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok":
            connection.sendall(bytes([byte]))
            time.sleep(0.5)

    port = raw_server(handle)

    error, elapsed_s = timed(
        lambda: HttpClient(connect_timeout_s=1, read_timeout_s=1).request("GET", f"http://127.0.0.1:{port}/")
    )

    assert_cut_at_deadline(error, elapsed_s, total_s=2.0)


def test_a_slow_tls_handshake_is_cut(raw_server: Callable[..., int]) -> None:
    # The server takes the ClientHello and answers with a TLS record header announcing 16 KiB, then drips it.
    def handle(connection: socket.socket) -> None:
        connection.recv(65536)
        connection.sendall(b"\x16\x03\x03\x40\x00")
        drip(connection.sendall, b"\x02" * 200)

    port = raw_server(handle)

    error, elapsed_s = timed(lambda: client().request("GET", f"https://127.0.0.1:{port}/"))

    assert_cut_at_deadline(error, elapsed_s)


def test_a_server_reading_the_request_slowly_is_cut(server: Server) -> None:
    # 32 MiB at 640 KiB/s would take 50 s.
    error, elapsed_s = timed(lambda: client().request("POST", f"{server.url}/read-slowly", body=b"x" * (32 << 20)))

    assert_cut_at_deadline(error, elapsed_s)


def test_total_timeout_can_be_set_below_connect_plus_read(server: Server) -> None:
    bounded = HttpClient(total_timeout_s=0.6)  # connect 10 s + read 30 s

    error, elapsed_s = timed(lambda: bounded.request("GET", f"{server.url}/drip/body"))

    assert bounded.total_timeout_s == 0.6
    assert_cut_at_deadline(error, elapsed_s, total_s=0.6)


def test_the_default_whole_call_timeout_is_connect_plus_read() -> None:
    assert HttpClient().total_timeout_s == 40.0
    assert HttpClient(connect_timeout_s=2, read_timeout_s=3).total_timeout_s == 5.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"total_timeout_s": 0},
        {"total_timeout_s": -1},
        {"connect_timeout_s": 0},
        {"read_timeout_s": True},
        {"max_response_bytes": 0},
    ],
)
def test_bad_timeouts_and_caps_are_refused_with_what_is_accepted(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"HttpClient \w+ .*: accepted is a number greater than 0"):
        HttpClient(**kwargs)


def test_a_bad_cap_for_one_call_is_refused_before_the_call(server: Server) -> None:
    with pytest.raises(ValueError, match="HttpClient max_response_bytes -1: accepted is a number greater than 0"):
        client().request("GET", f"{server.url}/ok", max_response_bytes=-1)

    assert server.connections == 0


def test_a_fast_answer_within_the_bound_is_not_cut(server: Server) -> None:
    response = client().request("GET", f"{server.url}/ok")

    assert (response.status, response.json()) == (200, {"ok": True})


# --- connections: kept alive when healthy, never reused after a cut ------------------------------------------


def test_kept_alive_connections_are_reused(server: Server) -> None:
    http = client()

    for _ in range(5):
        assert http.request("GET", f"{server.url}/ok").status == 200

    assert server.connections == 1


def test_a_connection_cut_at_its_deadline_is_never_reused(server: Server) -> None:
    http = client()
    assert http.request("GET", f"{server.url}/ok").status == 200

    with pytest.raises(HttpDeadlineError):
        http.request("GET", f"{server.url}/drip/body")  # on the kept-alive connection
    after = http.request("GET", f"{server.url}/ok")

    assert after.status == 200
    assert server.connections == 2  # the next call opened a fresh one


def test_a_deadline_that_fires_after_the_call_let_go_leaves_the_socket_alone() -> None:
    # The pooled connection may already serve another call: a late firing must not touch it.
    ours, peer = socket.socketpair()
    with ours, peer:
        deadline = Deadline(60)
        deadline.attach(ours)

        assert deadline.detach() is True
        deadline.fire()

        ours.sendall(b"still open")
        assert peer.recv(16) == b"still open"
        assert not deadline.fired


def test_a_fired_deadline_shuts_the_socket_and_marks_the_connection_broken() -> None:
    ours, peer = socket.socketpair()
    with ours, peer:
        deadline = Deadline(60)
        deadline.attach(ours)

        deadline.fire()

        assert ours.recv(16) == b""  # a blocked read returns end-of-file
        assert deadline.detach() is False
        assert deadline.fired


def test_a_socket_attached_after_the_deadline_is_shut_at_once() -> None:
    # The deadline passed while the call was still connecting (or resolving the name).
    ours, peer = socket.socketpair()
    with ours, peer:
        deadline = Deadline(60)
        deadline.fire()

        deadline.attach(ours)

        assert ours.recv(16) == b""
        deadline.detach()


# --- many calls at once ---------------------------------------------------------------------------------------


def test_a_hundred_calls_in_flight_share_the_pool_and_one_watchdog(server: Server) -> None:
    http = client(connections_per_host=100)
    http.request("GET", f"{server.url}/ok")  # starts the watchdog if no earlier test did
    threads_before = threading.active_count()

    with ThreadPoolExecutor(max_workers=100) as pool:
        answers = list(pool.map(lambda _: http.request("GET", f"{server.url}/ok").status, range(100)))
        client_threads = threading.active_count() - threads_before

    assert answers == [200] * 100
    assert [t.name for t in threading.enumerate()].count(WATCHDOG_THREAD_NAME) == 1
    # the executor's 100 and the server's handlers for at most 100 connections: none per call
    assert client_threads <= 200


def test_a_hundred_dripping_calls_at_once_each_end_at_their_deadline(server: Server) -> None:
    http = client(connections_per_host=100)

    def call(_: int) -> tuple[BaseException | None, float]:
        return timed(lambda: http.request("GET", f"{server.url}/drip/body"))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=100) as pool:
        outcomes = list(pool.map(call, range(100)))

    # 200 threads (ours and the server's) on 2 cores: more slack, still far from 100 calls one after another.
    for error, elapsed_s in outcomes:
        assert_cut_at_deadline(error, elapsed_s, slack_s=2 * SLACK_S)
    assert time.monotonic() - started <= TOTAL_S + 3 * SLACK_S


# --- the size cap ---------------------------------------------------------------------------------------------

CAP = 1 << 20


@pytest.mark.parametrize("how", ["length", "chunked", "gzip"])
def test_a_body_over_the_cap_is_refused_as_permanent(server: Server, how: str) -> None:
    with pytest.raises(HttpResponseTooLargeError) as raised:
        client(max_response_bytes=CAP).request("GET", f"{server.url}/bytes?n={CAP + 1}&how={how}")

    assert isinstance(raised.value, HttpPermanentError) and isinstance(raised.value, PermanentError)
    assert raised.value.status == 200


def test_a_declared_length_over_the_cap_is_refused_before_reading(server: Server) -> None:
    # The body would drip for 10 s; refused on its Content-Length alone.
    error, elapsed_s = timed(
        lambda: HttpClient(max_response_bytes=CAP).request("GET", f"{server.url}/bytes?n={CAP + 1}&how=declared")
    )

    assert isinstance(error, HttpResponseTooLargeError)
    assert elapsed_s < 1.0


@pytest.mark.parametrize("how", ["length", "chunked", "gzip"])
def test_a_body_at_the_cap_is_whole(server: Server, how: str) -> None:
    response = client(max_response_bytes=CAP).request("GET", f"{server.url}/bytes?n={CAP}&how={how}")

    assert response.data == b"x" * CAP


def test_an_error_status_keeps_its_class_whatever_its_body(server: Server) -> None:
    with pytest.raises(HttpTransientError) as raised:
        client(max_response_bytes=CAP).request("GET", f"{server.url}/bytes?n={CAP * 2}&status=503")

    assert not isinstance(raised.value, HttpDeadlineError)
    assert raised.value.status == 503


def test_a_call_may_raise_its_own_cap(server: Server) -> None:
    http = JobHttp(client(max_response_bytes=CAP), "job:1")

    response = http.get(f"{server.url}/bytes?n={CAP * 2}", max_response_bytes=CAP * 2)

    assert len(response.data) == CAP * 2


def test_a_refused_body_does_not_poison_the_pool(server: Server) -> None:
    http = client(max_response_bytes=CAP)
    with pytest.raises(HttpResponseTooLargeError):
        http.request("GET", f"{server.url}/bytes?n={CAP * 2}")

    assert http.request("GET", f"{server.url}/ok").json() == {"ok": True}
    assert server.connections == 2  # the half-read connection was closed, not reused


def test_the_default_cap_is_five_mib() -> None:
    assert DEFAULT_MAX_RESPONSE_BYTES == 5 * 1024 * 1024
    assert HttpClient().max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES


# --- a run cut at its time limit ------------------------------------------------------------------------------


def test_a_cut_runs_dripping_call_ends_at_its_deadline_and_its_thread_with_it(server: Server) -> None:
    # The issue: a cut thread and its connection lived on for as long as the server dripped.
    ended = threading.Event()
    runner = JobRunner(on_cut_run_end=lambda _run: ended.set())
    http = client()
    started = time.monotonic()
    run = JobRun(
        key="job:1", limit_s=0.3, target=lambda: http.request("GET", f"{server.url}/drip/body"), args=(), job="job"
    )

    with pytest.raises(JobTimeLimitError):
        runner.run(run)

    assert ended.wait(TOTAL_S + SLACK_S)
    assert TOTAL_S - 0.05 <= time.monotonic() - started <= TOTAL_S + SLACK_S
    assert isinstance(run.error, TimeLimitInterrupt)  # the fence refused the call's late outcome
    assert isinstance(run.error.__context__, HttpDeadlineError)
    runner.close()
