"""A downstream outage in virtual time: retry storms, measured.

`make bench` (or `python -m bench.outage --help`). Jobs wait in an SQS queue; a fixed number of workers take one
message each, call a downstream that is down for the first `outage_s` seconds, and on failure leave it to a retry
policy when the message becomes visible again:

- immediate retry: visibility 0 after a failure, the retry storm the article warns of (rule 3);
- fixed visibility: nothing changes the visibility, so the message reappears a visibility timeout after it was
  received (what an SQS + Lambda consumer does by default): SQS's 30 s default, and the stack's default timeout;
- this runtime: `sqs_jobs.worker.backoff.backoff_delay_s` with the catalog's `QueueSpec` defaults, clamped as
  `sqs_jobs.worker.settlement` clamps it;
- this runtime with its circuit breakers: the same backoff, and before each call the worker's own
  `sqs_jobs.worker.breaker.Breakers` (the real code, on the virtual clock) admits the call or refuses it; a
  refused record is handed back unrun (the message visible again after `hold_delay_s`, no run spent: runs are
  counted apart from receives, as the runtime counts them in the key's record) for up to `max_hold_s` from its
  first hand-back, after which a refusal is a failed attempt;
- this runtime with Powertools' circuit breaker (`aws_lambda_powertools.utilities.circuit_breaker`) instead of its
  own: the same backoff and hand-backs, but the breaker is Powertools' real `CircuitBreakerHandler`, its state
  one DynamoDB item shared by every worker (Powertools' `CircuitBreakerDynamoDBPersistence` on moto's DynamoDB, in
  this process), each worker one execution environment with its own local cache and counters. Powertools reads the
  time itself (`datetime.now()`, no clock to inject), so the simulation puts its virtual clock in place of the
  `datetime` module of Powertools' circuit-breaker modules while it runs, and puts it back. Its DynamoDB requests
  are counted, and each costs the worker `store_s`.

A discrete-event simulation on a virtual clock (a heap of events; no sleeping, no threads): the same arguments and
seed give the same figures, and 1,000 jobs take milliseconds (with Powertools' breaker, a second or two: its
DynamoDB requests go through moto; `--no-powertools` leaves it out). The only randomness is the jitter of the
backoff and of the hand-backs' delays, drawn from a seeded `random.Random`. docs/benchmarks.md states the
assumptions and records the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import heapq
import itertools
import json
import math
import random
import statistics
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.circuit_breaker import (
    CircuitBreakerConfig,
    CircuitBreakerOpenError,
    CircuitState,
    CircuitTransition,
)
from aws_lambda_powertools.utilities.circuit_breaker import base as powertools_base

from bench.cost import Prices
from sqs_jobs.limits import HAND_BACK_RECEIVES, SQS_MAX_VISIBILITY_S
from sqs_jobs.specs import CircuitBreakerSpec, QueueSpec
from sqs_jobs.worker.backoff import backoff_delay_s
from sqs_jobs.worker.breaker import Breakers, Ticket, hold_delay_s
from sqs_jobs.worker.errors import CircuitOpenError

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.circuit_breaker.persistence import CircuitBreakerPersistenceLayer
    from mypy_boto3_dynamodb.client import DynamoDBClient

# The catalog's defaults, as every queue that sets nothing gets them (the shipped `orders` queue does).
DEFAULTS = QueueSpec(name="outage_bench", jobs=())

# SQS's VisibilityTimeout when a queue is created without one.
SQS_DEFAULT_VISIBILITY_S = 30
# "A comparable drain time": at most this many times fixed 30 s visibility's.
DRAIN_TOLERANCE = 1.5
# The circuit breaker's goals (the issue's): during the outage at most this share of immediate retry's calls, and a
# drain at most this many times fixed 30 s visibility's; nothing dead-lettered.
BREAKER_CALLS_SHARE = 0.1
BREAKER_DRAIN_TOLERANCE = 1.2
# The one downstream every job calls: one breaker per worker.
DOWNSTREAM = "downstream"
# The grid `--sweep` tries for the runtime's backoff.
SWEEP_BASES_S = (1, 2, 5, 10, 20, 30)
SWEEP_CAPS_S = (60, 120, 300, 900)
SWEEP_MAX_ATTEMPTS = (5, 8, 10)
# The grid `--sweep-breaker` tries for the circuit breaker.
SWEEP_THRESHOLDS = (1, 3, 5, 10)
SWEEP_OPEN_S = (1.0, 2.0, 5.0, 10.0)
SWEEP_MAX_OPEN_S = (10.0, 20.0, 30.0, 60.0, 120.0)
# Powertools' circuit breaker: the virtual clock's t=0 as the Unix time its code reads (whole seconds), the
# DynamoDB table of its state (one item per circuit), and what one DynamoDB request costs the worker that makes it
# (`store_s`: an assumption, DynamoDB's "single-digit milliseconds" from a Lambda function in its region).
POWERTOOLS_EPOCH_S = 1_800_000_000
POWERTOOLS_TABLE = "circuit_breaker_state"
STORE_S = 0.005
# On-demand capacity per request for an item under 1 KB: a write is 1 write request unit (a conditional write that
# fails too); Powertools' read is eventually consistent (ConsistentRead=False), half a read request unit.
WRU_PER_WRITE = 1.0
RRU_PER_READ = 0.5
MILLION = 1_000_000


class Kind(Enum):
    IMMEDIATE = "immediate"
    FIXED = "fixed"
    BACKOFF = "backoff"
    BREAKER = "breaker"
    POWERTOOLS = "powertools"


@dataclass(frozen=True)
class PowertoolsSpec:
    """The settings of Powertools' `CircuitBreakerConfig` that the simulation uses (its class compares by identity,
    a policy by value)."""

    failure_threshold: int  # consecutive failures, counted per execution environment, that open the circuit
    recovery_timeout: int  # whole seconds open before one probe may be elected
    success_threshold: int  # consecutive probe successes that close it
    local_cache_max_age: int  # seconds an environment trusts its cached copy of the item before reading it again

    def config(self) -> CircuitBreakerConfig:
        return CircuitBreakerConfig(
            failure_threshold=self.failure_threshold,
            recovery_timeout=self.recovery_timeout,
            success_threshold=self.success_threshold,
            local_cache_max_age=self.local_cache_max_age,
        )


@dataclass(frozen=True)
class Policy:
    """When a message whose run failed becomes visible again."""

    label: str
    kind: Kind
    visibility_s: float = 0.0  # FIXED: the queue's visibility timeout
    base_s: float = 0.0  # BACKOFF
    cap_s: float = 0.0  # BACKOFF
    function_timeout_s: int = 0  # BACKOFF: the runtime keeps a delay within 12 h of the receive
    # BREAKER (with the backoff above); POWERTOOLS: the runtime's hand-backs (max_hold_s), not its breakers
    breaker: CircuitBreakerSpec | None = None
    powertools: PowertoolsSpec | None = None  # POWERTOOLS

    @property
    def dead_letters_itself(self) -> bool:
        """The runtime dead-letters on its last failed attempt; SQS's redrive moves a message on the receive after
        its last one (modelled as the moment it becomes visible again)."""
        return self.kind in (Kind.BACKOFF, Kind.BREAKER, Kind.POWERTOOLS)

    @property
    def jittered(self) -> bool:
        return self.kind in (Kind.BACKOFF, Kind.BREAKER, Kind.POWERTOOLS)

    def visible_at(
        self, received_s: float, failed_s: float, attempt: int, rng: random.Random, floor_s: float | None = None
    ) -> float:
        """`floor_s`: the error's retry-after, which the runtime's backoff never goes below (a refusal's time
        until the breaker lets a probe through, `sqs_jobs.worker.classify`)."""
        if self.kind is Kind.IMMEDIATE:
            return failed_s
        if self.kind is Kind.FIXED:
            # The visibility timeout counts from the receive, not from the failure.
            return max(failed_s, received_s + self.visibility_s)
        delay_s = backoff_delay_s(attempt, self.base_s, self.cap_s, rng, floor_s=floor_s)
        delay_s = min(delay_s, SQS_MAX_VISIBILITY_S - self.function_timeout_s)
        return failed_s + delay_s


def immediate_retry() -> Policy:
    return Policy(label="immediate retry (visibility 0)", kind=Kind.IMMEDIATE)


def fixed_visibility(visibility_s: int, label: str | None = None) -> Policy:
    return Policy(label=label or f"fixed {visibility_s} s visibility", kind=Kind.FIXED, visibility_s=visibility_s)


def runtime_backoff(spec: QueueSpec = DEFAULTS, label: str | None = None) -> Policy:
    return Policy(
        label=label or f"this runtime: full-jitter backoff (base {spec.backoff_base_s} s, cap {spec.backoff_cap_s} s)",
        kind=Kind.BACKOFF,
        base_s=spec.backoff_base_s,
        cap_s=spec.backoff_cap_s,
        function_timeout_s=spec.function_timeout_s,
    )


def runtime_breaker(spec: QueueSpec = DEFAULTS, label: str | None = None) -> Policy:
    breaker = spec.circuit_breaker
    return Policy(
        label=label
        or (
            f"this runtime + circuit breaker ({breaker.failure_threshold} failures, open {breaker.open_s:g}.."
            f"{breaker.max_open_s:g} s)"
        ),
        kind=Kind.BREAKER,
        base_s=spec.backoff_base_s,
        cap_s=spec.backoff_cap_s,
        function_timeout_s=spec.function_timeout_s,
        breaker=breaker,
    )


def powertools_like_runtime(spec: QueueSpec = DEFAULTS) -> PowertoolsSpec:
    """Powertools' settings with the runtime's values where it has an equivalent: failure_threshold; open_s as
    recovery_timeout (whole seconds; Powertools never doubles it, so max_open_s has no equivalent); one probe success
    closes it, as the runtime's does. Its local cache has no equivalent and keeps Powertools' default."""
    breaker = spec.circuit_breaker
    return PowertoolsSpec(
        failure_threshold=breaker.failure_threshold,
        recovery_timeout=math.ceil(breaker.open_s),
        success_threshold=1,
        local_cache_max_age=CircuitBreakerConfig().local_cache_max_age,
    )


def powertools_defaults() -> PowertoolsSpec:
    """Powertools' own defaults, read from its CircuitBreakerConfig."""
    config = CircuitBreakerConfig()
    return PowertoolsSpec(
        failure_threshold=config.failure_threshold,
        recovery_timeout=config.recovery_timeout,
        success_threshold=config.success_threshold,
        local_cache_max_age=config.local_cache_max_age,
    )


def powertools_breaker(
    powertools: PowertoolsSpec | None = None, spec: QueueSpec = DEFAULTS, label: str | None = None
) -> Policy:
    """The runtime's backoff and hand-backs, with Powertools' circuit breaker (state shared in DynamoDB) in place of
    the runtime's own: a call it refuses is handed back as the runtime hands back a CircuitOpenError."""
    settings = powertools or powertools_like_runtime(spec)
    probes = f"{settings.success_threshold} probe" + ("s" if settings.success_threshold > 1 else "")
    return Policy(
        label=label
        or (
            f"this runtime + Powertools' breaker ({settings.failure_threshold} failures, open "
            f"{settings.recovery_timeout} s, {probes}, shared)"
        ),
        kind=Kind.POWERTOOLS,
        base_s=spec.backoff_base_s,
        cap_s=spec.backoff_cap_s,
        function_timeout_s=spec.function_timeout_s,
        breaker=spec.circuit_breaker,
        powertools=settings,
    )


def powertools_policies(spec: QueueSpec = DEFAULTS) -> tuple[Policy, ...]:
    """Powertools' circuit breaker, with the runtime's values and with its own defaults."""
    return (
        powertools_breaker(powertools_like_runtime(spec), spec),
        powertools_breaker(powertools_defaults(), spec),
    )


def standard_policies(spec: QueueSpec = DEFAULTS) -> tuple[Policy, ...]:
    """The issue's three policies, plus the stack's own visibility timeout for context, and the runtime with its
    circuit breakers."""
    return (
        immediate_retry(),
        fixed_visibility(SQS_DEFAULT_VISIBILITY_S, f"fixed {SQS_DEFAULT_VISIBILITY_S} s visibility (SQS default)"),
        fixed_visibility(
            spec.visibility_timeout_s,
            f"fixed {spec.visibility_timeout_s} s visibility (stack default, 6 x {spec.function_timeout_s} s timeout)",
        ),
        runtime_backoff(spec),
        runtime_breaker(spec),
    )


@dataclass(frozen=True)
class Scenario:
    """Every job is enqueued at t=0; the downstream is down from t=0 to t=outage_s, then healthy."""

    jobs: int = 1000
    workers: int = 10
    outage_s: float = 120.0
    # A call during the outage fails fast (a 503 or a refused connection); one after it takes the service time.
    fail_s: float = 0.05
    service_s: float = 1.0
    max_attempts: int = DEFAULTS.max_attempts
    # What a hand-back costs the worker (its record's write, the message's visibility change): a few milliseconds.
    hold_s: float = 0.01
    # What one DynamoDB request of Powertools' breaker costs the worker that makes it (the other policies make none).
    store_s: float = STORE_S

    def problems(self) -> list[str]:
        found = []
        if self.jobs < 0:
            found.append("jobs must be at least 0")
        if self.workers < 1:
            found.append("workers must be at least 1")
        if self.outage_s < 0:
            found.append("outage_s must be at least 0")
        if self.fail_s <= 0 or self.service_s <= 0 or self.hold_s <= 0:
            found.append("fail_s, service_s and hold_s must be above 0")
        if self.store_s < 0:
            found.append("store_s must be at least 0")
        if self.max_attempts < 1:
            found.append("max_attempts must be at least 1")
        return found


@dataclass(frozen=True)
class Run:
    """One simulated outage under one policy and one seed."""

    policy: str
    seed: int
    outage_calls: int  # downstream calls started while it was down
    total_calls: int
    completed: int
    dead_lettered: int
    pending_at_recovery: int  # jobs neither completed nor dead-lettered when the downstream came back
    drain_s: float  # from recovery until every job is completed or dead-lettered; 0 if none was left
    p50_s: float | None  # job completion time from enqueue, over completed jobs
    p99_s: float | None
    holds: int = 0  # hand-backs of records refused by an open breaker (the message back, delayed, no run spent)
    refused_attempts: int = 0  # refusals past max_hold_s, each a failed attempt
    breaker_opened: int = 0  # times a breaker opened from closed, over all workers
    # Powertools' breaker: its DynamoDB requests, and the worker time they took (`store_s` each) on the way to the
    # calls made (before and after them) and to the hand-backs.
    store_reads: int = 0  # GetItem
    store_writes: int = 0  # PutItem and UpdateItem, conditional or not, succeeded or not
    lost_elections: int = 0  # conditional writes of a half-open probe election that failed (counted in writes)
    store_wait_calls_s: float = 0.0
    store_wait_holds_s: float = 0.0


_SUCCEEDED, _FAILED, _VISIBLE, _FREE = 0, 1, 2, 3
_NO_WORKER = -1


class _Simulation:
    def __init__(self, policy: Policy, scenario: Scenario, seed: int) -> None:
        problems = scenario.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.policy = policy
        self.scenario = scenario
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0.0
        self.events: list[tuple[float, int, int, int, int]] = []  # (time, tie-break, kind, message, worker)
        self.order = itertools.count()
        # Visible messages in the order they became visible; all of them at t=0.
        self.ready: deque[int] = deque(range(scenario.jobs))
        # Idle workers, the one idle longest first.
        self.idle: deque[int] = deque(range(scenario.workers))
        self.receives = [0] * scenario.jobs  # ApproximateReceiveCount of the message
        self.runs = [0] * scenario.jobs  # the runs the runtime counted in the key's record (a hold gives one back)
        self.held_since: list[float | None] = [None] * scenario.jobs  # first hold, kept in the key's record
        # A refusal past max_hold_s is a failed attempt whose backoff starts at the refusal's retry-after.
        self.retry_after_s: list[float | None] = [None] * scenario.jobs
        self.received_at = [0.0] * scenario.jobs
        self.outage_calls = 0
        self.total_calls = 0
        self.completions: list[float] = []
        self.dead_lettered = 0
        self.settled_before_recovery = 0
        self.last_settled = 0.0
        self.holds = 0
        self.refused_attempts = 0
        # One worker = one execution environment: its own breakers, in memory, on the virtual clock.
        spec = policy.breaker if policy.kind is Kind.BREAKER else None
        self.breakers = [Breakers(spec, clock=self.clock) for _ in range(scenario.workers)] if spec else []
        self.tickets: list[Ticket | None] = [None] * scenario.workers
        # Powertools' breaker instead: every worker's environment, sharing one DynamoDB item (made in run()).
        self.fleet: _PowertoolsFleet | None = None
        self.store_wait_calls_s = 0.0
        self.store_wait_holds_s = 0.0

    def clock(self) -> float:
        return self.now

    def run(self) -> Run:
        with contextlib.ExitStack() as stack:
            if self.policy.powertools is not None:
                self.fleet = stack.enter_context(
                    _PowertoolsFleet(self.policy.powertools, self.scenario.workers, self.clock)
                )
            self.loop()
            return self.result()

    def loop(self) -> None:
        self.dispatch()
        while self.events:
            self.now, _, kind, message, worker = heapq.heappop(self.events)
            if kind == _SUCCEEDED:
                self.settle_ticket(worker, ok=True)
                self.completions.append(self.now)
                self.settle()
            elif kind == _FAILED:
                self.settle_ticket(worker, ok=False)
                self.failed(message)
            elif kind == _FREE:
                self.idle.append(worker)
            elif self.receives[message] >= self.max_receives:
                self.dead_letter()  # SQS's redrive: maxReceiveCount reached
            else:
                self.ready.append(message)
            self.dispatch()

    def push(self, at: float, kind: int, message: int, worker: int = _NO_WORKER) -> None:
        heapq.heappush(self.events, (at, next(self.order), kind, message, worker))

    @property
    def max_receives(self) -> int:
        """SQS's maxReceiveCount: max_attempts for plain SQS; for the runtime, which counts runs itself, every run
        and the receives that run nothing (QueueSpec.receive_limit's headroom)."""
        if self.policy.dead_letters_itself:
            return self.scenario.max_attempts + HAND_BACK_RECEIVES
        return self.scenario.max_attempts

    def attempt(self, message: int) -> int:
        """The runtime counts runs (in the key's record); plain SQS counts receives."""
        return self.runs[message] if self.policy.dead_letters_itself else self.receives[message]

    def dispatch(self) -> None:
        """Every idle worker receives the longest-visible message and calls the downstream, if its breaker lets
        it."""
        while self.idle and self.ready:
            message = self.ready.popleft()
            worker = self.idle.popleft()
            self.receives[message] += 1
            self.received_at[message] = self.now
            start = self.now  # of the call: Powertools' breaker may make the worker wait for DynamoDB first
            if self.breakers:
                try:
                    self.tickets[worker] = self.breakers[worker].admit(DOWNSTREAM)
                except CircuitOpenError as refusal:
                    self.refused(message, worker, refusal)
                    continue
            elif self.fleet is not None:
                powertools_refusal, requests = self.fleet.admit(worker)
                wait_s = requests * self.scenario.store_s
                if powertools_refusal is not None:
                    self.store_wait_holds_s += wait_s
                    self.refused(message, worker, powertools_refusal, busy_s=wait_s)
                    continue
                self.store_wait_calls_s += wait_s
                start += wait_s
            self.runs[message] += 1
            self.total_calls += 1
            if start < self.scenario.outage_s:
                self.outage_calls += 1
                self.push(start + self.scenario.fail_s, _FAILED, message, worker)
            else:
                self.push(start + self.scenario.service_s, _SUCCEEDED, message, worker)

    def settle_ticket(self, worker: int, ok: bool) -> None:
        """The call's outcome to the worker's breaker; then the worker is free (once Powertools' writes are done)."""
        ticket, self.tickets[worker] = self.tickets[worker], None
        if ticket is not None:
            if ok:
                ticket.succeeded()
            else:
                ticket.failed("503 Service Unavailable")
        if self.fleet is not None:
            wait_s = self.fleet.settle(worker, ok) * self.scenario.store_s
            if wait_s > 0:
                self.store_wait_calls_s += wait_s
                self.push(self.now + wait_s, _FREE, _NO_WORKER, worker)
                return
        self.idle.append(worker)

    def refused(self, message: int, worker: int, refusal: CircuitOpenError, busy_s: float = 0.0) -> None:
        """The runtime's `_hold`: hand the record back unrun, or, held for max_hold_s already, fail the attempt.
        `busy_s`: what the worker spent before the refusal (Powertools' DynamoDB requests)."""
        assert self.policy.breaker is not None
        first = self.held_since[message]
        if first is None:
            first = self.now
        done = self.now + busy_s + self.scenario.hold_s
        if self.now - first >= self.policy.breaker.max_hold_s:
            self.runs[message] += 1  # a refusal past max_hold_s is a failed run
            self.refused_attempts += 1
            self.retry_after_s[message] = refusal.retry_after_s
            self.push(done, _FAILED, message, worker)
            return
        self.holds += 1
        self.held_since[message] = first
        # The message itself goes back, visible after the delay (counted from the end of the hand-back); its run
        # is not counted, its receive is.
        delay_s = hold_delay_s(refusal, self.rng)
        self.push(done, _FREE, message, worker)
        self.push(done + delay_s, _VISIBLE, message)

    def failed(self, message: int) -> None:
        attempt = self.attempt(message)
        floor_s, self.retry_after_s[message] = self.retry_after_s[message], None
        if self.policy.dead_letters_itself and attempt >= self.scenario.max_attempts:
            self.dead_letter()
            return
        visible_at = self.policy.visible_at(self.received_at[message], self.now, attempt, self.rng, floor_s)
        self.push(visible_at, _VISIBLE, message)

    def dead_letter(self) -> None:
        self.dead_lettered += 1
        self.settle()

    def settle(self) -> None:
        self.last_settled = self.now
        if self.now < self.scenario.outage_s:
            self.settled_before_recovery += 1

    def result(self) -> Run:
        done = sorted(self.completions)
        return Run(
            policy=self.policy.label,
            seed=self.seed,
            outage_calls=self.outage_calls,
            total_calls=self.total_calls,
            completed=len(done),
            dead_lettered=self.dead_lettered,
            pending_at_recovery=self.scenario.jobs - self.settled_before_recovery,
            drain_s=max(0.0, self.last_settled - self.scenario.outage_s),
            p50_s=percentile(done, 50),
            p99_s=percentile(done, 99),
            holds=self.holds,
            refused_attempts=self.refused_attempts,
            breaker_opened=sum(s.opened for breakers in self.breakers for s in breakers.snapshots())
            + (self.fleet.opened if self.fleet else 0),
            store_reads=self.fleet.table.reads if self.fleet else 0,
            store_writes=self.fleet.table.writes if self.fleet else 0,
            lost_elections=self.fleet.table.lost_elections if self.fleet else 0,
            store_wait_calls_s=self.store_wait_calls_s,
            store_wait_holds_s=self.store_wait_holds_s,
        )


def simulate(policy: Policy, scenario: Scenario = Scenario(), seed: int = 0) -> Run:
    """Run one outage to the end: until every job is completed or dead-lettered."""
    return _Simulation(policy, scenario, seed).run()


def percentile(ordered: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending sequence; None when it is empty."""
    if not ordered:
        return None
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


# --- Powertools' circuit breaker -------------------------------------------------------------------------


class _CallStarted(BaseException):
    """Raised by the protected function in place of the call, so that Powertools' `handle()` stops where the call
    starts: a BaseException, which its `except Exception` lets through without counting. The call ends later in
    virtual time, and the handler's own method that made it is called again then, with the outcome."""

    def __init__(self, route: str) -> None:
        super().__init__(route)
        self.route = route  # the handler's method that made the call: "_call_closed" or "_call_probe"


class _DownstreamDown(Exception):
    """A call during the outage: its 503."""


def _call_started() -> None:
    raise _CallStarted(sys._getframe(1).f_code.co_name)


def _call_failed() -> None:
    raise _DownstreamDown("503 Service Unavailable")


def _call_succeeded() -> None:
    return None


def _virtual_datetime(clock: Callable[[], float]) -> SimpleNamespace:
    """Stands in for the `datetime` module of Powertools' circuit-breaker modules, which read the time only as
    `dt.datetime.now().timestamp()` (then whole seconds): the virtual clock, from POWERTOOLS_EPOCH_S."""

    def now() -> SimpleNamespace:
        return SimpleNamespace(timestamp=lambda: POWERTOOLS_EPOCH_S + clock())

    return SimpleNamespace(datetime=SimpleNamespace(now=now))


_COUNTER_ID = "bench.outage.dynamodb_requests"


@functools.cache
def _moto_client() -> DynamoDBClient:
    """One DynamoDB client per process, made the first time inside moto's mock (a client takes 60 ms to make, a run
    of a small scenario not much more); moto answers it in every later mock too, each starting empty. Only a
    `_DynamoDBTable` uses it, and only inside its mock."""
    import boto3

    return boto3.client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )


class _DynamoDBTable:
    """The circuit-state table on moto's DynamoDB, in this process, and the requests made to it."""

    def __init__(self) -> None:
        self.reads = 0
        self.writes = 0
        self.lost_elections = 0
        self._mock: Any = None
        self._client: DynamoDBClient | None = None

    @property
    def requests(self) -> int:
        return self.reads + self.writes

    @property
    def client(self) -> DynamoDBClient:
        assert self._client is not None, "the table exists only inside its `with`"
        return self._client

    def __enter__(self) -> _DynamoDBTable:
        from moto import mock_aws

        self._mock = mock_aws()
        self._mock.start()
        try:
            client = _moto_client()
            # The table Powertools' docs describe: partition key `id` (a string), on-demand.
            client.create_table(
                TableName=POWERTOOLS_TABLE,
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        except BaseException:
            self._mock.stop()
            raise
        client.meta.events.register("after-call.dynamodb", self._count, unique_id=_COUNTER_ID)
        self._client = client
        return self

    def __exit__(self, *_: object) -> None:
        if self._client is not None:
            self._client.meta.events.unregister("after-call.dynamodb", unique_id=_COUNTER_ID)
        self._client = None
        self._mock.stop()

    def _count(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        if model.name == "GetItem":
            self.reads += 1
        elif model.name in ("PutItem", "UpdateItem"):
            self.writes += 1
            if parsed.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                self.lost_elections += 1


@dataclass(eq=False)
class _Environment:
    """One worker as Powertools sees an execution environment: its own persistence layer (so its own local cache of
    the item), its own module-level counters and probe-owner id; and its call in flight."""

    owner: str
    persistence: CircuitBreakerPersistenceLayer
    failures: dict[str, int] = dataclasses.field(default_factory=dict)
    successes: dict[str, int] = dataclasses.field(default_factory=dict)
    observed: dict[str, CircuitState] = dataclasses.field(default_factory=dict)
    in_flight: tuple[str, powertools_base.CircuitBreakerHandler] | None = None

    def owner_id(self) -> str:
        return self.owner


class _PowertoolsFleet:
    """Every worker's Powertools circuit breaker for the one downstream: the real CircuitBreakerHandler and
    CircuitBreakerDynamoDBPersistence, one item shared by all, on moto and the virtual clock.

    Powertools runs a protected call synchronously (read the state, call, record the outcome); here a call takes
    virtual time. So `admit` runs `handle()` when the worker receives a message, up to the call (or the refusal),
    and `settle` runs the handler's own method that made the call (`_call_closed` or `_call_probe`) when it ends,
    the function now answering as the downstream did: the same code, in the same order, at the right times."""

    def __init__(self, spec: PowertoolsSpec, workers: int, clock: Callable[[], float]) -> None:
        self.spec = spec
        self.config = spec.config()
        self.clock = clock
        self.workers = workers
        self.table = _DynamoDBTable()
        self.environments: list[_Environment] = []
        self.opened = 0  # CLOSED to OPEN transitions, over all workers (several may trip before they see the item)
        self._datetime = _virtual_datetime(clock)
        self._clock_modules: list[ModuleType] = []

    def __enter__(self) -> _PowertoolsFleet:
        from aws_lambda_powertools.utilities.circuit_breaker.persistence import (
            CircuitBreakerDynamoDBPersistence,
            dynamodb,
        )
        from aws_lambda_powertools.utilities.circuit_breaker.persistence import base as persistence_base

        self._clock_modules = [powertools_base, persistence_base, dynamodb]
        self.table.__enter__()
        self.environments = [
            _Environment(
                owner=f"worker-{worker}",
                persistence=CircuitBreakerDynamoDBPersistence(
                    table_name=POWERTOOLS_TABLE, boto3_client=self.table.client
                ),
            )
            for worker in range(self.workers)
        ]
        return self

    def __exit__(self, *_: object) -> None:
        self.table.__exit__()

    def admit(self, worker: int) -> tuple[CircuitOpenError | None, int]:
        """The worker received a message: Powertools' handler lets the call start (None) or refuses it (as the
        runtime's CircuitOpenError); and the DynamoDB requests it made first."""
        environment = self.environments[worker]
        assert environment.in_flight is None
        before = self.table.requests
        handler = powertools_base.CircuitBreakerHandler(
            function=_call_started,
            name=DOWNSTREAM,
            config=self.config,
            persistence_store=environment.persistence,
            on_transition=self._transition,
        )
        with self._inside(environment):
            try:
                handler.handle()
            except _CallStarted as started:
                environment.in_flight = (started.route, handler)
                return None, self.table.requests - before
            except CircuitBreakerOpenError as refused:
                return self._refusal(refused), self.table.requests - before
        raise AssertionError("Powertools' handler neither called the downstream nor refused the call")

    def settle(self, worker: int, ok: bool) -> int:
        """The worker's call ended: the handler records it (a failure may open the circuit, a probe close or reopen
        it); the DynamoDB requests that made."""
        environment = self.environments[worker]
        assert environment.in_flight is not None
        (route, handler), environment.in_flight = environment.in_flight, None
        before = self.table.requests
        handler.function = _call_succeeded if ok else _call_failed
        with self._inside(environment), contextlib.suppress(_DownstreamDown):
            getattr(handler, route)()
        return self.table.requests - before

    def _refusal(self, refused: CircuitBreakerOpenError) -> CircuitOpenError:
        """What the runtime would hand the record back with: until the recovery timeout has passed (0 while a probe
        is out, or once it has, the election lost), spread over one recovery timeout."""
        circuit = refused.circuit
        retry_after_s = 0.0
        if circuit is not None and circuit.state == CircuitState.OPEN and circuit.opened_at is not None:
            now = POWERTOOLS_EPOCH_S + self.clock()
            retry_after_s = max(0.0, circuit.opened_at + self.spec.recovery_timeout - now)
        return CircuitOpenError(
            str(refused), downstream=DOWNSTREAM, retry_after_s=retry_after_s, open_for_s=self.spec.recovery_timeout
        )

    def _transition(self, transition: CircuitTransition) -> None:
        if transition.from_state == CircuitState.CLOSED and transition.to_state == CircuitState.OPEN:
            self.opened += 1

    @contextlib.contextmanager
    def _inside(self, environment: _Environment) -> Iterator[None]:
        """Powertools' circuit-breaker modules as this environment sees them, for one call into them: the virtual
        clock in place of their `datetime`, and the environment's module-level counters and probe-owner id; all put
        back after."""
        patches: list[tuple[ModuleType, str, object]] = [
            *((module, "dt", self._datetime) for module in self._clock_modules),
            (powertools_base, "_LOCAL_FAILURES", environment.failures),
            (powertools_base, "_LOCAL_SUCCESSES", environment.successes),
            (powertools_base, "_LAST_OBSERVED_STATE", environment.observed),
            (powertools_base, "_probe_owner_id", environment.owner_id),
        ]
        saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
        for module, name, value in patches:
            setattr(module, name, value)
        try:
            yield
        finally:
            for module, name, value in saved:
                setattr(module, name, value)


# --- several seeds, summarised ----------------------------------------------------------------------------

METRICS = ("outage_calls", "total_calls", "dead_lettered", "drain_s", "p50_s", "p99_s", "holds", "refused_attempts")
POWERTOOLS_METRICS = ("breaker_opened", "store_reads", "store_writes", "lost_elections", "store_wait_calls_s",
                      "store_wait_holds_s")  # fmt: skip


@dataclass(frozen=True)
class Spread:
    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(mean=statistics.fmean(values), low=min(values), high=max(values))


@dataclass(frozen=True)
class Result:
    policy: Policy
    runs: tuple[Run, ...]

    def spread(self, metric: str) -> Spread | None:
        values = [getattr(run, metric) for run in self.runs]
        if any(value is None for value in values):
            return None
        return Spread.of(values)


def seeds_for(policy: Policy, first: int, count: int) -> list[int]:
    """Only the jittered policies draw random numbers: the others need one run."""
    return list(range(first, first + count)) if policy.jittered else [first]


def run_policy(policy: Policy, scenario: Scenario, first_seed: int, seeds: int) -> Result:
    runs = tuple(simulate(policy, scenario, seed) for seed in seeds_for(policy, first_seed, seeds))
    return Result(policy=policy, runs=runs)


@dataclass(frozen=True)
class Check:
    claim: str
    ok: bool
    detail: str


def _mean(result: Result, metric: str) -> float:
    spread = result.spread(metric)
    return spread.mean if spread else math.nan


def checks(immediate: Result, fixed: Result, backoff: Result, scenario: Scenario) -> list[Check]:
    """The issue's expectation, claim by claim, on the means over the seeds."""
    calls = _mean(backoff, "outage_calls")
    immediate_calls = _mean(immediate, "outage_calls")
    fixed_calls = _mean(fixed, "outage_calls")
    drain = _mean(backoff, "drain_s")
    fixed_drain = _mean(fixed, "drain_s")
    dead = backoff.spread("dead_lettered") or Spread(math.nan, math.nan, math.nan)
    ratio = f"{drain / fixed_drain:.2f}x" if fixed_drain else "fixed drained nothing"
    lost = dead.high > 0 or _mean(fixed, "dead_lettered") > 0
    return [
        Check(
            "far fewer downstream calls during the outage than immediate retry",
            calls * 2 <= immediate_calls,
            f"{calls:,.0f} vs {immediate_calls:,.0f} ({immediate_calls / calls:.1f}x fewer)" if calls else "no calls",
        ),
        Check(
            f"fewer than {fixed.policy.label}",
            calls < fixed_calls,
            f"{calls:,.0f} vs {fixed_calls:,.0f}",
        ),
        Check(
            f"comparable drain time (at most {DRAIN_TOLERANCE}x fixed {SQS_DEFAULT_VISIBILITY_S} s)",
            drain <= DRAIN_TOLERANCE * fixed_drain and not lost,
            f"{drain:.1f} s vs {fixed_drain:.1f} s ({ratio})"
            + ("; dead-lettered jobs shorten a drain" if lost else ""),
        ),
        Check(
            f"no job dead-lettered during a {scenario.outage_s:g} s outage",
            dead.high == 0,
            f"{dead.mean:g} of {scenario.jobs:,} on average, {dead.low:g}..{dead.high:g} "
            f"over {len(backoff.runs)} seeds",
        ),
    ]


def breaker_checks(immediate: Result, fixed: Result, breaker: Result, scenario: Scenario) -> list[Check]:
    """The issue's goals for the circuit breaker, in every seed (its worst seed against the others' one run)."""
    calls = breaker.spread("outage_calls") or Spread(math.nan, math.nan, math.nan)
    drain = breaker.spread("drain_s") or Spread(math.nan, math.nan, math.nan)
    dead = breaker.spread("dead_lettered") or Spread(math.nan, math.nan, math.nan)
    immediate_calls = _mean(immediate, "outage_calls")
    fixed_drain = _mean(fixed, "drain_s")
    fixed_dead = _mean(fixed, "dead_lettered")
    lost = dead.high > 0 or fixed_dead > 0
    seeds = len(breaker.runs)
    why = []
    if dead.high > 0:
        why.append("the breaker dead-lettered jobs")
    if fixed_dead > 0:
        why.append(f"fixed {SQS_DEFAULT_VISIBILITY_S} s dead-lettered {fixed_dead:,.0f}")
    return [
        Check(
            f"at most {BREAKER_CALLS_SHARE:g}x immediate retry's calls during the outage",
            calls.high <= BREAKER_CALLS_SHARE * immediate_calls,
            f"{calls.mean:,.0f} [{calls.low:,.0f}..{calls.high:,.0f}] vs {immediate_calls:,.0f} "
            f"({calls.high / immediate_calls:.3f}x at most)"
            if immediate_calls
            else "immediate retry made no calls",
        ),
        Check(
            f"drain at most {BREAKER_DRAIN_TOLERANCE}x fixed {SQS_DEFAULT_VISIBILITY_S} s visibility's",
            drain.high <= BREAKER_DRAIN_TOLERANCE * fixed_drain and not lost,
            (
                f"{drain.mean:.1f} s [{drain.low:.1f}..{drain.high:.1f}] vs {fixed_drain:.1f} s "
                f"({drain.high / fixed_drain:.2f}x at most)"
                if fixed_drain
                else "fixed drained nothing"
            )
            + (f"; {' and '.join(why)}: a drain that lost jobs is no yardstick" if lost else ""),
        ),
        Check(
            f"no job dead-lettered during a {scenario.outage_s:g} s outage",
            dead.high == 0,
            f"{dead.mean:g} of {scenario.jobs:,} on average, {dead.low:g}..{dead.high:g} over {seeds} seeds",
        ),
    ]


# --- the sweep --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _SweepOutcome:
    """What both sweeps record of a setting over the seeds, beside fixed 30 s visibility."""

    drain_s: float
    drain_max_s: float
    fixed_drain_s: float
    fixed_dead_lettered: int
    dead_lettered: float
    dead_lettered_max: float
    is_default: bool

    @property
    def no_dead_letters(self) -> bool:
        return self.dead_lettered_max == 0


@dataclass(frozen=True, kw_only=True)
class SweepRow(_SweepOutcome):
    base_s: int
    cap_s: int
    max_attempts: int
    outage_calls: float
    fixed_outage_calls: float

    @property
    def fewer_calls(self) -> bool:
        return self.outage_calls < self.fixed_outage_calls

    @property
    def drains_comparable(self) -> bool:
        """Only where neither dead-lettered a job: a drain that lost jobs on the way is short for the wrong reason."""
        return self.drain_s <= DRAIN_TOLERANCE * self.fixed_drain_s

    @property
    def comparable_drain(self) -> bool:
        return self.no_dead_letters and self.fixed_dead_lettered == 0 and self.drains_comparable

    @property
    def meets_all(self) -> bool:
        return self.fewer_calls and self.comparable_drain and self.no_dead_letters


def sweep(
    scenario: Scenario,
    first_seed: int,
    seeds: int,
    bases_s: Iterable[int] = SWEEP_BASES_S,
    caps_s: Iterable[int] = SWEEP_CAPS_S,
    max_attempts: Iterable[int] = SWEEP_MAX_ATTEMPTS,
) -> list[SweepRow]:
    """The runtime's backoff over a grid of (base, cap, max_attempts), each beside fixed 30 s visibility with the
    same max_attempts."""
    rows = []
    fixed = fixed_visibility(SQS_DEFAULT_VISIBILITY_S)
    for attempts in max_attempts:
        trial = Scenario(**{**asdict(scenario), "max_attempts": attempts})
        reference = run_policy(fixed, trial, first_seed, 1)
        for base in bases_s:
            for cap in caps_s:
                if base > cap:
                    continue
                spec = QueueSpec(name=DEFAULTS.name, jobs=(), backoff_base_s=base, backoff_cap_s=cap)
                result = run_policy(runtime_backoff(spec), trial, first_seed, seeds)
                drain = result.spread("drain_s")
                dead = result.spread("dead_lettered")
                assert drain is not None and dead is not None
                rows.append(
                    SweepRow(
                        base_s=base,
                        cap_s=cap,
                        max_attempts=attempts,
                        outage_calls=_mean(result, "outage_calls"),
                        fixed_outage_calls=_mean(reference, "outage_calls"),
                        drain_s=drain.mean,
                        drain_max_s=drain.high,
                        fixed_drain_s=_mean(reference, "drain_s"),
                        fixed_dead_lettered=reference.runs[0].dead_lettered,
                        dead_lettered=dead.mean,
                        dead_lettered_max=dead.high,
                        is_default=(base, cap, attempts)
                        == (DEFAULTS.backoff_base_s, DEFAULTS.backoff_cap_s, DEFAULTS.max_attempts),
                    )
                )
    return rows


@dataclass(frozen=True, kw_only=True)
class BreakerSweepRow(_SweepOutcome):
    failure_threshold: int
    open_s: float
    max_open_s: float
    outage_calls: float
    outage_calls_max: float
    immediate_outage_calls: float
    holds: float

    @property
    def few_calls(self) -> bool:
        return self.outage_calls_max <= BREAKER_CALLS_SHARE * self.immediate_outage_calls

    @property
    def drains_in_time(self) -> bool:
        """In every seed, and only where neither side dead-lettered a job."""
        return (
            self.no_dead_letters
            and self.fixed_dead_lettered == 0
            and self.drain_max_s <= BREAKER_DRAIN_TOLERANCE * self.fixed_drain_s
        )

    @property
    def meets_all(self) -> bool:
        return self.few_calls and self.drains_in_time and self.no_dead_letters


def sweep_breaker(
    scenario: Scenario,
    first_seed: int,
    seeds: int,
    thresholds: Iterable[int] = SWEEP_THRESHOLDS,
    opens_s: Iterable[float] = SWEEP_OPEN_S,
    max_opens_s: Iterable[float] = SWEEP_MAX_OPEN_S,
) -> list[BreakerSweepRow]:
    """The circuit breaker over a grid of (failure_threshold, open_s, max_open_s), the queue's other defaults
    (backoff, max_hold_s) kept, beside immediate retry and fixed 30 s visibility on the same scenario."""
    immediate = run_policy(immediate_retry(), scenario, first_seed, 1)
    fixed = run_policy(fixed_visibility(SQS_DEFAULT_VISIBILITY_S), scenario, first_seed, 1)
    default = DEFAULTS.circuit_breaker
    rows = []
    for threshold in thresholds:
        for open_s in opens_s:
            for max_open_s in max_opens_s:
                if open_s > max_open_s:
                    continue
                breaker = CircuitBreakerSpec(
                    failure_threshold=threshold, open_s=open_s, max_open_s=max_open_s, max_hold_s=default.max_hold_s
                )
                spec = dataclasses.replace(DEFAULTS, circuit_breaker=breaker)
                result = run_policy(runtime_breaker(spec), scenario, first_seed, seeds)
                calls = result.spread("outage_calls")
                drain = result.spread("drain_s")
                dead = result.spread("dead_lettered")
                assert calls is not None and drain is not None and dead is not None
                rows.append(
                    BreakerSweepRow(
                        failure_threshold=threshold,
                        open_s=open_s,
                        max_open_s=max_open_s,
                        outage_calls=calls.mean,
                        outage_calls_max=calls.high,
                        immediate_outage_calls=_mean(immediate, "outage_calls"),
                        drain_s=drain.mean,
                        drain_max_s=drain.high,
                        fixed_drain_s=_mean(fixed, "drain_s"),
                        fixed_dead_lettered=fixed.runs[0].dead_lettered,
                        dead_lettered=dead.mean,
                        dead_lettered_max=dead.high,
                        holds=_mean(result, "holds"),
                        is_default=(threshold, open_s, max_open_s)
                        == (default.failure_threshold, default.open_s, default.max_open_s),
                    )
                )
    return rows


# --- printing ---------------------------------------------------------------------------------------------


def _number(value: float, decimals: int) -> str:
    return f"{value:,.{decimals}f}"


def _cell(spread: Spread | None, decimals: int = 0) -> str:
    if spread is None:
        return "-"
    text = _number(spread.mean, decimals)
    if spread.low != spread.high:
        text += f" [{_number(spread.low, decimals)}..{_number(spread.high, decimals)}]"
    return text


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        cells_out = [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        return " | ".join(cells_out).rstrip()

    rule = "-+-".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def describe(scenario: Scenario, first_seed: int, seeds: int, powertools: bool = False) -> str:
    breaker = DEFAULTS.circuit_breaker
    lines = [
        f"Downstream outage in virtual time: {scenario.jobs:,} jobs enqueued at t=0, {scenario.workers} workers "
        f"(one message each), downstream down from t=0 to t={scenario.outage_s:g} s.",
        f"A call fails after {scenario.fail_s:g} s during the outage and succeeds in {scenario.service_s:g} s "
        f"after it; max_attempts {scenario.max_attempts} for every policy (QueueSpec default "
        f"{DEFAULTS.max_attempts}).",
        f"Catalog defaults: backoff_base_s {DEFAULTS.backoff_base_s}, backoff_cap_s {DEFAULTS.backoff_cap_s}, "
        f"visibility_timeout_s {DEFAULTS.visibility_timeout_s}, max_concurrency {DEFAULTS.max_concurrency}.",
        f"Circuit breaker (CircuitBreakerSpec defaults, one per worker): failure_threshold "
        f"{breaker.failure_threshold}, open_s {breaker.open_s:g}, max_open_s {breaker.max_open_s:g}, "
        f"max_hold_s {breaker.max_hold_s}; a hand-back costs the worker {scenario.hold_s:g} s.",
        f"Jittered policies: mean [min..max] over seeds {first_seed}..{first_seed + seeds - 1}; "
        "the others are deterministic (one run).",
    ]
    if powertools:
        ours, its = powertools_like_runtime(), powertools_defaults()
        lines.append(
            f"Powertools' circuit breaker (its real handler and DynamoDB persistence on moto, one item shared by every "
            f"worker; the runtime's backoff and hand-backs): with the runtime's values, failure_threshold "
            f"{ours.failure_threshold}, recovery_timeout {ours.recovery_timeout} s (never doubled), success_threshold "
            f"{ours.success_threshold}; with its defaults, {its.failure_threshold}, {its.recovery_timeout} s, "
            f"{its.success_threshold}; local_cache_max_age {its.local_cache_max_age} s in both. Each DynamoDB "
            f"request costs the worker {scenario.store_s:g} s."
        )
    return "\n".join(lines)


def _checks_text(title: str, verdict: Sequence[Check]) -> list[str]:
    width = max(len(check.claim) for check in verdict)
    return ["", title, *(f"  {'yes' if c.ok else 'NO '}  {c.claim.ljust(width)}  {c.detail}" for c in verdict)]


def render(
    results: Sequence[Result],
    verdict: Sequence[Check],
    scenario: Scenario,
    breaker_verdict: Sequence[Check] = (),
) -> str:
    header = (
        "policy",
        "calls during outage",
        "total calls",
        "dead-lettered",
        f"drain after t={scenario.outage_s:g} s (s)",
        "p50 done (s)",
        "p99 done (s)",
        "holds",
    )
    rows = [
        (
            result.policy.label,
            _cell(result.spread("outage_calls")),
            _cell(result.spread("total_calls")),
            _cell(result.spread("dead_lettered")),
            _cell(result.spread("drain_s"), 1),
            _cell(result.spread("p50_s"), 1),
            _cell(result.spread("p99_s"), 1),
            _cell(result.spread("holds")) if result.policy.kind in (Kind.BREAKER, Kind.POWERTOOLS) else "-",
        )
        for result in results
    ]
    lines = [_table(header, rows)]
    lines += _checks_text("The issue's expectation for this runtime's backoff (means over the seeds):", verdict)
    if breaker_verdict:
        lines += _checks_text("The issue's goals for the circuit breaker (in every seed):", breaker_verdict)
    return "\n".join(lines)


@dataclass(frozen=True)
class StoreFigures:
    """What Powertools' breaker asked of DynamoDB in one run, per downstream call and in USD."""

    reads_per_call: float
    writes_per_call: float
    store_ms_per_call: float  # the worker's wait for DynamoDB before and after each call made, on average
    usd_per_million_calls: float  # on-demand reads and writes per million downstream calls

    @classmethod
    def of(cls, run: Run, prices: Prices | None = None) -> StoreFigures:
        prices = prices or Prices()
        calls = max(1, run.total_calls)
        read_units = run.store_reads * RRU_PER_READ
        write_units = run.store_writes * WRU_PER_WRITE
        usd = read_units * prices.dynamodb_per_million_rru + write_units * prices.dynamodb_per_million_wru
        return cls(
            reads_per_call=run.store_reads / calls,
            writes_per_call=run.store_writes / calls,
            store_ms_per_call=1000 * run.store_wait_calls_s / calls,
            usd_per_million_calls=usd / calls,
        )


def store_spread(result: Result, figure: str) -> Spread:
    return Spread.of([getattr(StoreFigures.of(run), figure) for run in result.runs])


def render_powertools(results: Sequence[Result]) -> str:
    header = (
        "policy",
        "DynamoDB reads",
        "writes",
        "lost elections",
        "reads/call",
        "writes/call",
        "ms/call",
        "USD per 1M calls",
        "opened",
    )
    rows = [
        (
            result.policy.label,
            _cell(result.spread("store_reads")),
            _cell(result.spread("store_writes")),
            _cell(result.spread("lost_elections")),
            _cell(store_spread(result, "reads_per_call"), 3),
            _cell(store_spread(result, "writes_per_call"), 3),
            _cell(store_spread(result, "store_ms_per_call"), 2),
            _cell(store_spread(result, "usd_per_million_calls"), 3),
            _cell(result.spread("breaker_opened")),
        )
        for result in results
    ]
    prices = Prices()
    return "\n".join(
        [
            "",
            "Powertools' breaker and DynamoDB: GetItem (eventually consistent, 0.5 RRU) and PutItem/UpdateItem (1 WRU, "
            "a lost election too) over the whole run; per downstream call (total calls); the worker's wait for "
            f"them per call; on-demand USD per million downstream calls at {prices.dynamodb_per_million_rru:g} USD per "
            f"million RRU and {prices.dynamodb_per_million_wru:g} per million WRU (bench.cost's Prices); CLOSED to "
            "OPEN transitions over all workers.",
            _table(header, rows),
        ]
    )


def render_sweep(rows: Sequence[SweepRow], scenario: Scenario) -> str:
    header = (
        "base s",
        "cap s",
        "max att.",
        "outage calls",
        "fixed 30 s calls",
        "drain s (max)",
        "fixed 30 s drain",
        "DLQ (max)",
        "fewer calls",
        f"drain <= {DRAIN_TOLERANCE}x",
        "no DLQ",
        "",
    )
    table = [
        (
            str(row.base_s),
            str(row.cap_s),
            str(row.max_attempts),
            _number(row.outage_calls, 0),
            _number(row.fixed_outage_calls, 0),
            f"{row.drain_s:.1f} ({row.drain_max_s:.1f})",
            f"{row.fixed_drain_s:.1f}",
            f"{row.dead_lettered:g} ({row.dead_lettered_max:g})",
            "yes" if row.fewer_calls else "-",
            "yes" if row.comparable_drain else ("n/a" if row.drains_comparable else "-"),
            "yes" if row.no_dead_letters else "-",
            ("ALL " if row.meets_all else "") + ("<- current default" if row.is_default else ""),
        )
        for row in rows
    ]
    meeting = sum(row.meets_all for row in rows)
    return "\n".join(
        [
            f"Sweep of the runtime's backoff, {scenario.jobs:,} jobs, {scenario.workers} workers, "
            f"{scenario.outage_s:g} s outage; fixed 30 s visibility with the same max_attempts beside each row.",
            _table(header, table),
            "",
            f"{meeting} of {len(rows)} settings meet all three (fewer outage calls than fixed 30 s, drain within "
            f"{DRAIN_TOLERANCE}x of it, no dead-letter in any seed). Drain n/a: within {DRAIN_TOLERANCE}x, but one "
            "side dead-lettered jobs, which shortens its drain.",
        ]
    )


def render_breaker_sweep(rows: Sequence[BreakerSweepRow], scenario: Scenario) -> str:
    header = (
        "threshold",
        "open s",
        "max open s",
        "outage calls (max)",
        "immediate calls",
        "drain s (max)",
        "fixed 30 s drain",
        "DLQ (max)",
        "holds",
        f"calls <= {BREAKER_CALLS_SHARE:g}x",
        f"drain <= {BREAKER_DRAIN_TOLERANCE}x",
        "no DLQ",
        "",
    )
    table = [
        (
            str(row.failure_threshold),
            f"{row.open_s:g}",
            f"{row.max_open_s:g}",
            f"{_number(row.outage_calls, 0)} ({_number(row.outage_calls_max, 0)})",
            _number(row.immediate_outage_calls, 0),
            f"{row.drain_s:.1f} ({row.drain_max_s:.1f})",
            f"{row.fixed_drain_s:.1f}",
            f"{row.dead_lettered:g} ({row.dead_lettered_max:g})",
            _number(row.holds, 0),
            "yes" if row.few_calls else "-",
            "yes" if row.drains_in_time else "-",
            "yes" if row.no_dead_letters else "-",
            ("ALL " if row.meets_all else "") + ("<- current default" if row.is_default else ""),
        )
        for row in rows
    ]
    meeting = sum(row.meets_all for row in rows)
    return "\n".join(
        [
            f"Sweep of the circuit breaker, {scenario.jobs:,} jobs, {scenario.workers} workers, "
            f"{scenario.outage_s:g} s outage; backoff and max_hold_s at the catalog's defaults; immediate retry and "
            "fixed 30 s visibility beside each row.",
            _table(header, table),
            "",
            f"{meeting} of {len(rows)} settings meet all three in every seed (outage calls at most "
            f"{BREAKER_CALLS_SHARE:g}x immediate retry's, drain within {BREAKER_DRAIN_TOLERANCE}x fixed 30 s's, "
            "no dead-letter).",
        ]
    )


# --- the command ------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.outage",
        description="Simulate a downstream outage in virtual time under immediate retry, fixed visibility and this "
        "runtime's backoff; print downstream calls during the outage and the time to drain after it.",
    )
    default = Scenario()
    parser.add_argument("--jobs", type=int, default=default.jobs, help="jobs enqueued at t=0 (%(default)s)")
    parser.add_argument("--workers", type=int, default=default.workers, help="concurrent workers (%(default)s)")
    parser.add_argument("--outage-s", type=float, default=default.outage_s, help="outage length (%(default)s)")
    parser.add_argument("--fail-s", type=float, default=default.fail_s, help="latency of a failing call (%(default)s)")
    parser.add_argument(
        "--service-s", type=float, default=default.service_s, help="latency of a successful call (%(default)s)"
    )
    parser.add_argument(
        "--max-attempts", type=int, default=default.max_attempts, help="for every policy (QueueSpec default)"
    )
    parser.add_argument("--seed", type=int, default=1, help="first seed of the jitter (%(default)s)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds for the jittered policy (%(default)s)")
    parser.add_argument("--sweep", action="store_true", help="try a grid of (base, cap, max_attempts) instead")
    parser.add_argument("--bases", type=_ints, default=SWEEP_BASES_S, help="--sweep: backoff_base_s values")
    parser.add_argument("--caps", type=_ints, default=SWEEP_CAPS_S, help="--sweep: backoff_cap_s values")
    parser.add_argument("--attempts", type=_ints, default=SWEEP_MAX_ATTEMPTS, help="--sweep: max_attempts values")
    parser.add_argument(
        "--hold-s", type=float, default=default.hold_s, help="what a hand-back costs a worker (%(default)s)"
    )
    parser.add_argument(
        "--sweep-breaker",
        action="store_true",
        help="try a grid of the circuit breaker's (failure_threshold, open_s, max_open_s) instead",
    )
    parser.add_argument(
        "--thresholds", type=_ints, default=SWEEP_THRESHOLDS, help="--sweep-breaker: failure_threshold values"
    )
    parser.add_argument("--opens", type=_floats, default=SWEEP_OPEN_S, help="--sweep-breaker: open_s values")
    parser.add_argument(
        "--max-opens", type=_floats, default=SWEEP_MAX_OPEN_S, help="--sweep-breaker: max_open_s values"
    )
    parser.add_argument(
        "--store-s",
        type=float,
        default=default.store_s,
        help="what one DynamoDB request of Powertools' breaker costs a worker (%(default)s)",
    )
    parser.add_argument(
        "--no-powertools",
        dest="powertools",
        action="store_false",
        help="leave out Powertools' circuit breaker (its runs take seconds, on moto; the others milliseconds)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.sweep and args.sweep_breaker:
        parser.error("--sweep and --sweep-breaker are separate runs: choose one")
    problems = scenario_from(args).problems()
    if problems:
        parser.error("; ".join(problems))
    return args


def _ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive whole numbers."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"every value must be at least 1: {text!r}")
    return values


def _floats(text: str) -> tuple[float, ...]:
    """A comma-separated list of numbers above 0."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or not all(math.isfinite(value) and value > 0 for value in values):
        raise argparse.ArgumentTypeError(f"every value must be above 0: {text!r}")
    return values


def scenario_from(args: argparse.Namespace) -> Scenario:
    return Scenario(
        jobs=args.jobs,
        workers=args.workers,
        outage_s=args.outage_s,
        fail_s=args.fail_s,
        service_s=args.service_s,
        max_attempts=args.max_attempts,
        hold_s=args.hold_s,
        store_s=args.store_s,
    )


def _json_ready(value: Any) -> Any:
    """NaN and infinity are not JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(item) for item in value]
    return value


def report(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The text and the JSON of one invocation."""
    scenario = scenario_from(args)
    if args.sweep:
        rows = sweep(scenario, args.seed, args.seeds, args.bases, args.caps, args.attempts)
        data: dict[str, Any] = {
            "scenario": asdict(scenario),
            "seeds": seeds_for(runtime_backoff(), args.seed, args.seeds),
            "sweep": [
                {**asdict(row), "fewer_calls": row.fewer_calls, "comparable_drain": row.comparable_drain,
                 "no_dead_letters": row.no_dead_letters, "meets_all": row.meets_all}
                for row in rows
            ],
        }  # fmt: skip
        return render_sweep(rows, scenario), data
    if args.sweep_breaker:
        breaker_rows = sweep_breaker(scenario, args.seed, args.seeds, args.thresholds, args.opens, args.max_opens)
        data = {
            "scenario": asdict(scenario),
            "seeds": seeds_for(runtime_breaker(), args.seed, args.seeds),
            "breaker_sweep": [
                {**asdict(row), "few_calls": row.few_calls, "drains_in_time": row.drains_in_time,
                 "no_dead_letters": row.no_dead_letters, "meets_all": row.meets_all}
                for row in breaker_rows
            ],
        }  # fmt: skip
        return render_breaker_sweep(breaker_rows, scenario), data
    results = [run_policy(policy, scenario, args.seed, args.seeds) for policy in standard_policies()]
    immediate, fixed, _, backoff, breaker = results
    verdict = checks(immediate, fixed, backoff, scenario)
    breaker_verdict = breaker_checks(immediate, fixed, breaker, scenario)
    powertools = (
        [run_policy(policy, scenario, args.seed, args.seeds) for policy in powertools_policies()]
        if args.powertools
        else []
    )
    powertools_verdicts = [breaker_checks(immediate, fixed, result, scenario) for result in powertools]
    data = {
        "scenario": asdict(scenario),
        "queue_defaults": {
            "max_attempts": DEFAULTS.max_attempts,
            "backoff_base_s": DEFAULTS.backoff_base_s,
            "backoff_cap_s": DEFAULTS.backoff_cap_s,
            "visibility_timeout_s": DEFAULTS.visibility_timeout_s,
            "max_concurrency": DEFAULTS.max_concurrency,
        },
        "circuit_breaker_defaults": asdict(DEFAULTS.circuit_breaker),
        "policies": [
            {
                "label": result.policy.label,
                "kind": result.policy.kind.value,
                "summary": {metric: (asdict(s) if (s := result.spread(metric)) else None) for metric in METRICS},
                "runs": [asdict(run) for run in result.runs],
            }
            for result in results
        ],
        "checks": [asdict(check) for check in verdict],
        "breaker_checks": [asdict(check) for check in breaker_verdict],
        "powertools": [
            {
                "label": result.policy.label,
                "kind": result.policy.kind.value,
                "settings": asdict(result.policy.powertools) if result.policy.powertools else None,
                "summary": {
                    metric: (asdict(s) if (s := result.spread(metric)) else None)
                    for metric in (*METRICS, *POWERTOOLS_METRICS)
                },
                "store": {figure.name: asdict(store_spread(result, figure.name)) for figure in
                          dataclasses.fields(StoreFigures)},
                "runs": [asdict(run) for run in result.runs],
                "breaker_checks": [asdict(check) for check in result_verdict],
            }
            for result, result_verdict in zip(powertools, powertools_verdicts, strict=True)
        ],
    }  # fmt: skip
    text = (
        describe(scenario, args.seed, args.seeds, powertools=bool(powertools))
        + "\n\n"
        + render([*results, *powertools], verdict, scenario, breaker_verdict)
    )
    for result, result_verdict in zip(powertools, powertools_verdicts, strict=True):
        text += "\n" + "\n".join(_checks_text(f"The same goals, {result.policy.label}:", result_verdict))
    if powertools:
        text += "\n" + render_powertools(powertools)
    return text, data


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    text, data = report(args)
    if args.json:
        json.dump(_json_ready(data), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
