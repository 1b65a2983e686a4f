"""Whole-call deadlines for urllib3: a call of the jobs' HTTP client ends by its deadline, whatever the server does.

urllib3's timeouts bound each socket operation, not the call. Its `Timeout` documentation says so: the read and
total timeouts "only measure the time between read operations on the socket", so "if a server streams one byte
every fifteen seconds, a timeout of 20 seconds will not trigger". Measured with urllib3 2.8:
`Timeout(total=1)` against a server sending one byte every 0.2 s took 7.8 s for a status line and 15.6 s for a
40-byte body. So each call gets a `Deadline`, and one thread watches them all:

- The calling thread makes its deadline current for the call (`watching`). The pool's connections
  (`DeadlinePoolManager`) attach their socket to it as soon as there is one: a new connection right after its
  TCP connect (before TLS), a kept-alive one before the request is sent. A new connect gets at most the time
  left.
- One daemon thread for the process (`_Watchdog`, started by the first call: no thread per call) keeps the
  deadlines in a heap and, at a deadline, shuts the attached socket down (`shutdown(SHUT_RDWR)`): a blocked read
  returns end-of-file and a blocked send fails, whatever the phase (TLS handshake, request, status line, headers,
  body). urllib3's own `HTTPResponse.shutdown()` (2.3+, for a response's body read from another thread, urllib3
  issue #2868) works the same way; this covers the whole call and needs only what urllib3 1.26 has too (Lambda's
  runtime brings its own urllib3).
- The watchdog shuts down a private duplicate of the socket's descriptor (shutdown acts on the socket, not the
  descriptor): it can never hit a descriptor number that the call has closed and the process reused. That costs
  one more descriptor per call in flight (AWS's "Lambda quotas": 1,024 file descriptors per environment).
- A connection goes back to the pool only through `_put_conn`, which first detaches the deadline under its lock:
  from then on the watchdog can't touch that socket, even if another call now uses it. A connection whose
  deadline fired is closed there instead: never reused.
- A deadline that fired is the call's failure even when the response looked complete: a body read until the
  connection closes would otherwise end, truncated, at the shutdown.

A Lambda environment frozen between invocations thaws with its clock moved on: the deadlines of calls left in
flight (cut runs) fire at once.

Not covered: DNS resolution, which no socket timeout reaches either (urllib3's `Timeout` note); a call stuck in
it fails when the resolver returns. A host with several addresses is tried address by address, each with at most
the time left when the connect began.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError

WATCHDOG_THREAD_NAME = "http-deadlines"


class Deadline:
    """One call's deadline (monotonic). Thread-safe: the calling thread attaches and detaches, the watchdog fires."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.at = time.monotonic() + timeout_s
        self._lock = threading.Lock()
        self._watched: socket.socket | None = None
        self._fired = False
        self._detached = False

    @property
    def fired(self) -> bool:
        return self._fired

    def left_s(self) -> float:
        return self.at - time.monotonic()

    def attach(self, sock: socket.socket) -> None:
        """Watch the call's socket (once per call; later sockets of the same call are ignored)."""
        with self._lock:
            if self._detached or self._watched is not None:
                return
            try:
                self._watched = socket.fromfd(sock.fileno(), sock.family, sock.type, sock.proto)
            except OSError:
                return  # closed already: nothing left to stop
            if self._fired:
                _shut(self._watched)

    def fire(self) -> None:
        """The deadline has come: stop the call's socket, unless the call let go of it first."""
        with self._lock:
            if self._detached:
                return
            self._fired = True
            if self._watched is not None:
                _shut(self._watched)

    def detach(self) -> bool:
        """Stop watching (idempotent); False when the deadline fired first, so the connection is broken."""
        with self._lock:
            self._detached = True
            if self._watched is not None:
                self._watched.close()
                self._watched = None
            return not self._fired


def _shut(sock: socket.socket) -> None:
    with suppress(OSError):  # the peer or the call closed it already
        sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """Fires deadlines in time order. A deadline whose call ended stays in the heap until its time, as a no-op:
    the heap holds the calls started within the last whole-call timeout."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: Deadline) -> None:
        with self._changed:
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=WATCHDOG_THREAD_NAME, daemon=True)
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._changed.notify()  # earlier than what the thread waits for

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._heap:
                    self._changed.wait()
                at, _, deadline = self._heap[0]
                wait_s = at - time.monotonic()
                if wait_s > 0:
                    self._changed.wait(wait_s)
                    continue
                heapq.heappop(self._heap)
            deadline.fire()


_WATCHDOG = _Watchdog()
_current = threading.local()


def _current_deadline() -> Deadline | None:
    deadline: Deadline | None = getattr(_current, "deadline", None)
    return deadline


@contextmanager
def watching(deadline: Deadline) -> Iterator[Deadline]:
    """Make `deadline` the calling thread's for one call through a `DeadlinePoolManager`; detached on exit."""
    _WATCHDOG.watch(deadline)
    _current.deadline = deadline
    try:
        yield deadline
    finally:
        _current.deadline = None
        deadline.detach()


class _HTTPConnection(HTTPConnection):
    """A connection that attaches its socket to the calling thread's deadline (HTTPS too: `_HTTPSConnection`)."""

    _deadline: Deadline | None = None

    def _new_conn(self) -> socket.socket:
        deadline = _current_deadline()
        if deadline is None:
            return super()._new_conn()
        left_s = deadline.left_s()
        if deadline.fired or left_s <= 0:
            raise ConnectTimeoutError(self, f"Connection to {self.host} not started: the call's deadline passed")
        if isinstance(self.timeout, int | float):
            self.timeout = min(self.timeout, left_s)
        sock = super()._new_conn()
        self._watch(sock, deadline)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        deadline = _current_deadline()
        if deadline is not None and self.sock is not None:  # kept alive: no _new_conn this time
            self._watch(self.sock, deadline)
        super().request(*args, **kwargs)

    def _watch(self, sock: socket.socket, deadline: Deadline) -> None:
        self._deadline = deadline
        deadline.attach(sock)

    def let_go(self) -> bool:
        """Detach the connection from its call's deadline; False when that deadline fired."""
        deadline, self._deadline = self._deadline, None
        return deadline is None or deadline.detach()


class _HTTPSConnection(_HTTPConnection, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection

    def _put_conn(self, conn: Any) -> None:
        if isinstance(conn, _HTTPConnection) and not conn.let_go():
            conn.close()  # its socket was shut down at the deadline: never reused
        super()._put_conn(conn)


class _HTTPSPool(_HTTPPool, HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class DeadlinePoolManager(urllib3.PoolManager):
    """A PoolManager whose connections honour the calling thread's `Deadline` (see `watching`)."""

    def __init__(self, **pool_kw: Any) -> None:
        super().__init__(**pool_kw)
        self.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
