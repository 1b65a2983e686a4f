"""Settling a record: what a run came to, or why a record could not run, turned into a verdict, and the verdict
carried out. Deciding never touches the message; carrying out does:

- success or duplicate -> acknowledged;
- a call refused by an open breaker -> handed back until the breaker may let a probe through, its run given back
  (for up to max_hold_s);
- permanent failure, or a failure of the key's last allowed run -> dead-lettered with evidence, then acknowledged;
- transient failure -> back to the queue after a backoff.
Back to the queue means the message itself, visible again after the delay and reported as a batch item failure
(`RetryLater`; a receive is spent, a run is not: runs are the ledger's). On the message's last allowed receive
(`QueueSpec.receive_limit`) it can't go back, or SQS's redrive would move it without evidence: on a standard queue
a fresh copy goes back instead; on a FIFO queue, where a copy would break the group's order, it is dead-lettered
with its evidence. See docs/failure-semantics.md.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyKeyError as PowertoolsIdempotencyKeyError,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyPersistenceLayerError

from sqs_jobs.envelope import Envelope
from sqs_jobs.limits import SQS_MAX_DELAY_S
from sqs_jobs.worker.errors import (
    CircuitOpenError,
    EnvelopeError,
    FlowControlStoreError,
    HeldBackError,
    IdempotencyKeyError,
    JobCancelledError,
    JobInProgressError,
    ReceivesExhaustedError,
    RunNeverReportedError,
    RuntimeInfrastructureError,
    TimeLimitUnservableError,
)
from sqs_jobs.worker.invocation import Delivery, Invocation, Outcome
from sqs_jobs.worker.jobs import LoadedJob
from sqs_jobs.worker.names import (
    CANCELLED_COPY,
    DEAD_LETTERED,
    DEFERRED,
    DUPLICATE,
    FAILED,
    HELD,
    HOLD_SHARE,
    RETRIED,
    RETRY_ATTEMPT,
    RUNTIME_JOB,
    SUCCEEDED,
    UNPARSEABLE_JOB,
    DeadLetterFailure,
    DeferReason,
)
from sqs_jobs.worker.observability import BatchTally, Observability
from sqs_jobs.worker.run_ledger import (
    KeyCancelledError,
    LedgerEntry,
    RunLedger,
    RunsExhaustedError,
    StartedRun,
)
from sqs_jobs.worker.settings import WorkerSettings, idempotency_record_id

# Modules only a failure or a hand-back needs are imported there, on first use, not at cold start
# (docs/benchmarks.md, (a)).
if TYPE_CHECKING:
    from sqs_jobs.worker.classify import Classification
    from sqs_jobs.worker.deadletter import DeadLetterQueue
    from sqs_jobs.worker.errors import HttpError
    from sqs_jobs.worker.execution import Execution
    from sqs_jobs.worker.failure_path import Back, DeadLetter, KeyRecord

# Errors the runtime raises about a record: classified by the runtime's rules alone, never the job's overrides.
_RUNTIME_ERRORS = (
    HeldBackError,
    JobCancelledError,
    EnvelopeError,
    IdempotencyKeyError,
    JobInProgressError,
    ReceivesExhaustedError,
    RunNeverReportedError,
    RuntimeInfrastructureError,
    TimeLimitUnservableError,
)

# Logged when a run returned and neither try of its completion write landed: the one case a key may run again
# (docs/key-life.md, "No run after a success"); the chaos soak reads it.
COMPLETION_UNWRITTEN_MESSAGE = (
    "job done, but its completion could not be written to the idempotency store: acknowledged; a duplicate "
    "message of this key may run it again once the key's in-progress record expires"
)


class RetryLater(Exception):
    """Raised to the batch processor so it reports the record as a batch item failure; SQS redelivers it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


# --- verdicts: what happens to a record, decided before anything is done to it ----------------------------------


class Done:
    """Acknowledged as it is."""

    # A plain class: a dataclass's generated methods cost every cold start a third of a millisecond.
    __slots__ = ("outcome",)

    def __init__(self, outcome: Outcome) -> None:
        self.outcome: Final = outcome


# A failed record's verdicts are built by the first record that fails (sqs_jobs.worker.failure_path).
if TYPE_CHECKING:
    Verdict = Done | DeadLetter | Back


def _held_back(error: BaseException) -> HeldBackError | None:
    """The runtime's hold behind a failed run, if any (an open breaker's refusal, a rate limit, a busy key): a job
    that wrapped it (raise ... from, or raising in its except block) still failed only because the call was
    refused. `raise ... from None` says otherwise (e.g. an API whose 403 is about the entity, not the
    credentials): the chain stops there."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, HeldBackError):
            return current
        seen.add(id(current))
        if current.__cause__ is not None:
            current = current.__cause__
        else:
            current = None if current.__suppress_context__ else current.__context__
    return None


def _http_failure(error: BaseException) -> HttpError | None:
    """The failed HTTP call behind `error`: the error itself, or what it was raised from (a job's own error type
    wrapping the call's), a few links deep."""
    from sqs_jobs.worker.errors import HttpError

    seen: BaseException | None = error
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, HttpError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


class Settlement:
    """Decides what becomes of a worker's records and carries it out: acknowledged, back to the queue, or
    dead-lettered with evidence."""

    def __init__(
        self,
        settings: WorkerSettings,
        jobs: Mapping[str, LoadedJob],
        observability: Observability,
        tally: BatchTally,
        ledger: RunLedger,
        invocation: Invocation,
        rng: random.Random,
        sqs: Callable[[], Any],
        dead_letters: Callable[[], DeadLetterQueue],
        on_dead_lettered: Callable[[Envelope], None] | None = None,
    ) -> None:
        self._settings = settings
        self._queue = settings.queue
        self._jobs = jobs
        self._obs = observability
        self._tally = tally
        self._ledger = ledger
        self._invocation = invocation
        self._rng = rng
        # The SQS client for one of the runtime's own calls, and the dead-letter queue, built on first use.
        self._sqs = sqs
        self._dead_letters = dead_letters
        # Told of each envelope the DLQ has taken (a batch member's end is counted then, never before).
        self._on_dead_lettered = on_dead_lettered

    # --- verdicts -------------------------------------------------------------------------------------------------

    def done(self, envelope: Envelope, outcome: Outcome) -> Done:
        """A run that succeeded, or a duplicate answered from its key's record: acknowledged."""
        self._tally.add(envelope.job, SUCCEEDED if outcome is Outcome.SUCCEEDED else DUPLICATE)
        self._obs.logger.info("job done" if outcome is Outcome.SUCCEEDED else "duplicate skipped")
        return Done(outcome)

    def after_error(
        self,
        job: LoadedJob,
        envelope: Envelope,
        delivery: Delivery,
        key: str,
        execution: Execution,
        error: Exception,
    ) -> Verdict:
        """What a run attempt that raised leads to: the job's failure, or one of the runtime's own answers."""
        from sqs_jobs.worker.classify import classify

        if isinstance(error, JobInProgressError):
            # Another run holds the key (a crashed one holds it until its invocation's deadline at the latest).
            return self.hand_back(
                delivery,
                envelope,
                self.backoff(delivery.receives),
                DeferReason.IN_PROGRESS,
                error,
                {"error": str(error)},
            )
        if isinstance(error, PowertoolsIdempotencyKeyError):
            bad_key = IdempotencyKeyError(str(error))
            return self.dead_letter_of(
                delivery, envelope, bad_key, DeadLetterFailure.PERMANENT, classify(bad_key).reason
            )
        if isinstance(error, IdempotencyPersistenceLayerError):
            cause = error.__cause__
            if isinstance(cause, RunsExhaustedError):
                return self._held_for_dead_letter(delivery, envelope, cause.entry) or self._dead_letter_exhausted(
                    delivery, envelope, cause.entry
                )
            if isinstance(cause, KeyCancelledError):
                return self._cancelled_copy(envelope)
            if execution.completed:
                return self._completed_unrecorded(envelope, key, error)
            # The idempotency table failed the runtime (permissions, throttling, an outage), not the job.
            self._tally.runtime_fault("idempotency_store")
            self._obs.logger.exception("idempotency store failed before the run; handed back")
            fault = RuntimeInfrastructureError(f"idempotency store: {error}")
            return self.hand_back(
                delivery,
                envelope,
                self.backoff(delivery.receives),
                DeferReason.RUNTIME_FAULT,
                fault,
                {"error": str(fault)},
            )
        started = self._ledger.started()
        if started is None:  # nothing started a run: the runtime's own fault
            raise error
        try:
            return self._after_run(job, envelope, delivery, started, execution, error)
        except KeyCancelledError:
            # An operator asked the run to stop, and it failed (or was held) before it saw that: its key is
            # cancelled as if it had, its run and error kept, and its message acknowledged.
            self._obs.logger.info("a cancel was asked of the run, which failed before it saw it; the key is cancelled")
            return self._cancelled_copy(envelope)

    def _after_run(
        self,
        job: LoadedJob,
        envelope: Envelope,
        delivery: Delivery,
        started: StartedRun,
        execution: Execution,
        error: Exception,
    ) -> Verdict:
        if execution.out_of_time:  # the run's start left the job too little time: given back before it began
            self._refund(started, held=False, retry_at=time.time())
            details = {"remaining_s": round(self._invocation.remaining_s(), 3), "time_limit_s": execution.limit_s}
            return self.hand_back(
                delivery,
                envelope,
                0,
                DeferReason.NO_TIME,
                error,
                details,
                key_record=self._record_of(started, refunded=True),
            )
        return self._failed_run(job, envelope, delivery, started, error)

    def _failed_run(
        self, job: LoadedJob, envelope: Envelope, delivery: Delivery, started: StartedRun, error: Exception
    ) -> Verdict:
        from sqs_jobs.worker.classify import Kind, classify
        from sqs_jobs.worker.failure_path import Back, DeadLetter, Failure, KeyRecord

        if isinstance(error, _RUNTIME_ERRORS):
            classification = classify(error)  # the job's overrides are for the job's own errors
        else:
            classification = classify(error, job.permanent_errors, job.transient_errors)
        refusal = _held_back(error)
        if refusal is not None:
            held = self._hold(delivery, envelope, started, refusal)
            if held is not None:
                return held
            # Held for its max_hold_s already: from now on a refusal is a failed run like any other.
        attempt = started.number
        first_failed_at = started.before.first_failed_at or time.time()
        self._tally.add(envelope.job, FAILED)  # every failed run, whatever happens next
        if classification.kind is Kind.PERMANENT or attempt >= self._queue.max_attempts:
            if isinstance(error, JobCancelledError):
                failure = DeadLetterFailure.CANCELLED
            elif classification.kind is Kind.PERMANENT:
                failure = DeadLetterFailure.PERMANENT
            else:
                failure = DeadLetterFailure.RETRIES_EXHAUSTED
            http = _http_failure(error)
            return DeadLetter(
                error_type=type(error).__name__,
                error_message=str(error),
                traceback=_traceback(error),
                failure=failure,
                classification=classification.kind.value,
                reason=classification.reason,
                attempts=attempt,
                envelope=envelope,
                first_failed_at=first_failed_at,
                key_record=KeyRecord(started.before.record_id, attempt),
                run=started,
                http_status=http.status if http else None,
                http_body=http.body_excerpt if http else None,
            )
        delay_s = self.backoff(attempt, classification)
        self._write(
            "fail",
            lambda time_left_s: self._ledger.fail(
                started,
                Failure(type(error).__name__, str(error), classification.kind.value),
                retry_at=time.time() + delay_s,
                time_left_s=time_left_s,
            ),
        )
        self._obs.logger.warning(
            "job failed; retrying after backoff",
            extra={
                "classification": classification.kind.value,
                "reason": classification.reason,
                "error_type": type(error).__name__,
                "error": str(error)[:1024],
                "next_delay_s": delay_s,
                "attempts_left": self._queue.max_attempts - attempt,
            },
        )
        self._tally.add(envelope.job, RETRIED)
        self._tally.sample(envelope.job, RETRY_ATTEMPT, attempt)
        return Back(
            delay_s=delay_s,
            reason="retry",
            cause=error,
            envelope=envelope,
            attempts=attempt,
            first_failed_at=first_failed_at,
            key_record=KeyRecord(started.before.record_id, attempt),
        )

    def _cancelled_copy(self, envelope: Envelope) -> Done:
        """A copy of a key an operator cancelled: acknowledged without running (docs/jobctl.md, cancel)."""
        self._tally.add(envelope.job, CANCELLED_COPY)
        self._obs.logger.info("job cancelled by an operator; acknowledged without running")
        return Done(Outcome.CANCELLED)

    def _hold(self, delivery: Delivery, envelope: Envelope, started: StartedRun, refusal: HeldBackError) -> Back | None:
        """The runtime's flow control held the run back (an open breaker refused a call it needed, a rate limit,
        a busy key): give the run back and hand the record back until it may pass; None once the key has been
        held for the holder's max_hold_s."""
        from sqs_jobs.worker.breaker import hold_delay_s

        now = time.time()
        held_since = min(now, started.held_since or now)
        held_s = now - held_since
        max_hold_s = refusal.max_hold_s if refusal.max_hold_s is not None else self._queue.circuit_breaker.max_hold_s
        if held_s >= max_hold_s:
            return None
        delay_s = hold_delay_s(refusal, self._rng)
        self._refund(started, held=True, retry_at=now + delay_s)
        if isinstance(refusal, FlowControlStoreError):
            self._tally.runtime_fault("flow_control_store")
            self._obs.logger.warning("the flow control's store failed; the record waits", extra={"error": str(refusal)})
        self._tally.add(RUNTIME_JOB, HELD, reason=refusal.holder)
        # How long this key has been held against its bound: the hold alarm fires as the share nears 1.
        self._tally.sample(envelope.job, HOLD_SHARE, round(min(1.0, (held_s + delay_s) / max(1, max_hold_s)), 3))
        holder = "downstream" if isinstance(refusal, CircuitOpenError) else "held_by"
        details: dict[str, Any] = {holder: refusal.holder, "held_s": round(held_s, 3)}
        if refusal.key:
            details["limit_key"] = refusal.key[:256]
        return self.hand_back(
            delivery,
            envelope,
            delay_s,
            DeferReason(refusal.reason),
            refusal,
            details,
            key_record=self._record_of(started, refunded=True),
        )

    def hand_back(
        self,
        delivery: Delivery,
        envelope: Envelope | None,
        delay_s: int,
        reason: str,
        cause: BaseException,
        details: Mapping[str, Any] | None = None,
        key_record: KeyRecord | None = None,
    ) -> Back:
        """Return a record that was not run (or whose run was given back) to its queue, due in `delay_s`."""
        from sqs_jobs.worker.failure_path import Back

        self._tally.add(envelope.job if envelope else UNPARSEABLE_JOB, DEFERRED, reason=reason)
        return Back(
            delay_s=delay_s,
            reason=reason,
            cause=cause,
            envelope=envelope,
            attempts=(key_record.runs or 0) if key_record else 0,
            key_record=key_record,
            details=details or {},
        )

    def dead_letter_of(
        self, delivery: Delivery, envelope: Envelope | None, error: BaseException, failure: str, reason: str = ""
    ) -> DeadLetter:
        """A record that ran no job this delivery (a bad envelope, an unservable limit, a bad key, its last
        receive spent), dead-lettered with `error` as its evidence."""
        from sqs_jobs.worker.failure_path import DeadLetter, KeyRecord

        if failure is DeadLetterFailure.PERMANENT:  # the record itself failed (not merely its receives)
            self._tally.add(envelope.job if envelope else UNPARSEABLE_JOB, FAILED)
        record_id = None
        if envelope is not None and envelope.job in self._jobs:
            try:
                record_id = idempotency_record_id(self._jobs[envelope.job].idempotency_key(envelope))
            except Exception:
                record_id = None
        return DeadLetter(
            error_type=type(error).__name__,
            error_message=str(error),
            traceback=_traceback(error),
            failure=failure,
            classification="permanent" if failure is DeadLetterFailure.PERMANENT else "transient",
            reason=reason or type(error).__name__,
            attempts=1,
            envelope=envelope,
            key_record=KeyRecord(record_id, None) if record_id else None,
        )

    def _held_for_dead_letter(self, delivery: Delivery, envelope: Envelope, entry: LedgerEntry) -> Back | None:
        """Before a key is dead-lettered from its record, its record is held for this delivery (the ledger's
        `hold_for_dead_letter`): None, held. Two copies of one message (a job the runtime published twice) side by
        side would otherwise each send a dead letter. A copy that finds the record held or ENDING goes back, and
        its redelivery is answered from the record (acknowledged, as that message's redelivery is)."""
        from sqs_jobs.worker.run_ledger import is_condition_failure

        try:
            self._ledger.hold_for_dead_letter(
                entry,
                until_s=time.time() + self._invocation.remaining_s(),
                time_left_s=self._invocation.call_time_s(),
            )
        except Exception as error:
            if is_condition_failure(error):
                return self.hand_back(
                    delivery,
                    envelope,
                    self.backoff(delivery.receives),
                    DeferReason.IN_PROGRESS,
                    JobInProgressError("another delivery is dead-lettering the key"),
                    {"error": "another delivery is dead-lettering the key"},
                )
            self._tally.runtime_fault("idempotency_store")
            self._obs.logger.exception("could not hold the key's record for its dead letter; handed back")
            return self.hand_back(
                delivery,
                envelope,
                self.backoff(delivery.receives),
                DeferReason.RUNTIME_FAULT,
                RuntimeInfrastructureError(f"idempotency store: {error}"),
                {"error": str(error)[:1024]},
            )
        return None

    def _dead_letter_exhausted(self, delivery: Delivery, envelope: Envelope, entry: LedgerEntry) -> DeadLetter:
        """The key may run no more: its last allowed run never reported back, or its dead-lettering was pending
        (the DLQ refused it before). Dead-lettered from its record's evidence, without a run."""
        from sqs_jobs.worker.failure_path import DeadLetter, KeyRecord

        if entry.pending_dead_letter or not entry.never_reported:
            error_type = entry.last_error_type or RunNeverReportedError.__name__
            message = entry.last_error or "(no message)"
            trace = entry.last_traceback or "(the run's traceback is in the worker's log of that run)"
            failure = (
                DeadLetterFailure.PERMANENT
                if entry.pending_dead_letter == DeadLetterFailure.PERMANENT
                else DeadLetterFailure.RETRIES_EXHAUSTED
            )
        else:
            error_type = RunNeverReportedError.__name__
            message = (
                f"run {entry.runs} of {self._queue.max_attempts} started and never reported back: the worker "
                "crashed, ran out of memory or hit the function timeout (the worker's log of that run says which)"
            )
            trace = "(none: the run never ended)"
            failure = DeadLetterFailure.RETRIES_EXHAUSTED
        self._tally.add(envelope.job, FAILED)
        return DeadLetter(
            error_type=error_type,
            error_message=message,
            traceback=trace,
            failure=failure,
            classification="permanent" if failure is DeadLetterFailure.PERMANENT else "transient",
            reason="runs_exhausted",
            attempts=entry.runs,
            envelope=envelope,
            first_failed_at=entry.first_failed_at,
            key_record=KeyRecord(entry.record_id, entry.runs),
        )

    def _completed_unrecorded(self, envelope: Envelope, key: str, error: Exception) -> Verdict:
        """The job ran and returned, and the write that marks it completed failed: its side effect is done, so the
        record is acknowledged, never run again for this message. The completion is tried once more, without the
        result, in the time left."""
        started = self._ledger.started()
        if started is not None:
            from sqs_jobs.worker.run_ledger import is_condition_failure

            try:
                self._ledger.complete(started, time_left_s=self._invocation.call_time_s())
            except Exception as retry_error:
                if is_condition_failure(retry_error):  # the first write landed after all, or a newer run took over
                    return self._done_without_result(envelope)
                self._obs.logger.exception("second try of the completion write failed")
            else:
                self._obs.logger.warning(
                    "job done; its completion was written on a second try, without its result",
                    extra={"error": str(error)[:1024]},
                )
                return self._done_without_result(envelope)
        self._tally.runtime_fault("idempotency_store")
        self._obs.logger.error(
            COMPLETION_UNWRITTEN_MESSAGE,
            extra={"error": str(error)[:1024], "error_type": type(error.__cause__ or error).__name__},
        )
        return self._done_without_result(envelope)

    def _done_without_result(self, envelope: Envelope) -> Verdict:
        self._tally.add(envelope.job, SUCCEEDED)
        return Done(Outcome.SUCCEEDED)

    def _record_of(self, started: StartedRun, *, refunded: bool) -> KeyRecord:
        from sqs_jobs.worker.failure_path import KeyRecord

        return KeyRecord(started.before.record_id, started.number - 1 if refunded else started.number)

    # --- carrying verdicts out ------------------------------------------------------------------------------------

    def carry_out(self, delivery: Delivery, verdict: Verdict) -> Outcome:
        if isinstance(verdict, Done):
            return verdict.outcome
        from sqs_jobs.worker.failure_path import DeadLetter

        if isinstance(verdict, DeadLetter):
            return self.send_dead_letter(delivery, verdict)
        if delivery.receives >= self._queue.receive_limit:
            return self._last_receive(delivery, verdict)
        self.change_visibility(delivery.record.receipt_handle, verdict.delay_s, delivery.record.event_source_arn)
        if verdict.reason != "retry":
            self._obs.logger.info(
                "handed back unrun; visible again later",
                extra={**verdict.details, "reason": verdict.reason, "next_delay_s": verdict.delay_s},
            )
        raise RetryLater(verdict.cause)

    def _last_receive(self, delivery: Delivery, verdict: Back) -> Outcome:
        """The message may be received no more: one more receive and SQS's redrive policy moves it to the DLQ
        without evidence. A standard queue takes a fresh copy (its receive count starts again; its runs are the
        ledger's); a FIFO queue can't without breaking its group's order, so it is dead-lettered here."""
        from sqs_jobs.worker.failure_path import DeadLetter

        record = delivery.record
        if not self._queue.fifo:
            from sqs_jobs.worker.deadletter import CopyTooLargeError

            try:
                self._dead_letters().requeue(
                    # Back to its own lane (docs/priorities.md), as a fresh copy.
                    self._settings.source_url(record.event_source_arn),
                    record.body,
                    delivery.attributes,
                    delay_s=min(SQS_MAX_DELAY_S, verdict.delay_s),
                    # The copy's own SentTimestamp is now: it carries its original's, for unique and debounce.
                    sent_at_ms=delivery.first_sent_ms,
                    # And its original's identity, to its key's record.
                    original_message=delivery.message_identity,
                )
            except CopyTooLargeError:
                # Only a producer that named its attributes `jobs.*` gets a copy bigger than its message: it keeps
                # the message itself, and SQS's redrive moves it on its next receive.
                self._obs.logger.warning("a fresh copy would not fit its queue; the message itself goes back")
                self.change_visibility(record.receipt_handle, verdict.delay_s, record.event_source_arn)
                raise RetryLater(verdict.cause) from None
            except Exception:
                self._tally.runtime_fault("requeue")
                self._obs.logger.exception("could not send a fresh copy on the last receive; SQS may move it bare")
                self.change_visibility(record.receipt_handle, verdict.delay_s, record.event_source_arn)
                raise RetryLater(verdict.cause) from None
            self._obs.logger.info(
                "back as a fresh copy: the message's last allowed receive",
                extra={**verdict.details, "reason": verdict.reason, "next_delay_s": verdict.delay_s},
            )
            return Outcome.DEFERRED
        cause = verdict.cause
        if verdict.reason == "retry":
            error_type, message, trace = type(cause).__name__, str(cause), _traceback(cause)
        else:
            exhausted = ReceivesExhaustedError(
                f"received {delivery.receives} times, the queue's limit, and handed back again ({verdict.reason}): "
                f"{type(cause).__name__}: {cause}"
            )
            error_type, message, trace = type(exhausted).__name__, str(exhausted), _traceback(cause)
        return self.send_dead_letter(
            delivery,
            DeadLetter(
                error_type=error_type,
                error_message=message,
                traceback=trace,
                failure="receives_exhausted",
                classification="transient",
                reason=verdict.reason,
                attempts=max(1, verdict.attempts),
                envelope=verdict.envelope,
                first_failed_at=verdict.first_failed_at,
                key_record=verdict.key_record,
            ),
        )

    def send_dead_letter(self, delivery: Delivery, verdict: DeadLetter) -> Outcome:
        from sqs_jobs.worker.deadletter import Evidence, iso_from_epoch_ms
        from sqs_jobs.worker.failure_path import Failure

        record = delivery.record
        job_name = verdict.envelope.job if verdict.envelope else UNPARSEABLE_JOB
        first_ms = (
            verdict.first_failed_at * 1000
            if verdict.first_failed_at
            else int(record.attributes.approximate_first_receive_timestamp or 0)
        )
        evidence = Evidence(
            error_type=verdict.error_type,
            error_message=verdict.error_message,
            traceback=verdict.traceback,
            failure=verdict.failure,
            attempts=verdict.attempts,
            first_failed_at=iso_from_epoch_ms(first_ms) if first_ms else "",
            last_failed_at=iso_from_epoch_ms(time.time() * 1000),
            source_queue=record.event_source_arn or "",
            envelope=verdict.envelope,
            http_status=verdict.http_status,
            http_body=verdict.http_body,
        )
        try:
            dead_letter_id = self._dead_letters().send(record.body, evidence, record.raw_event, delivery.attributes)
        except Exception as send_error:
            # The DLQ refused it (permissions, KMS, an outage): the runtime's fault, not the job's. The original
            # stays on the queue and comes back after a backoff, its failure kept in its key's record.
            self._tally.runtime_fault("dead_letter_send")
            self._obs.logger.exception("could not dead-letter the record; it stays on its queue")
            run = verdict.run
            if run is not None:
                failure = Failure(verdict.error_type, verdict.error_message, verdict.failure, verdict.traceback)
                self._write(
                    "fail", lambda time_left_s: self._ledger.fail(run, failure, pending=True, time_left_s=time_left_s)
                )
            self.change_visibility(
                record.receipt_handle, self.backoff(max(1, verdict.attempts)), record.event_source_arn
            )
            raise RetryLater(send_error) from send_error
        self._obs.logger.error(
            "job dead-lettered",
            extra={
                "failure": verdict.failure,
                "classification": verdict.classification,
                "reason": verdict.reason,
                "error_type": evidence.error_type,
                "error": evidence.error_message[:1024],
                "attempts": verdict.attempts,
                "dead_letter_message_id": dead_letter_id,
            },
        )
        self._tally.add(job_name, DEAD_LETTERED, reason=verdict.failure)
        self._after_dead_letter(delivery, verdict)
        return Outcome.DEAD_LETTERED

    def _after_dead_letter(self, delivery: Delivery, verdict: DeadLetter) -> None:
        """What follows a dead letter, once the DLQ has it: the key's record (ENDING, which the key's next message
        clears, so a redrive starts afresh; or kept cancelled), and a batch member's end counted. The dead letter
        stands whatever happens here; a count that fails hands the message back, its record kept ENDING with the
        member's body so that its redelivery counts it and nothing more (docs/key-life.md), and raises RetryLater."""
        from sqs_jobs.worker.failure_path import DeadLettered

        key_record = verdict.key_record
        envelope = verdict.envelope
        cancelled_run = verdict.run if verdict.failure is DeadLetterFailure.CANCELLED else None
        # A member's body is kept, so that whoever finishes the record after an undo counts it if this doesn't.
        member_body = delivery.record.body if envelope is not None and envelope.batch is not None else None
        dead_lettered = DeadLettered(delivery.message_identity, member_body)
        kept_cancelled = cancelled_run is not None and self._write(
            "cancelled",
            # The key stays cancelled: no other copy of it runs, a redrive of this one neither, until it expires.
            lambda time_left_s: self._ledger.cancelled(
                cancelled_run, time_left_s=time_left_s, dead_lettered=dead_lettered
            ),
        )
        if envelope is not None and envelope.batch is not None and self._on_dead_lettered is not None:
            try:
                self._on_dead_lettered(envelope)
            except Exception as error:
                self._tally.runtime_fault("batch_count")
                # Its redelivery must count it, and never run it again nor send a second dead letter: its record
                # must say so (cancelled, or ENDING) before it goes back.
                remembered = kept_cancelled or (
                    key_record is not None
                    and self._write(
                        "ending",
                        lambda time_left_s: self._ledger.ending(
                            key_record.record_id,
                            key_record.runs,
                            message_id=delivery.message_identity,
                            body=delivery.record.body,
                            tenant=envelope.tenant or "",
                            time_left_s=time_left_s,
                            died_of=(verdict.error_type, verdict.error_message),
                        ),
                        tries=2,
                    )
                )
                if remembered:
                    self._obs.logger.exception("could not count the dead-lettered batch member; it comes back for it")
                    record, delay_s = delivery.record, self.backoff(delivery.receives)
                    self.change_visibility(record.receipt_handle, delay_s, record.event_source_arn)
                    raise RetryLater(error) from error
                self._obs.logger.exception(
                    "could not count the dead-lettered batch member, nor keep that in its key's record: its batch "
                    "stays open (the stalled-batches alarm); see the runbook"
                )
                return
        if not kept_cancelled and key_record is not None:
            # (A cancelled run's key whose request was withdrawn meanwhile ends as any dead letter's does.)
            # Kept ENDING, not deleted: if this invocation ends before the message's acknowledgement, its redelivery
            # is acknowledged and never starts a new life (a second dead letter); the key's next message clears it.
            # Tried twice, as a completion is: only both failing and then the invocation's end can lose it.
            self._write(
                "ending",
                lambda time_left_s: self._ledger.ending(
                    key_record.record_id,
                    key_record.runs,
                    message_id=delivery.message_identity,
                    body=None,
                    tenant=(envelope.tenant or "") if envelope is not None else "",
                    time_left_s=time_left_s,
                    unless_cancel_requested=True,
                    died_of=(verdict.error_type, verdict.error_message),
                ),
                tries=2,
            )

    # --- the runtime's own calls ------------------------------------------------------------------------------------

    def _write(self, what: str, write: Callable[[float], None], tries: int = 1) -> bool:
        """One of the runtime's writes to a key's record, made up to `tries` times while the store fails; a
        failure is the runtime's fault (alarmed), never the job's, and a write the record refused (another run has
        taken the key since) changes nothing. True: written."""
        from sqs_jobs.worker.run_ledger import is_condition_failure

        for _ in range(tries):
            try:
                write(self._invocation.call_time_s())
            except KeyCancelledError:
                raise
            except Exception as error:
                if is_condition_failure(error):
                    self._obs.logger.info(f"key record moved on; {what} not written")
                    return False
                self._tally.runtime_fault("idempotency_store")
                self._obs.logger.exception(f"could not write the key's record ({what})")
                continue
            return True
        return False

    def _refund(self, started: StartedRun, *, held: bool, retry_at: float) -> None:
        self._write(
            "refund",
            lambda time_left_s: self._ledger.refund(started, held=held, retry_at=retry_at, time_left_s=time_left_s),
        )

    def backoff(self, attempt: int, classification: Classification | None = None) -> int:
        from sqs_jobs.limits import SQS_MAX_VISIBILITY_S
        from sqs_jobs.worker.backoff import backoff_delay_s

        delay_s = backoff_delay_s(
            attempt,
            self._queue.backoff_base_s,
            self._queue.backoff_cap_s,
            self._rng,
            floor_s=classification.retry_after_s if classification else None,
        )
        # A visibility timeout counts from now and may not reach past 12 h from this receive.
        return min(delay_s, SQS_MAX_VISIBILITY_S - self._queue.function_timeout_s)

    def change_visibility(self, receipt_handle: str, timeout_s: int, source_arn: str | None = None) -> None:
        """`source_arn`: the record's queue (a priority lane's), whose receipt handle it is; None: the queue's."""
        try:
            self._sqs().change_message_visibility(
                QueueUrl=self._settings.source_url(source_arn),
                ReceiptHandle=receipt_handle,
                VisibilityTimeout=timeout_s,
            )
        except Exception:
            # The message keeps the queue's visibility timeout: retried later than planned, never lost.
            self._tally.runtime_fault("visibility_change")
            self._obs.logger.exception("could not change the message's visibility; the queue's timeout applies")
