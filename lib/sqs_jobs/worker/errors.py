"""The runtime's error types. Behaviour follows the type, never the message text.

The contract's types (JobError, PermanentError, TransientError and the envelope errors) come from `sqs_jobs`,
which publishers share; jobs import all of them from here.
"""

from __future__ import annotations

from typing import ClassVar

from sqs_jobs.errors import (
    EnvelopeError,
    EnvelopeFieldError,
    EnvelopeNotJSONError,
    EnvelopeNotObjectError,
    EnvelopeTooLargeError,
    JobError,
    PermanentError,
    TransientError,
    UnknownJobError,
)

__all__ = [
    "CircuitOpenError",
    "DeadLetterError",
    "DebounceWaitError",
    "DurableMisuseError",
    "DurableStepFailedError",
    "EnvelopeError",
    "EnvelopeFieldError",
    "EnvelopeNotJSONError",
    "EnvelopeNotObjectError",
    "EnvelopeTooLargeError",
    "FlowControlStoreError",
    "FollowUpNotPublishableError",
    "HeldBackError",
    "HttpError",
    "HttpPermanentError",
    "HttpTransientError",
    "IdempotencyKeyError",
    "JobCancelledError",
    "JobCodeExitError",
    "JobError",
    "JobInProgressError",
    "JobTimeLimitError",
    "KeyBusyError",
    "PermanentError",
    "RateLimitedError",
    "ReceivesExhaustedError",
    "RecordNotFoundError",
    "RunNeverReportedError",
    "RuntimeInfrastructureError",
    "StepTimeLimitError",
    "TimeLimitInterrupt",
    "TimeLimitUnservableError",
    "TooManyFollowUpsError",
    "TransientError",
    "UniqueKeyError",
    "UnknownJobError",
    "WorkerConfigError",
]


class RecordNotFoundError(PermanentError):
    """The entity the job names does not exist (deleted, or never created)."""


class IdempotencyKeyError(PermanentError):
    """A job produced an empty idempotency key; hashing it would merge unrelated jobs."""


class UniqueKeyError(IdempotencyKeyError):
    """A unique or debounced job's `unique_key` raised or produced a blank key: dead-lettered like a bad
    idempotency key (the same envelope would fail the same way)."""


class DebounceWaitError(JobError):
    """A debounced job's publish whose window has not ended yet: handed back unrun until it ends."""


class JobInProgressError(TransientError):
    """Another worker is running the same idempotency key right now; try again later."""


class WorkerConfigError(JobError):
    """The worker is misconfigured (missing environment, unknown queue): a deployment bug, not a job failure."""


class FollowUpNotPublishableError(WorkerConfigError):
    """A run asked for a follow-up job its JobSpec.publishes does not list: its worker has no route or grant to
    that job's queue. Retried as a configuration error until a deploy lists it."""


class TooManyFollowUpsError(PermanentError):
    """A run asked for more follow-up jobs than one run may publish (follow_ups.MAX_FOLLOW_UPS)."""


class DeadLetterError(JobError):
    """The runtime could not send a failed record to the dead-letter queue; SQS's redrive policy takes over."""


class JobTimeLimitError(TransientError):
    """A run went past its job's time limit and was cut; the rest of the batch carries on."""


class JobCodeExitError(JobError):
    """A job raised SystemExit or KeyboardInterrupt: a failure of that run (transient, retried, bounded), never
    the end of the worker."""


class TimeLimitInterrupt(BaseException):
    """Raised inside a job's own code at its time limit. A BaseException, so that a job's `except Exception`
    can't swallow it; the runtime turns it into JobTimeLimitError once it leaves the job."""


class TimeLimitUnservableError(PermanentError):
    """The function's timeout leaves no room for the job's time limit plus the settle margin: no invocation
    could ever run the record, so it is dead-lettered instead of being handed back for ever."""


class HeldBackError(TransientError):
    """The runtime held a record back by its own flow control (an open breaker, a rate limit, a busy key, or the
    limits' store failing): not the job's failure. Its record is handed back until `retry_after_s`, plus jitter
    over `spread_s`, without spending an attempt, for at most `max_hold_s` from its first hold (None: the queue's
    breaker's max_hold_s); after that each refusal is a failed attempt, so nothing is held for ever."""

    # Why it was held (JobDeferred's reason, a names.DeferReason value).
    reason: ClassVar[str]

    def __init__(
        self,
        message: str,
        holder: str,
        retry_after_s: float,
        spread_s: float,
        max_hold_s: int | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        # What held it back: a downstream's breaker, a limit's name; and a keyed limit's key (the tenant, the ID).
        self.holder = holder
        self.key = key
        self.retry_after_s = retry_after_s
        self.spread_s = spread_s
        self.max_hold_s = max_hold_s


class CircuitOpenError(HeldBackError):
    """A job's call to a downstream whose circuit breaker is open was refused without being made. Not the job's
    failure: its record is handed back for later without spending an attempt (for a bounded time)."""

    reason = "circuit_open"

    def __init__(self, message: str, downstream: str, retry_after_s: float, open_for_s: float) -> None:
        # Until the breaker lets a probe through, spread over how long it stays open each time now.
        super().__init__(message, downstream, retry_after_s, spread_s=open_for_s)
        self.downstream = downstream
        self.open_for_s = open_for_s


class RateLimitedError(HeldBackError):
    """A rate limit (sqs_jobs.flow_control.RateLimit) had no token for the run or call before the run's time
    would run out: the record is handed back until about when its token comes, spending no attempt."""

    reason = "rate_limited"


class KeyBusyError(HeldBackError):
    """The job's key already has as many runs as its concurrency limit allows (KeyConcurrency): the record is
    handed back until a run may have ended, spending no attempt."""

    reason = "key_busy"


class FlowControlStoreError(HeldBackError):
    """The store of the rate limits and key leases (the idempotency table) failed: the runtime's fault, never the
    job's. The record waits (handed back with a backoff, no attempt spent) and the runtime-faults alarm pages."""

    reason = "runtime_fault"

    @classmethod
    def of(cls, error: Exception, store: str, holder: str, max_hold_s: int) -> FlowControlStoreError:
        """The failure of `store` ("the rate limits' store") behind `holder`'s limit: back in about a second."""
        return cls(
            f"{store} failed ({type(error).__name__}: {error})",
            holder=holder,
            retry_after_s=1.0,
            spread_s=5.0,
            max_hold_s=max_hold_s,
        )


class DownstreamAuthError(CircuitOpenError):
    """A downstream refused the deployment's credentials (HTTP 401 or 403): a wrong, expired or rotated API key is
    the deployment's fault, not the job's. The host's breaker opens at once, so the job and every other job that
    needs the host are held (no attempt spent, the circuit-open alarm pages) until a probe is accepted again, and
    for at most the breaker's max_hold_s, as for any open breaker (docs/failure-semantics.md)."""


class ReceivesExhaustedError(JobError):
    """A message reached its queue's receive limit (maxReceiveCount) while it still had to come back (handed back
    unrun, skipped behind a failed message of its FIFO group, or retried): the runtime dead-letters it with this
    evidence rather than let SQS's redrive policy move it without any."""


class RunNeverReportedError(JobError):
    """The key's last allowed run started and never reported back: its execution environment crashed, ran out of
    memory or hit the function timeout. The runtime dead-letters the message on its next delivery."""


class RuntimeInfrastructureError(TransientError):
    """The runtime's own AWS resources failed it (the idempotency table, the DLQ, its queue): a deployment or
    service problem, not the job's fault. Retried and alarmed, never dead-lettered as the job's failure."""


class SecretUnavailableError(TransientError):
    """A job's secret can't be read (missing, not allowed, no value): the deployment's fault, retried with backoff
    while someone fixes it; its message names the secret and AWS's error code, never a value."""


class HttpError(JobError):
    """An HTTP call a job made failed; `status` is the response status, or None when there was no response, and
    `body_excerpt` the start of the response's body (hidden characters escaped), kept as evidence."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        retry_after_s: float | None = None,
        body_excerpt: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
        self.body_excerpt = body_excerpt


class HttpTransientError(HttpError, TransientError):
    """A timeout, a refused or reset connection, or a status that may succeed later (408, 425, 429, 5xx)."""


class HttpPermanentError(HttpError, PermanentError):
    """A status that will not change on retry (400, 404, 409, 410, 422 and other 4xx)."""


class HttpCredentialsRefusedError(HttpPermanentError):
    """401 or 403: the server refused the credentials sent. From a job's run it becomes a DownstreamAuthError
    (the deployment's fault, held by the host's breaker); outside one it is a permanent answer like other 4xx."""


class JobCancelledError(PermanentError):
    """An operator cancelled the job while it ran (`jobctl job cancel`): the run stops at its next progress report
    or call and is dead-lettered with this type, never retried. Every later call of the run raises it again."""


class StepTimeLimitError(JobTimeLimitError):
    """A durable job's step ran past its time limit (Durable.step_time_limit_s): a transient failure of the step,
    retried after a backoff. Its thread can't be stopped; a step's effects must be idempotent (docs/workflows.md)."""


class DurableMisuseError(WorkerConfigError, PermanentError):
    """A durable job's code used its context where it can't work: a step, a wait or a follow-up inside a step (a
    replay does not run a finished step, so what it names would be lost or out of order), a step name taken twice, or
    a name the runtime keeps. Permanent: the same code does the same again."""


class DurableStepFailedError(JobError):
    """A durable job's step failed for good: permanently, or its last allowed attempt failed. The execution ends in
    failure with this error's evidence in the queue's DLQ."""

    def __init__(self, step: str, error_type: str, message: str, failure: str, attempts: int, traceback: str) -> None:
        super().__init__(f"step {step!r} failed ({failure}, attempt {attempts}): {error_type}: {message}")
        self.step = step
        self.error_type = error_type
        self.error_message = message
        self.failure = failure
        self.attempts = attempts
        self.traceback_text = traceback


class EventWaitError(JobError):
    """A durable job's wait for an event (DurableJobContext.wait_for_event) ended without the event. `event`: its
    name. The execution's evidence names the event (`(event <name>)`) when the job's code lets it through."""

    def __init__(self, event: str, message: str) -> None:
        super().__init__(message)
        self.event = event


class EventTimeoutError(EventWaitError, PermanentError):
    """No event came within the wait's timeout. Permanent, so the execution is dead-lettered with this evidence; a
    job that lists it in TRANSIENT_ERRORS waits again (a fresh wait of the same name), up to the queue's
    max_attempts waits in all."""


class EventRefusedError(EventWaitError, PermanentError):
    """The event's sender reported a failure in its place (Lambda's SendDurableExecutionCallbackFailure), or sent a
    payload that is not JSON: the job gets no event to go on with."""
