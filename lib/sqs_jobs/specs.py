"""The catalog's types: queues, their jobs, schedules, alarm thresholds, breakers, and their rules.

A team declares its app with these (and the resource kinds of sqs_jobs.resources) in its catalog module; the
defaults are deliberate (the article's rule 12: don't run libraries on defaults) and documented in
docs/catalog.md; `tests/unit/test_catalog.py` proves each.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqs_jobs.limits import (
    DAY,
    DEAD_LETTER_HEADROOM_BYTES,
    DEFAULT_PARALLEL_RECORDS,
    ESM_MAX_BATCHING_WINDOW_S,
    ESM_MAX_CONCURRENCY,
    ESM_MIN_CONCURRENCY,
    HAND_BACK_RECEIVES,
    HEARTBEAT_JITTER_S,
    INVOCATION_START_S,
    LAMBDA_MAX_TIMEOUT_S,
    MAX_PARALLEL_RECORDS,
    METRIC_LAG_S,
    MINUTE,
    NAME,
    SETTLE_MARGIN_S,
    SQS_DEFAULT_MAX_MESSAGE_BYTES,
    SQS_MAX_BATCH_SIZE,
    SQS_MAX_BATCH_WITHOUT_WINDOW,
    SQS_MAX_MESSAGE_BYTES,
    SQS_MAX_RECEIVE_COUNT,
    SQS_MAX_RETENTION_S,
    SQS_MAX_VISIBILITY_S,
    SQS_MIN_MESSAGE_BYTES,
    SQS_MIN_RETENTION_S,
)

# A catalog's features are loaded where it declares them (the worker of a plain queue imports none of them):
# their types are only annotations here.
if TYPE_CHECKING:
    from sqs_jobs.durable import Durable
    from sqs_jobs.flow_control import DeclaredLimit, KeyConcurrency, RateLimit
    from sqs_jobs.resources import Resource

_HANDLER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
# A priority lane's name: part of its queue's name (`<stack>-<queue>-<lane>`), its SSM parameters and alarms.
LANE_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
# `<stack>-<queue>-dlq` is the queue's dead-letter queue.
RESERVED_LANE = "dlq"


# Published to every queue by the heartbeat canary; every worker accepts it and only records that it arrived.
HEARTBEAT_JOB = "heartbeat"


class CatalogError(ValueError):
    """The catalog breaks a rule; every problem found is listed in the message."""


class UnknownNameError(KeyError):
    """A name that is not there; its message is a sentence naming the ones that are."""

    def __str__(self) -> str:  # KeyError quotes its argument; ours is a sentence.
        return str(self.args[0])


class UnknownResourceError(UnknownNameError):
    """A resource name that the catalog does not declare."""


class UnknownQueueError(UnknownNameError):
    """A queue name that the catalog does not define."""


# The retrying alarm's default threshold: a job's third failed run in a row (see AlarmThresholds.retry_attempts).
DEFAULT_RETRY_ALARM_ATTEMPTS = 3


@dataclass(frozen=True)
class AlarmThresholds:
    """When the queue's CloudWatch alarms fire."""

    # The article's figure: alert when the oldest job has waited more than 15 minutes.
    oldest_message_age_s: int = 15 * MINUTE
    # One message in the DLQ is already an incident worth a look.
    dlq_depth: int = 1
    # More visible messages than this is a backlog worth a look even while they are young (a burst, slow workers).
    backlog: int = 1000
    # New dead letters in 5 minutes (the runtime's own metric): catches a DLQ that someone drains quickly.
    dlq_arrivals: int = 1
    # Times a circuit breaker opened in 5 minutes (any downstream): jobs that need it are waiting.
    circuit_opened: int = 1
    # Share of runs that failed over 5 minutes (failed / (succeeded + failed)).
    failure_rate: float = 0.1
    # The failure-rate alarm speaks only when at least this many runs happened in those 5 minutes: on a quiet
    # queue one failure in two runs is 50 % and means nothing (the DLQ and dead-letter alarms still see it).
    failure_rate_min_runs: int = 10
    # Messages waiting and none deleted for this long: a disabled event source, broken permissions, concurrency 0.
    stalled_after_s: int = 10 * MINUTE
    # A job's slowest runs (p99 over 5 minutes) above this share of its time limit: about to be cut.
    duration_ratio: float = 0.8
    # How often the heartbeat canary publishes to the queue, and how long without one the alarm waits.
    heartbeat_interval_s: int = 5 * MINUTE
    heartbeat_missing_after_s: int = 15 * MINUTE
    # One job failing run after run: the alarm fires when a run that will be retried was at least this attempt of
    # its key (the runtime's RetryAttempt, Maximum over 5 minutes). None: 3, or max_attempts - 1 when the queue
    # allows fewer runs (`retry_alarm_attempts`). 3: two failures in a row can be a blip, a third is a pattern;
    # with the default backoff (30 s base, 120 s cap) the third failure comes at most 90 s after the first, while
    # the tenth (the dead letter) comes 465 s later on average (docs/monitoring.md).
    retry_attempts: int | None = None
    # A key held back (by a rate limit, a busy key, an open breaker) for this share of its max_hold_s by the time it
    # is due again: it is about to spend attempts on refusals (the runtime's HoldShare, Maximum over 5 minutes).
    hold_share: float = 0.8

    def retry_alarm_attempts(self, max_attempts: int) -> int:
        """The retrying alarm's threshold for a queue whose jobs run at most `max_attempts` times."""
        if self.retry_attempts is not None:
            return self.retry_attempts
        return max(1, min(DEFAULT_RETRY_ALARM_ATTEMPTS, max_attempts - 1))

    def problems(self, where: str, max_attempts: int) -> list[str]:
        """Every rule the thresholds break, for a queue whose jobs run at most `max_attempts` times."""
        found: list[str] = []
        if self.oldest_message_age_s < MINUTE:
            found.append(f"{where}: alarms.oldest_message_age_s must be at least {MINUTE}")
        if self.dlq_depth < 1:
            found.append(f"{where}: alarms.dlq_depth must be at least 1")
        if self.backlog < 1 or self.dlq_arrivals < 1 or self.circuit_opened < 1:
            found.append(f"{where}: alarms.backlog, alarms.dlq_arrivals and alarms.circuit_opened must be at least 1")
        if not 0 < self.failure_rate < 1:
            found.append(f"{where}: alarms.failure_rate {self.failure_rate} must be between 0 and 1 (exclusive)")
        if self.failure_rate_min_runs < 1:
            found.append(f"{where}: alarms.failure_rate_min_runs {self.failure_rate_min_runs} must be at least 1")
        if not 0 < self.duration_ratio <= 1:
            found.append(f"{where}: alarms.duration_ratio {self.duration_ratio} must be in (0, 1]")
        # HoldShare is capped at 1 (a key at its bound): above it the alarm could never fire.
        if not 0 < self.hold_share <= 1:
            found.append(f"{where}: alarms.hold_share {self.hold_share} must be in (0, 1]")
        if self.stalled_after_s < 5 * MINUTE:
            found.append(f"{where}: alarms.stalled_after_s must be at least {5 * MINUTE} (SQS metrics lag minutes)")
        slack_s = HEARTBEAT_JITTER_S + METRIC_LAG_S
        if not MINUTE <= self.heartbeat_interval_s <= self.heartbeat_missing_after_s - slack_s:
            found.append(
                f"{where}: heartbeats need 60 <= alarms.heartbeat_interval_s ({self.heartbeat_interval_s}) <= "
                f"alarms.heartbeat_missing_after_s ({self.heartbeat_missing_after_s}) - {slack_s} (a heartbeat may "
                f"be a minute late and its metric {METRIC_LAG_S // MINUTE} minutes late: less would page for a "
                "healthy queue)"
            )
        found += self._retry_problems(where, max_attempts)
        return found

    def _retry_problems(self, where: str, max_attempts: int) -> list[str]:
        if self.retry_attempts is None:
            return []  # derived: always one that can fire
        if self.retry_attempts < 1:
            return [f"{where}: alarms.retry_attempts {self.retry_attempts} must be at least 1"]
        # RetryAttempt is sampled for runs that will be retried: attempts 1 .. max_attempts - 1. A queue without
        # retries (max_attempts 1) has no retry alarm at all; its failures are dead letters at once.
        if 1 < max_attempts <= self.retry_attempts:
            return [
                f"{where}: alarms.retry_attempts {self.retry_attempts} can never fire: with max_attempts "
                f"{max_attempts} a job is retried after at most {max_attempts - 1} failed runs (its next failure "
                f"dead-letters it); set alarms.retry_attempts to at most {max_attempts - 1}"
            ]
        return []


@dataclass(frozen=True)
class CircuitBreakerSpec:
    """A circuit breaker per downstream of a queue's jobs: per HTTP host of their HTTP client, per AWS service of
    their AWS calls. Each worker (execution environment) keeps its own (docs/failure-semantics.md says why).

    Closed, it counts consecutive transient failures (timeouts, refused connections, 5xx, 429, throttling); at
    `failure_threshold` it opens. Open, a job's call to that downstream is refused without being made, and the
    record is handed back for later without spending an attempt. After `open_s` one call at a time may probe it:
    a success closes it, a failure opens it again for twice as long, up to `max_open_s`. Chosen with
    `make bench` (docs/benchmarks.md): in a 2-minute outage of 1,000 jobs they make under 0.1x the calls of
    immediate retry and drain within 1.2x of a fixed 30 s visibility.
    """

    enabled: bool = True
    failure_threshold: int = 5
    open_s: float = 5.0
    max_open_s: float = 30.0
    # How long a record may be handed back by open breakers without spending an attempt, counted from its first
    # hand-back. After that, each refusal is a failed attempt (with backoff), so a downstream that stays down
    # leaves its jobs in the DLQ with evidence instead of waiting for ever.
    max_hold_s: int = 15 * MINUTE

    def problems(self, where: str) -> list[str]:
        found: list[str] = []
        if self.failure_threshold < 1:
            found.append(f"{where}: circuit_breaker.failure_threshold {self.failure_threshold} must be at least 1")
        if not 0 < self.open_s <= self.max_open_s <= LAMBDA_MAX_TIMEOUT_S:
            found.append(
                f"{where}: circuit_breaker needs 0 < open_s ({self.open_s:g}) <= max_open_s "
                f"({self.max_open_s:g}) <= {LAMBDA_MAX_TIMEOUT_S}"
            )
        if not 0 <= self.max_hold_s <= SQS_MAX_VISIBILITY_S:
            found.append(f"{where}: circuit_breaker.max_hold_s {self.max_hold_s} is outside 0..{SQS_MAX_VISIBILITY_S}")
        return found


@dataclass(frozen=True)
class Schedule:
    """A recurring run of a job: EventBridge Scheduler sends `{"job": <job>, "id": <scheduled time>}` to the
    job's queue at each time `expression` names, in `timezone`. The ID is the scheduled time, so a firing the
    scheduler delivers twice runs once."""

    # Unique within the job; the stack names the schedule `<job>-<name>` in its schedule group.
    name: str
    # `cron(minutes hours day-of-month month day-of-week year)` or `rate(<value> <unit>)`.
    expression: str
    # An IANA time zone name: cron expressions are read in it (daylight saving included).
    timezone: str = "UTC"
    description: str = ""

    def problems(self, where: str) -> list[str]:
        found: list[str] = []
        if not NAME.fullmatch(self.name):
            found.append(f"{where}: schedule name {self.name!r} must match {NAME.pattern}")
        import zoneinfo

        from sqs_jobs.schedule_expressions import schedule_expression_problem

        problem = schedule_expression_problem(self.expression)
        if problem:
            found.append(f"{where}: schedule {self.name!r}: {problem}")
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            found.append(
                f"{where}: schedule {self.name!r}: time zone {self.timezone!r} is not an IANA time zone name, "
                "e.g. UTC, Europe/Berlin, Asia/Tokyo"
            )
        return found


@dataclass(frozen=True)
class JobSpec:
    """One job type: its name in the envelope and the module that runs it."""

    name: str
    # Dotted module path; the module defines `run(envelope, context)` and may define `idempotency_key(envelope)`.
    handler: str
    description: str = ""
    # Safe to run twice for the same key; `jobctl dlq redrive` asks for confirmation when it is not.
    idempotent: bool = True
    # Names of the catalog's resources (Catalog.resources) the job may use; nothing else reaches it.
    resources: tuple[str, ...] = ()
    # How long one run may take before it is cut and retried as a transient failure; None: the queue's default
    # (half the function timeout, so a hung call can never use up the whole invocation).
    time_limit_s: int | None = None
    # Recurring runs (EventBridge Scheduler); empty: the job runs only when published.
    schedules: tuple[Schedule, ...] = ()
    # At most this many runs started per second across every worker (sqs_jobs.flow_control); None: no limit.
    rate_limit: RateLimit | None = None
    # At most this many runs at once per key (default: per ID) across every worker; None: no limit beyond the
    # idempotency key's own (one run at a time).
    concurrency: KeyConcurrency | None = None
    # Unique: of the publishes of one unique key (`<job>:<id>` by default) sent within this many seconds of the one
    # that claimed the window, only that one runs; the others are acknowledged unrun when consumed. None: off.
    unique_for_s: int | None = None
    # Debounce: each publish waits this many seconds from its send and runs only if no later publish of its unique
    # key came meanwhile, so a burst runs once, after it ends. None: off. Not together with unique_for_s.
    debounce_s: int | None = None
    # Jobs this job's worker may publish: the callbacks of batches it is a member of (sqs_jobs.batches), a chain's
    # next step, the next steps it names (`context.then`). The stack grants its worker sending to their queues,
    # nothing more; JobPublisher.batch and .chain refuse what its jobs don't list, and so does `context.then`.
    publishes: tuple[str, ...] = ()
    # Durable: the job runs as a Lambda durable execution in checkpointed steps, up to durable.execution_timeout_s
    # (sqs_jobs.durable; docs/workflows.md). None: an ordinary job, one run within the worker's invocation.
    durable: Durable | None = None

    @property
    def limited(self) -> bool:
        """Whether its runs pass a limit before they start: a rate limit, a concurrency per key."""
        return self.rate_limit is not None or self.concurrency is not None

    @property
    def exclusive(self) -> bool:
        """Whether its copies are judged by a window before they run: unique_for_s, debounce_s."""
        return self.unique_for_s is not None or self.debounce_s is not None


# QueueSpec's numeric settings and their kinds, checked before their ranges.
_NUMBERS: dict[str, type] = {
    "max_attempts": int,
    "function_timeout_s": int,
    "memory_mb": int,
    "batch_size": int,
    "batching_window_s": int,
    "max_concurrency": int,
    "retention_s": int,
    "dlq_retention_s": int,
    "idempotency_expiry_s": int,
    "backoff_base_s": int,
    "backoff_cap_s": int,
    "parallel_records": int,
    "max_message_bytes": int,
    "max_receives": int,
    "list_running_after_s": float,
}
_OPTIONAL_NUMBERS = frozenset({"max_receives"})


@dataclass(frozen=True)
class QueueSpec:
    """One SQS queue, its DLQ and the worker Lambda that drains it."""

    name: str
    jobs: tuple[JobSpec, ...]
    description: str = ""
    # How many times a job may run before it is dead-lettered. Also the queue's maxReceiveCount: SQS moves a
    # message to the DLQ on the receive after the last attempt (crashes, timeouts), the runtime itself on a
    # failure in the last attempt (with evidence). Lambda's guidance is at least 5; 10 with the backoff below
    # spreads the attempts over about 8 minutes on average, riding out a few minutes of downstream outage.
    max_attempts: int = 10
    function_timeout_s: int = 60
    memory_mb: int = 256
    batch_size: int = 10
    batching_window_s: int = 0
    # Event source mapping's maximum concurrency: at most this many workers call downstreams at once.
    max_concurrency: int = 5
    # Source retention is SQS's default; the DLQ keeps evidence for the maximum, which must be longer,
    # because a standard queue's DLQ counts retention from the original enqueue time.
    retention_s: int = 4 * DAY
    dlq_retention_s: int = 14 * DAY
    # Idempotency records outlive the DLQ's retention, so a redrive within retention can never repeat a
    # completed side effect.
    idempotency_expiry_s: int = 15 * DAY
    alarms: AlarmThresholds = field(default_factory=AlarmThresholds)
    # Retry delay after a transient failure: full jitter in [0, min(cap, base * 2^(attempt-1))] seconds, set as
    # the message's visibility timeout (SQS has no native backoff). See docs/failure-semantics.md.
    # Chosen with `make bench` (docs/benchmarks.md): fewer downstream calls than a fixed 30 s visibility during a
    # 2-minute outage, a comparable drain after it, and nothing dead-lettered.
    backoff_base_s: int = 30
    backoff_cap_s: int = 120
    # A FIFO queue keeps order per message group; the worker then stops a group at its first failure.
    fifo: bool = False
    # How many records of a batch run at once (threads in one worker; on a FIFO queue, at most one per message
    # group). Jobs mostly wait on a downstream, and a batch run one record after another holds the invocation for
    # the sum of those waits. The default runs a whole default batch at once. Each worker then has up to this
    # many calls in flight: a downstream sees up to max_concurrency x parallel_records (see `max_in_flight`).
    parallel_records: int = DEFAULT_PARALLEL_RECORDS
    circuit_breaker: CircuitBreakerSpec = field(default_factory=CircuitBreakerSpec)
    # The largest message the queue accepts (its MaximumMessageSize), body and attributes as SQS counts them. Its
    # DLQ takes SQS's largest, so a dead letter always has room for its evidence (`dlq_max_message_bytes`).
    max_message_bytes: int = SQS_DEFAULT_MAX_MESSAGE_BYTES
    # The queue's maxReceiveCount; None derives it (see `receive_limit`). The runtime counts runs itself (in the
    # key's idempotency record), so this is only the safety net for what it can't count: a worker that dies before
    # a record's run starts (a broken deploy).
    max_receives: int | None = None
    # A key enters the in-flight view (the `jobs-by-life` index: `jobctl job list`, the console's jobs page) as
    # running once its first run has lasted this long: a job that succeeds sooner costs no index write (two per job
    # otherwise, 1.9x Powertools' own writes; docs/capacity.md). 0 lists every run from its start; past the jobs'
    # time limits, first runs are never listed. A retry, a held record and a cancelled key are listed at once
    # whatever this says; a run with a cancel requested is listed as any run is.
    list_running_after_s: float = 5.0
    # Each run a span in its publisher's trace (OpenTelemetry; the `tracing` extra in the workers' layer;
    # docs/tracing.md). Off, the worker imports and does nothing of it.
    tracing: bool = False
    # Priority lanes, the most urgent first (e.g. ("high", "normal")): each its own SQS queue and event source,
    # drained by the queue's one worker, so an urgent job never waits behind a backlog of routine ones
    # (docs/priorities.md). Empty: one queue, as without lanes.
    priorities: tuple[str, ...] = ()
    # The lane of a publish that names none; None: the last (least urgent) lane. Its queue keeps the queue's name.
    default_priority: str | None = None
    # Workers the lower lanes leave to the most urgent one: it may use all of max_concurrency, each other lane
    # max_concurrency less this (at least 2, Lambda's least). None: half of max_concurrency, rounded down.
    urgent_reserve: int | None = None

    @property
    def lanes(self) -> tuple[str, ...]:
        """The priority lanes, the most urgent first; empty for a queue without lanes."""
        return self.priorities

    @property
    def default_lane(self) -> str | None:
        """The lane a publish without a priority goes to (its queue has the queue's own name); None without lanes."""
        if not self.priorities:
            return None
        return self.default_priority if self.default_priority is not None else self.priorities[-1]

    @property
    def reserved_for_urgent(self) -> int:
        """Workers only the most urgent lane may use: `urgent_reserve`, or half of max_concurrency."""
        return self.urgent_reserve if self.urgent_reserve is not None else self.max_concurrency // 2

    def lane_concurrency(self, lane: str | None) -> int:
        """The most workers the event source of `lane` runs at once (its ScalingConfig MaximumConcurrency): the whole
        max_concurrency for the most urgent lane (and for a queue without lanes), less the reserve for the others."""
        if not self.priorities or lane is None or lane == self.priorities[0]:
            return self.max_concurrency
        if lane not in self.priorities:
            raise KeyError(lane)
        return self.max_concurrency - self.reserved_for_urgent

    @property
    def total_concurrency(self) -> int:
        """The most workers of the queue at once, every lane's event source at its maximum."""
        return sum(self.lane_concurrency(lane) for lane in self.priorities) or self.max_concurrency

    @property
    def dlq_max_message_bytes(self) -> int:
        """The DLQ's MaximumMessageSize: SQS's largest, at least DEAD_LETTER_HEADROOM_BYTES above the queue's."""
        return SQS_MAX_MESSAGE_BYTES

    @property
    def receive_limit(self) -> int:
        """How often SQS may deliver a message before its redrive policy moves it to the DLQ: the runs the
        runtime allows plus receives that run nothing (HAND_BACK_RECEIVES; on a FIFO queue also those spent behind
        up to a batch of failing messages of its group), so that SQS never moves a message before the runtime's
        own count has dead-lettered it with evidence. The runtime never returns a message on its last receive."""
        if self.max_receives is not None:
            return self.max_receives
        behind = self.batch_size if self.fifo else 1
        wanted = self.max_attempts * behind + HAND_BACK_RECEIVES
        # A message no worker can start (a broken deploy) spends a receive per visibility timeout: it must reach
        # the DLQ before the queue's retention deletes it.
        fits = self.retention_s // max(1, self.visibility_timeout_s)
        return max(self.max_attempts + 1, min(SQS_MAX_RECEIVE_COUNT, wanted, fits))

    @property
    def visibility_timeout_s(self) -> int:
        """Lambda's guidance for SQS sources: at least 6x the function timeout, plus the batching window."""
        return 6 * self.function_timeout_s + self.batching_window_s

    @property
    def retry_alarm_attempts(self) -> int:
        """The retrying alarm's threshold: `alarms.retry_attempts`, or 3 (at most max_attempts - 1)."""
        return self.alarms.retry_alarm_attempts(self.max_attempts)

    @property
    def records_in_parallel(self) -> int:
        """How many records of one batch the worker runs at once: never more than a batch holds."""
        return min(self.parallel_records, self.batch_size)

    @property
    def max_in_flight(self) -> int:
        """The most jobs of this queue running at once: every worker (of every lane) running a full set of records."""
        return self.total_concurrency * self.records_in_parallel

    @property
    def job_names(self) -> tuple[str, ...]:
        return tuple(job.name for job in self.jobs)

    @property
    def accepted_jobs(self) -> tuple[str, ...]:
        """What this queue's worker accepts: its jobs and the heartbeat."""
        return (*self.job_names, HEARTBEAT_JOB)

    @property
    def resources(self) -> tuple[str, ...]:
        """Every resource any job on this queue needs, each once, in catalog order."""
        return tuple(dict.fromkeys(resource for job in self.jobs for resource in job.resources))

    @property
    def default_time_limit_s(self) -> int:
        """Half the function timeout (a hung call never uses up the invocation), within what it can serve."""
        return max(1, min(self.function_timeout_s // 2, self.max_time_limit_s))

    @property
    def max_time_limit_s(self) -> int:
        """The longest time limit a fresh invocation can serve: the function timeout less the settle margin and
        the invocation's start."""
        return self.function_timeout_s - SETTLE_MARGIN_S - INVOCATION_START_S

    def time_limit_s(self, job: str) -> int:
        """The time limit of one run of `job` on this queue; of a durable job, one attempt of one of its steps (in
        its durable function: the queue's worker only starts its execution)."""
        durable = self.job(job).durable
        if durable is not None:
            return durable.step_time_limit_s
        limit_s = self.job(job).time_limit_s
        return self.default_time_limit_s if limit_s is None else limit_s

    def job(self, name: str) -> JobSpec:
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    def _message_size_problems(self, where: str) -> list[str]:
        largest = SQS_MAX_MESSAGE_BYTES - DEAD_LETTER_HEADROOM_BYTES
        if SQS_MIN_MESSAGE_BYTES <= self.max_message_bytes <= largest:
            return []
        return [
            f"{where}: max_message_bytes {self.max_message_bytes} is outside {SQS_MIN_MESSAGE_BYTES}..{largest}: "
            f"SQS accepts {SQS_MIN_MESSAGE_BYTES}..{SQS_MAX_MESSAGE_BYTES}, and the DLQ keeps "
            f"{DEAD_LETTER_HEADROOM_BYTES} bytes above the queue's limit for a dead letter's evidence"
        ]

    def _type_problems(self, where: str) -> list[str]:
        """A setting that is not a number (or a switch that is not True or False) is said as such, before any range
        is checked against it."""
        switch: list[str] = (
            []
            if isinstance(self.tracing, bool)
            else [f"{where}: tracing must be True or False, not {self.tracing!r:.40}"]
        )
        return switch + [
            f"{where}: {name} must be {'a whole number' if kind is int else 'a number'}, not "
            f"{type(value).__name__} {value!r:.40}"
            for name, kind in _NUMBERS.items()
            for value in [getattr(self, name)]
            if not (value is None and name in _OPTIONAL_NUMBERS)
            and (isinstance(value, bool) or not isinstance(value, int if kind is int else int | float))
        ]

    def problems(self) -> list[str]:
        """Every rule this queue breaks, as sentences naming the accepted values."""
        where = f"queue {self.name!r}"
        if wrong := self._type_problems(where):
            return wrong
        found: list[str] = []
        if not NAME.fullmatch(self.name):
            found.append(f"{where}: name must match {NAME.pattern}")
        if not self.jobs:
            found.append(f"{where}: needs at least one job")
        # One receive beyond the last run: the runtime dead-letters a key whose last run never reported back.
        if not 1 <= self.max_attempts < SQS_MAX_RECEIVE_COUNT:
            found.append(f"{where}: max_attempts {self.max_attempts} is outside 1..{SQS_MAX_RECEIVE_COUNT - 1}")
        if not 1 <= self.function_timeout_s <= LAMBDA_MAX_TIMEOUT_S:
            found.append(f"{where}: function_timeout_s {self.function_timeout_s} is outside 1..{LAMBDA_MAX_TIMEOUT_S}")
        if not 128 <= self.memory_mb <= 10_240:
            found.append(f"{where}: memory_mb {self.memory_mb} is outside 128..10240")
        if not 1 <= self.batch_size <= SQS_MAX_BATCH_SIZE:
            found.append(f"{where}: batch_size {self.batch_size} is outside 1..{SQS_MAX_BATCH_SIZE}")
        if self.batch_size > SQS_MAX_BATCH_WITHOUT_WINDOW and self.batching_window_s < 1:
            found.append(f"{where}: batch_size over {SQS_MAX_BATCH_WITHOUT_WINDOW} needs batching_window_s >= 1")
        if not 0 <= self.batching_window_s <= ESM_MAX_BATCHING_WINDOW_S:
            found.append(
                f"{where}: batching_window_s {self.batching_window_s} is outside 0..{ESM_MAX_BATCHING_WINDOW_S}"
            )
        if not ESM_MIN_CONCURRENCY <= self.max_concurrency <= ESM_MAX_CONCURRENCY:
            found.append(
                f"{where}: max_concurrency {self.max_concurrency} is outside "
                f"{ESM_MIN_CONCURRENCY}..{ESM_MAX_CONCURRENCY}"
            )
        if not 1 <= self.parallel_records <= MAX_PARALLEL_RECORDS:
            found.append(f"{where}: parallel_records {self.parallel_records} is outside 1..{MAX_PARALLEL_RECORDS}")
        if not 0 <= self.list_running_after_s <= LAMBDA_MAX_TIMEOUT_S:
            found.append(
                f"{where}: list_running_after_s {self.list_running_after_s} is outside 0..{LAMBDA_MAX_TIMEOUT_S}"
            )
        found += self.circuit_breaker.problems(where) + self._lane_problems(where)
        found += self._receive_problems(where)
        found += self._message_size_problems(where)
        if self.visibility_timeout_s > SQS_MAX_VISIBILITY_S:
            found.append(
                f"{where}: visibility timeout {self.visibility_timeout_s}s (6 x function_timeout_s + "
                f"batching_window_s) is over SQS's {SQS_MAX_VISIBILITY_S}s"
            )
        found += self._retention_problems(where)
        if not 1 <= self.backoff_base_s <= self.backoff_cap_s <= SQS_MAX_VISIBILITY_S:
            found.append(
                f"{where}: backoff needs 1 <= backoff_base_s ({self.backoff_base_s}) <= backoff_cap_s "
                f"({self.backoff_cap_s}) <= {SQS_MAX_VISIBILITY_S} (SQS's visibility limit)"
            )
        found += self.alarms.problems(where, self.max_attempts)
        for job in self.jobs:
            if job.name == HEARTBEAT_JOB:
                found.append(f"{where}: job name {HEARTBEAT_JOB!r} is reserved for the runtime's heartbeat canary")
            if not NAME.fullmatch(job.name):
                found.append(f"{where}: job name {job.name!r} must match {NAME.pattern}")
            if not _HANDLER.fullmatch(job.handler):
                found.append(f"{where}: job {job.name!r} handler {job.handler!r} is not a dotted module path")
            found += self._time_limit_problems(where, job)
            found += self._flow_problems(where, job)
            found += self._limit_problems(where, job)
            found += self._durable_problems(where, job)
            seen_schedules: set[str] = set()
            for schedule in job.schedules:
                found += schedule.problems(f"{where}: job {job.name!r}")
                if schedule.name in seen_schedules:
                    found.append(f"{where}: job {job.name!r} has two schedules named {schedule.name!r}")
                seen_schedules.add(schedule.name)
        return found

    def _lane_problems(self, where: str) -> list[str]:
        """priorities, default_priority and urgent_reserve: named lanes, each once, on a standard queue, each lane's
        event source with the concurrency Lambda takes."""
        lanes = self.priorities
        if not lanes:
            found = []
            if self.default_priority is not None:
                found.append(f"{where}: default_priority {self.default_priority!r} needs priorities (it has none)")
            if self.urgent_reserve is not None:
                found.append(f"{where}: urgent_reserve {self.urgent_reserve!r} needs priorities (it has none)")
            return found
        if not isinstance(lanes, tuple) or not all(isinstance(lane, str) for lane in lanes):
            return [f"{where}: priorities must be a tuple of lane names, e.g. ('high', 'normal'), not {lanes!r:.60}"]
        found = [
            f"{where}: priority lane {lane!r} must match {LANE_NAME.pattern}"
            + (" and not be 'dlq' (the queue's dead-letter queue is <queue>-dlq)" if lane == RESERVED_LANE else "")
            for lane in lanes
            if not LANE_NAME.fullmatch(lane) or lane == RESERVED_LANE
        ]
        found += [
            f"{where}: priority lane {lane!r} is named twice; each lane once, the most urgent first"
            for lane in sorted({lane for lane in lanes if lanes.count(lane) > 1})
        ]
        if len(lanes) < 2:
            found.append(
                f"{where}: priorities {lanes!r} has one lane; lanes need at least two (one lane is the queue itself)"
            )
        if self.default_priority is not None and self.default_priority not in lanes:
            found.append(
                f"{where}: default_priority {self.default_priority!r} is not one of its lanes: {', '.join(lanes)}"
            )
        if self.fifo:
            found.append(
                f"{where}: priorities on a FIFO queue: its order holds within one queue, and each lane is a queue of "
                "its own, so a message group's jobs on two lanes would run out of order; give urgent jobs a FIFO "
                "queue of their own"
            )
        reserve = self.reserved_for_urgent
        if isinstance(reserve, bool) or not isinstance(reserve, int):
            found.append(f"{where}: urgent_reserve must be a whole number, not {reserve!r:.40}")
        elif not 0 <= reserve <= (most := self.max_concurrency - ESM_MIN_CONCURRENCY):
            found.append(
                f"{where}: urgent_reserve {reserve} leaves the lower lanes {self.max_concurrency - reserve} of "
                f"max_concurrency {self.max_concurrency}; each event source needs at least {ESM_MIN_CONCURRENCY} "
                f"(Lambda's least MaximumConcurrency): urgent_reserve must be 0..{most}"
                + ("" if self.urgent_reserve is not None else " (its default is half of max_concurrency)")
            )
        return found

    def _retention_problems(self, where: str) -> list[str]:
        found: list[str] = []
        for label, value in (("retention_s", self.retention_s), ("dlq_retention_s", self.dlq_retention_s)):
            if not SQS_MIN_RETENTION_S <= value <= SQS_MAX_RETENTION_S:
                found.append(f"{where}: {label} {value} is outside {SQS_MIN_RETENTION_S}..{SQS_MAX_RETENTION_S}")
        if self.dlq_retention_s <= self.retention_s:
            found.append(
                f"{where}: dlq_retention_s ({self.dlq_retention_s}) must be longer than retention_s "
                f"({self.retention_s}); the DLQ counts from the original enqueue time"
            )
        if self.idempotency_expiry_s <= self.dlq_retention_s:
            found.append(
                f"{where}: idempotency_expiry_s ({self.idempotency_expiry_s}) must be longer than "
                f"dlq_retention_s ({self.dlq_retention_s}), or a redrive could repeat a completed job"
            )
        return found

    def _receive_problems(self, where: str) -> list[str]:
        if not 1 <= self.max_attempts < SQS_MAX_RECEIVE_COUNT:
            return []  # said above
        limit = self.receive_limit
        if not self.max_attempts < limit <= SQS_MAX_RECEIVE_COUNT:
            return [
                f"{where}: max_receives {limit} must be between max_attempts + 1 ({self.max_attempts + 1}) and "
                f"{SQS_MAX_RECEIVE_COUNT}: the runtime dead-letters a key whose last run never reported back on the "
                "receive after it"
            ]
        # A worker that dies before a record's run starts (a broken deploy) spends a receive per visibility timeout:
        # the message must reach the DLQ before the queue's retention deletes it.
        if limit * self.visibility_timeout_s > self.retention_s:
            return [
                f"{where}: {limit} receives x the {self.visibility_timeout_s}s visibility timeout is longer than "
                f"retention_s ({self.retention_s}): a message no worker can start would expire before reaching the "
                "DLQ; lower max_receives or max_attempts, or raise retention_s"
            ]
        return []

    @property
    def max_debounce_s(self) -> int:
        """The longest debounce window one hand-back can wait out: SQS hides a message at most 12 h from its receive,
        and the invocation that hands it back has used up to its timeout of those."""
        return SQS_MAX_VISIBILITY_S - self.function_timeout_s

    @staticmethod
    def _limit_problems(where: str, job: JobSpec) -> list[str]:
        """rate_limit and concurrency: of their types, each within its bounds."""
        if job.rate_limit is None and job.concurrency is None:
            return []
        from sqs_jobs.flow_control import KeyConcurrency, RateLimit, limit_problems

        on_job = f"{where}: job {job.name!r}"
        wrong = limit_problems(on_job, "rate_limit", job.rate_limit, RateLimit)
        wrong += limit_problems(on_job, "concurrency", job.concurrency, KeyConcurrency)
        if wrong:
            return wrong
        found = job.rate_limit.problems(on_job) if job.rate_limit is not None else []
        return found + (job.concurrency.problems(on_job) if job.concurrency is not None else [])

    def _flow_problems(self, where: str, job: JobSpec) -> list[str]:
        """unique_for_s and debounce_s: one or the other, each within what the runtime can keep."""
        label = f"{where}: job {job.name!r}"
        found: list[str] = []
        if job.unique_for_s is not None and job.debounce_s is not None:
            found.append(
                f"{label} sets both unique_for_s and debounce_s; set one (unique runs the first publish of a window, "
                "debounce the last)"
            )
        if job.unique_for_s is not None and not 1 <= job.unique_for_s <= self.idempotency_expiry_s:
            found.append(
                f"{label} unique_for_s {job.unique_for_s} is outside 1..{self.idempotency_expiry_s} (the queue's "
                "idempotency_expiry_s: the publish that claimed a window is told from the others by its "
                "idempotency record, which must outlive the window)"
            )
        if job.debounce_s is None:
            return found
        if not 1 <= job.debounce_s <= self.max_debounce_s:
            found.append(
                f"{label} debounce_s {job.debounce_s} is outside 1..{self.max_debounce_s} (a publish waits its window "
                f"in one hand-back, and SQS hides a message at most {SQS_MAX_VISIBILITY_S} s from its receive, less "
                f"the {self.function_timeout_s} s function timeout)"
            )
        if job.debounce_s >= self.alarms.oldest_message_age_s:
            found.append(
                f"{label} debounce_s {job.debounce_s} must be less than alarms.oldest_message_age_s "
                f"({self.alarms.oldest_message_age_s}): every publish waits its window in the queue, and the age "
                "alarm would page for it"
            )
        if job.debounce_s >= self.retention_s:
            found.append(
                f"{label} debounce_s {job.debounce_s} must be less than retention_s ({self.retention_s}): SQS "
                "deletes a message at the end of its retention, waiting or not"
            )
        if self.fifo:
            found.append(
                f"{label} sets debounce_s on a FIFO queue: a waiting message holds its group, so no later publish "
                "could supersede it; debounce needs a standard queue"
            )
        return found

    def _durable_problems(self, where: str, job: JobSpec) -> list[str]:
        if job.durable is None:
            return []
        from sqs_jobs.durable import durable_job_problems

        return durable_job_problems(
            f"{where}: job {job.name!r}",
            job.durable,
            fifo=self.fifo,
            limited=job.limited,
            exclusive=job.exclusive,
        )

    def _time_limit_problems(self, where: str, job: JobSpec) -> list[str]:
        if job.durable is not None:
            return []  # its steps run in its durable function, within durable.function_timeout_s (Durable.problems)
        # A limit the invocation can't fit would have every record handed back unrun, for ever.
        limit_s = self.time_limit_s(job.name)
        label = f"time_limit_s {job.time_limit_s}" if job.time_limit_s is not None else f"default time limit {limit_s}"
        overhead = f"the {SETTLE_MARGIN_S} s settle margin and {INVOCATION_START_S} s for the invocation's start"
        if self.max_time_limit_s < 1:
            return [
                f"{where}: function_timeout_s {self.function_timeout_s} leaves no room for job {job.name!r}: a "
                f"run needs at least 1 s plus {overhead} (function_timeout_s >= "
                f"{1 + SETTLE_MARGIN_S + INVOCATION_START_S})"
            ]
        if not 1 <= limit_s <= self.max_time_limit_s:
            return [
                f"{where}: job {job.name!r} {label} must be between 1 and {self.max_time_limit_s} "
                f"(function_timeout_s {self.function_timeout_s} less {overhead})"
            ]
        return []


@dataclass(frozen=True)
class Catalog:
    """All queues, and every resource their jobs may use. Construction checks every rule and raises one
    CatalogError listing all problems."""

    queues: tuple[QueueSpec, ...]
    resources: tuple[Resource, ...] = ()

    def __post_init__(self) -> None:
        found = [problem for queue in self.queues for problem in queue.problems()]
        found += self._resource_problems()
        seen_queues: set[str] = set()
        seen_jobs: dict[str, str] = {}
        for queue in self.queues:
            if queue.name in seen_queues:
                found.append(f"queue {queue.name!r} is defined twice")
            seen_queues.add(queue.name)
            for job in queue.jobs:
                if job.name in seen_jobs:
                    found.append(
                        f"job {job.name!r} is on queue {seen_jobs[job.name]!r} and {queue.name!r}; "
                        "a job belongs to exactly one queue"
                    )
                seen_jobs[job.name] = queue.name
        found += [
            f"job {job.name!r} publishes unknown job {name!r}; known: {', '.join(sorted(seen_jobs))}"
            for queue in self.queues
            for job in queue.jobs
            for name in job.publishes
            if name not in seen_jobs
        ]
        if not self.queues:
            found.append("the catalog needs at least one queue")
        if found:
            raise CatalogError("invalid job catalog: " + "; ".join(found))

    def __iter__(self) -> Iterator[QueueSpec]:
        return iter(self.queues)

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(queue.name for queue in self.queues)

    @property
    def job_names(self) -> tuple[str, ...]:
        return tuple(job.name for queue in self.queues for job in queue.jobs)

    def queue(self, name: str) -> QueueSpec:
        for queue in self.queues:
            if queue.name == name:
                return queue
        raise UnknownQueueError(f"unknown queue {name!r}; the catalog has: {', '.join(self.queue_names)}")

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(resource.name for resource in self.resources)

    def resource(self, name: str) -> Resource:
        for resource in self.resources:
            if resource.name == name:
                return resource
        raise UnknownResourceError(f"unknown resource {name!r}; the catalog has: {', '.join(self.resource_names)}")

    def flow_limits(self, queue: str) -> tuple[DeclaredLimit, ...]:
        """The limits the queue's runs pass (sqs_jobs.flow_control): each job's concurrency per key and rate
        limit, then the rate limit of each endpoint or mail sender its jobs call (shared with every other queue that
        calls it)."""
        from sqs_jobs.flow_control import (
            DeclaredLimit,
            endpoint_rate_limit_name,
            job_rate_limit_name,
            key_concurrency_name,
        )
        from sqs_jobs.resources import Endpoint, MailSender

        spec = self.queue(queue)
        found: list[DeclaredLimit] = []
        for job in spec.jobs:
            if job.concurrency is not None:
                found.append(DeclaredLimit(key_concurrency_name(job.name), job.concurrency))
            if job.rate_limit is not None:
                found.append(DeclaredLimit(job_rate_limit_name(job.name), job.rate_limit))
        for name in spec.resources:
            resource = self.resource(name)
            if isinstance(resource, Endpoint | MailSender) and resource.rate_limit is not None:
                found.append(DeclaredLimit(endpoint_rate_limit_name(name), resource.rate_limit))
        return tuple(found)

    def _resource_problems(self) -> list[str]:
        if not self.resources and not any(job.resources for queue in self.queues for job in queue.jobs):
            return []
        from sqs_jobs.resources import Network

        found = [problem for resource in self.resources for problem in resource.problems()]
        names = [resource.name for resource in self.resources]
        found += [f"resource {name!r} is declared twice" for name in sorted({n for n in names if names.count(n) > 1})]
        known = ", ".join(sorted(names)) or "none (declare them in Catalog.resources)"
        for queue in self.queues:
            for job in queue.jobs:
                found += [
                    f"queue {queue.name!r}: job {job.name!r} needs unknown resource {name!r}; known: {known}"
                    for name in job.resources
                    if name not in names
                ]
            # A queue's jobs share one worker function, which runs in one network or none.
            networks = [
                spec.name for spec in self.resources if isinstance(spec, Network) and spec.name in queue.resources
            ]
            if len(networks) > 1:
                found.append(
                    f"queue {queue.name!r}: its jobs name networks {', '.join(networks)}; a queue's worker runs in "
                    "one network (put jobs that need another on a queue of their own)"
                )
        return found

    def publish_routes(self, queue: str) -> tuple[str, ...]:
        """The queues the worker of `queue` may publish to: those of the jobs its jobs list in `publishes`."""
        targets = {target for job in self.queue(queue).jobs for target in job.publishes}
        return tuple(spec.name for spec in self.queues if targets & set(spec.job_names))

    def queue_for_job(self, job: str) -> QueueSpec:
        for queue in self.queues:
            if job in queue.job_names:
                return queue
        raise KeyError(job)
