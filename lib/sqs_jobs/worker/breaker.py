"""Circuit breakers: one per downstream of a worker's jobs, so a downstream that is down stops being called.

A breaker is closed while its downstream answers. `failure_threshold` consecutive transient failures open it:
calls are then refused without being made (CircuitOpenError), and the runtime hands their records back for later
without spending an attempt. After `open_s` one call at a time may probe the downstream: a success closes the
breaker, a failure opens it again for twice as long (at most `max_open_s`).

State is per worker (one execution environment) and in memory: docs/failure-semantics.md says why that is enough.
Pure bookkeeping on an injectable clock, so `bench/outage.py` drives this very code on a virtual clock.

A downstream may be a producer's (a host a job calls for a tenant), so a worker keeps at most MAX_BREAKERS. Evicted
first, least recently used, is a breaker that knows nothing a new one wouldn't (closed, no failure counted); only
when every one knows something does the least recently used go, which leaves the worker as a new execution
environment would be: knowing nothing of that downstream.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from enum import Enum
from typing import Final

from sqs_jobs.limits import SQS_MAX_DELAY_S
from sqs_jobs.specs import CircuitBreakerSpec
from sqs_jobs.worker.errors import CircuitOpenError, HeldBackError

# A probe whose outcome never arrives (its run was abandoned in a way no hook saw) frees its slot after this long:
# longer than any one call of a job may take (the HTTP client's 10 s connect + 30 s read, botocore's retries).
PROBE_EXPIRY_S = 90.0
# Downstreams a worker keeps a breaker of: far more than a queue's jobs call, unless their hosts are its tenants'.
MAX_BREAKERS = 256


class State(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Ticket:
    """One admitted call. Only a ticket of the breaker's current generation changes its state: a call admitted
    before the breaker opened that ends after it says nothing about the downstream now."""

    # Plain classes, this and Snapshot: a dataclass's generated methods cost every cold start half a millisecond.
    __slots__ = ("breaker", "generation", "probe")

    def __init__(self, breaker: CircuitBreaker, generation: int, probe: bool) -> None:
        self.breaker: Final = breaker
        self.generation: Final = generation
        self.probe: Final = probe

    def succeeded(self) -> None:
        self.breaker._settle(self, ok=True)

    def failed(self, error: str) -> None:
        self.breaker._settle(self, ok=False, error=error)

    def tripped(self, error: str) -> float:
        """The downstream refused the deployment itself (its credentials): open now, whatever the count; how long
        it stays open."""
        return self.breaker._trip(self, error)

    def abandoned(self) -> None:
        """The outcome is unknown (the run was cut, or something else ended the call): a probe frees its slot,
        nothing else changes."""
        self.breaker._settle(self, ok=None)


class Snapshot:
    __slots__ = ("consecutive_failures", "downstream", "last_error", "open_for_s", "opened", "state")

    def __init__(
        self, downstream: str, state: State, consecutive_failures: int, opened: int, open_for_s: float, last_error: str
    ) -> None:
        self.downstream: Final = downstream
        self.state: Final = state
        self.consecutive_failures: Final = consecutive_failures
        self.opened: Final = opened
        self.open_for_s: Final = open_for_s
        self.last_error: Final = last_error


class CircuitBreaker:
    """The breaker of one downstream. Thread-safe: a worker's records run in parallel."""

    def __init__(
        self,
        downstream: str,
        spec: CircuitBreakerSpec,
        clock: Callable[[], float] = time.monotonic,
        on_open: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self.downstream = downstream
        self._spec = spec
        self._clock = clock
        self._on_open = on_open
        self._lock = threading.Lock()
        self._state = State.CLOSED
        self._generation = 0
        self._failures = 0
        self._open_for_s = spec.open_s
        self._retry_at = 0.0
        self._probe_since: float | None = None
        self._opened = 0
        self._last_error = ""

    def admit(self) -> Ticket:
        """A ticket for one call, or CircuitOpenError if the call must not be made now."""
        with self._lock:
            now = self._clock()
            if self._state is State.CLOSED:
                return Ticket(self, self._generation, probe=False)
            if self._state is State.OPEN and now >= self._retry_at:
                self._transition(State.HALF_OPEN)
            if self._state is State.HALF_OPEN:
                if self._probe_since is None or now - self._probe_since >= PROBE_EXPIRY_S:
                    self._probe_since = now
                    return Ticket(self, self._generation, probe=True)
                # A probe is out: its answer decides, soon.
                raise self._refusal(retry_after_s=0.0)
            raise self._refusal(retry_after_s=self._retry_at - now)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot()

    def knows_nothing(self) -> bool:
        """Closed, no failure counted, no probe out: a new breaker of its downstream would be the same."""
        with self._lock:
            return self._state is State.CLOSED and self._failures == 0 and self._probe_since is None

    def _snapshot(self) -> Snapshot:
        return Snapshot(
            downstream=self.downstream,
            state=self._state,
            consecutive_failures=self._failures,
            opened=self._opened,
            open_for_s=self._open_for_s,
            last_error=self._last_error,
        )

    def _refusal(self, retry_after_s: float) -> CircuitOpenError:
        return CircuitOpenError(
            f"circuit breaker for {self.downstream} is open after {self._failures} consecutive transient "
            f"failures (last: {self._last_error or 'unknown'}); the call was not made",
            downstream=self.downstream,
            retry_after_s=max(0.0, retry_after_s),
            open_for_s=self._open_for_s,
        )

    def _transition(self, state: State) -> None:
        self._state = state
        self._generation += 1
        self._probe_since = None

    def _open(self, now: float) -> None:
        self._transition(State.OPEN)
        self._retry_at = now + self._open_for_s

    def _settle(self, ticket: Ticket, ok: bool | None, error: str = "") -> None:
        opened: Snapshot | None = None
        with self._lock:
            if ticket.generation != self._generation:
                return
            now = self._clock()
            if ok is None:
                if ticket.probe:
                    self._probe_since = None
                return
            if ok:
                if self._state is not State.CLOSED:
                    self._transition(State.CLOSED)
                self._failures = 0
                self._open_for_s = self._spec.open_s
                return
            self._failures += 1
            self._last_error = error[:200]
            if ticket.probe:
                self._open_for_s = min(self._open_for_s * 2, self._spec.max_open_s)
                self._open(now)
            elif self._failures >= self._spec.failure_threshold:
                self._opened += 1
                self._open(now)
                opened = self._snapshot()
        if opened is not None and self._on_open is not None:
            self._on_open(opened)

    def _trip(self, ticket: Ticket, error: str) -> float:
        opened: Snapshot | None = None
        with self._lock:
            now = self._clock()
            self._last_error = error[:200]
            if ticket.generation == self._generation and self._state is not State.OPEN:
                self._failures = max(self._failures + 1, self._spec.failure_threshold)
                if ticket.probe:  # refused again after a while open: wait twice as long
                    self._open_for_s = min(self._open_for_s * 2, self._spec.max_open_s)
                self._opened += 1
                self._open(now)
                opened = self._snapshot()
            open_for_s = self._open_for_s
        if opened is not None and self._on_open is not None:
            self._on_open(opened)
        return open_for_s


class Breakers:
    """A worker's breakers, one per downstream name, made on its first call."""

    def __init__(
        self,
        spec: CircuitBreakerSpec,
        clock: Callable[[], float] = time.monotonic,
        on_open: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self.spec = spec
        self._clock = clock
        self._on_open = on_open
        self._lock = threading.Lock()
        # Least recently used first.
        self._breakers: OrderedDict[str, CircuitBreaker] = OrderedDict()

    def admit(self, downstream: str) -> Ticket | None:
        """A ticket for one call to `downstream` (None: breakers are off), or CircuitOpenError."""
        if not self.spec.enabled:
            return None
        return self.breaker(downstream).admit()

    def breaker(self, downstream: str) -> CircuitBreaker:
        with self._lock:
            found = self._breakers.get(downstream)
            if found is not None:
                self._breakers.move_to_end(downstream)
                return found
            found = CircuitBreaker(downstream, self.spec, self._clock, self._on_open)
            self._breakers[downstream] = found
            if len(self._breakers) > MAX_BREAKERS:
                older = itertools.islice(self._breakers.items(), len(self._breakers) - 1)  # not the one just made
                idle = next((name for name, kept in older if kept.knows_nothing()), None)
                del self._breakers[idle if idle is not None else next(iter(self._breakers))]
            return found

    def snapshots(self) -> list[Snapshot]:
        with self._lock:
            breakers = list(self._breakers.values())
        return [breaker.snapshot() for breaker in breakers]


def hold_delay_s(refusal: HeldBackError, rng: random.Random) -> int:
    """How long a held record waits before it is tried again: until what held it may let it through (an open
    breaker a probe, a rate limit its token), plus jitter over its spread (one open period, the tokens' interval),
    so the records held together come back spread out rather than as one wave; whole seconds (SQS's unit), at
    least 1."""
    delay_s = refusal.retry_after_s + rng.uniform(0.0, refusal.spread_s)
    return max(1, min(SQS_MAX_DELAY_S, math.ceil(delay_s)))
