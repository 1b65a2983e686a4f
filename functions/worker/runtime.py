"""The worker: one SQS batch in, a partial-batch response out. Knows nothing about any particular job.

Up to `QueueSpec.records_in_parallel` records of a batch run at once (functions/worker/batch.py; on a FIFO queue
one record at a time per message group). Each record first gets a verdict, then the verdict is carried out:

1. parse the envelope (a bad one is a permanent failure);
2. if the invocation has too little time left for the job's time limit, hand the record back at once;
3. run the job (functions/worker/execution.py) under Powertools idempotency keyed on the business key, its runs
   counted in the key's record (functions/worker/run_ledger.py); the job's code runs in a job thread, cut at its
   time limit and fenced after (functions/worker/time_limit.py); its downstream calls pass the circuit breakers
   (functions/worker/downstream.py);
4. the verdict: success or duplicate -> acknowledged; a call refused by an open breaker -> handed back until the
   breaker may let a probe through, its run given back (for up to max_hold_s); permanent failure, or a failure of
   the key's last allowed run -> dead-lettered with evidence, then acknowledged; transient failure -> back to the
   queue after a backoff;
5. back to the queue means the message itself, visible again after the delay and reported as a batch item
   failure (a receive is spent, a run is not: runs are the ledger's). On the message's last allowed receive
   (`QueueSpec.receive_limit`) it can't go back, or SQS's redrive would move it without evidence: on a standard
   queue a fresh copy goes back instead; on a FIFO queue, where a copy would break the group's order, it is
   dead-lettered with its evidence.
No exception escapes a batch. See docs/failure-semantics.md.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyKeyError as PowertoolsIdempotencyKeyError,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyPersistenceLayerError,
)

from functions.worker.batch import ParallelBatchProcessor, ParallelFifoProcessor
from functions.worker.clients import ClientFactory
from functions.worker.errors import (
    CircuitOpenError,
    EnvelopeError,
    IdempotencyKeyError,
    JobInProgressError,
    ReceivesExhaustedError,
    RunNeverReportedError,
    RuntimeInfrastructureError,
    TimeLimitUnservableError,
)
from functions.worker.execution import Execution, JobExecutor
from functions.worker.invocation import Delivery, Invocation, Outcome
from functions.worker.jobs import LoadedJob, load_jobs
from functions.worker.names import (
    DEAD_LETTERED,
    DEFERRED,
    DUPLICATE,
    DURATION,
    FAILED,
    HEARTBEAT,
    RETRIED,
    RETRY_ATTEMPT,
    SUCCEEDED,
    UNPARSEABLE_JOB,
    DeadLetterFailure,
    DeferReason,
)
from functions.worker.observability import BatchTally, Observability
from functions.worker.provenance import MessageAttributes, Provenance, from_event
from functions.worker.run_ledger import Failure, LedgerEntry, RunLedger, RunsExhaustedError, StartedRun
from functions.worker.settings import WorkerSettings, idempotency_record_id
from sqs_jobs.envelope import Envelope, parse_envelope
from sqs_jobs.limits import SETTLE_MARGIN_S, SQS_MAX_DELAY_S
from sqs_jobs.specs import HEARTBEAT_JOB

# Modules only a failure, a hand-back or a job's HTTP call needs are imported there, on first use, not at
# cold start (docs/benchmarks.md, (a)).
if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from functions.worker.classify import Classification
    from functions.worker.deadletter import DeadLetterQueue
    from functions.worker.http import HttpClient

_RECORD_LOG_KEYS = ("job", "id", "message_id", "receive", "attempt", "idempotency_key")

# Errors the runtime raises about a record: classified by the runtime's rules alone, never the job's overrides.
_RUNTIME_ERRORS = (
    CircuitOpenError,
    EnvelopeError,
    IdempotencyKeyError,
    JobInProgressError,
    ReceivesExhaustedError,
    RunNeverReportedError,
    RuntimeInfrastructureError,
    TimeLimitUnservableError,
)


class RetryLater(Exception):
    """Raised to the batch processor so it reports the record as a batch item failure; SQS redelivers it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


# --- verdicts: what happens to a record, decided before anything is done to it ----------------------------------


@dataclass(frozen=True)
class _Done:
    """Acknowledged as it is."""

    outcome: Outcome


@dataclass(frozen=True)
class _KeyRecord:
    """The key's run record to delete once the message is in the DLQ (a redrive then starts the count afresh):
    only as the runtime last wrote it (`runs`), or, with runs None, unless a run holds it."""

    record_id: str
    runs: int | None


@dataclass(frozen=True)
class _DeadLetter:
    """To the DLQ with this evidence, then acknowledged."""

    error_type: str
    error_message: str
    traceback: str
    failure: str
    classification: str
    reason: str
    attempts: int
    envelope: Envelope | None
    first_failed_at: float | None = None
    key_record: _KeyRecord | None = None
    # The run this dead letter ends, not yet written: if the DLQ refuses it, its failure is written as pending.
    run: StartedRun | None = None


@dataclass(frozen=True)
class _Back:
    """Back to the queue, due in `delay_s`: after a failed run (`reason` "retry") or handed back unrun."""

    delay_s: int
    reason: str
    cause: BaseException
    envelope: Envelope | None
    attempts: int
    first_failed_at: float | None = None
    key_record: _KeyRecord | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


_Verdict = _Done | _DeadLetter | _Back


_NO_ATTRIBUTES = MessageAttributes(bookkeeping={}, producer={})


class _ClientPerCall:
    """A client whose every call is made by the client `client_for()` gives at that moment: the runtime's own
    calls get timeouts that fit the time the invocation has left then."""

    def __init__(self, client_for: Callable[[], Any]) -> None:
        self._client_for = client_for

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client_for(), name)


def _circuit_refusal(error: BaseException) -> CircuitOpenError | None:
    """The breaker's refusal behind a failed run, if any: a job that wrapped it (raise ... from, or raising in its
    except block) still failed only because the call was refused. `raise ... from None` says otherwise (e.g. an
    API whose 403 is about the entity, not the credentials): the chain stops there."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, CircuitOpenError):
            return current
        seen.add(id(current))
        if current.__cause__ is not None:
            current = current.__cause__
        else:
            current = None if current.__suppress_context__ else current.__context__
    return None


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


class Worker:
    """Drains batches of one catalog queue. Build one per execution environment (one per concurrent slot)."""

    def __init__(
        self,
        settings: WorkerSettings,
        clients: ClientFactory,
        observability: Observability | None = None,
        rng: random.Random | None = None,
        http_client: HttpClient | None = None,
    ) -> None:
        self.settings = settings
        self._queue = settings.queue
        self._clients = clients
        self._obs = observability or Observability.create()
        self._rng = rng or random.Random()
        self._jobs = load_jobs(self._queue)
        self._parallel = self._queue.records_in_parallel
        # Each record running at once may hold a connection of a client, and so may the runtime beside them.
        clients.reserve_connections(2 * self._parallel + 4)
        # The threads that settle the records of a batch at once; None runs them one after another here.
        self._record_pool = (
            ThreadPoolExecutor(max_workers=self._parallel, thread_name_prefix="record") if self._parallel > 1 else None
        )
        # Whose `jobs.*` attributes count: messages this worker's own role sent (functions/worker/provenance.py).
        self._provenance = Provenance.of([settings.runtime_role_id])
        self._tally = BatchTally()
        self._invocation = Invocation()
        self._ledger = RunLedger(
            settings.idempotency_table, lambda time_left_s: clients.within("dynamodb", time_left_s)
        )
        self._executor = JobExecutor(
            settings, clients, self._obs, self._tally, self._ledger, self._invocation, http_client=http_client
        )
        # The job threads and breakers of this worker's runs, which its tests inspect.
        self._runner = self._executor.runner
        self._breakers = self._executor.breakers
        # The whole invocation's time: the most any invocation of this function was seen to have at its start.
        self._budget_s = 0.0
        self._entry_remaining_s: float | None = None
        self._settled: set[str] = set()
        self.handle = self._obs.logger.inject_lambda_context(self._handle, clear_state=True)

    @cached_property
    def _dead_letters(self) -> DeadLetterQueue:
        """Built on the first dead letter or copy; a batch that all succeeds never needs it."""
        from functions.worker.attribute_store import AttributeStore
        from functions.worker.deadletter import DeadLetterQueue

        return DeadLetterQueue(
            _ClientPerCall(self._sqs),
            self.settings.dlq_url,
            dlq_max_bytes=self._queue.dlq_max_message_bytes,
            queue_max_bytes=self._queue.max_message_bytes,
            # A producer's attributes that can't fit their dead letter wait in the idempotency table.
            attribute_store=AttributeStore(
                _ClientPerCall(lambda: self._clients.within("dynamodb", self._invocation.call_time_s())),
                self.settings.idempotency_table,
            ),
        )

    def _sqs(self) -> Any:
        """The SQS client for one of the runtime's own calls, bounded by the invocation's remaining time."""
        return self._clients.within("sqs", self._invocation.call_time_s())

    def _processor(self) -> ParallelBatchProcessor | ParallelFifoProcessor:
        if self._queue.fifo:
            # One record at a time per message group, a group stopped at its first failure: retries never
            # reorder a group.
            return ParallelFifoProcessor(self._record_pool)
        return ParallelBatchProcessor(self._record_pool)

    def invocation_started(self, remaining_s: float) -> None:
        """What the invocation had left when its handler was entered, before this worker was built: a cold
        start's build is then part of the invocation, not of the budget a record's time limit is judged by."""
        self._entry_remaining_s = remaining_s

    # --- the batch ------------------------------------------------------------------------------------------------

    def _handle(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        self._executor.begin(context)
        self._invocation.context = context
        at_entry, self._entry_remaining_s = self._entry_remaining_s, None
        self._budget_s = max(self._budget_s, at_entry if at_entry is not None else self._invocation.remaining_s())
        self._settled = set()
        try:
            response: dict[str, Any] = process_partial_response(  # type: ignore[assignment]
                event=dict(event), record_handler=self._process_record, processor=self._processor(), context=context
            )
            if self._queue.fifo:
                response = self._settle_skipped(event, response)
            return response
        finally:
            self._tally.flush(self._obs, self._queue.name)

    def _settle_skipped(self, event: Mapping[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
        """Records a FIFO group skipped after its failure were never run: make them visible again at once, so
        the group resumes when the failed record's backoff ends rather than after the full visibility timeout. One
        on its last allowed receive is dead-lettered with its evidence instead (SQS would move it bare)."""
        failures = list(response.get("batchItemFailures", []))
        failed = {item["itemIdentifier"] for item in failures}
        dead_lettered: set[str] = set()
        for raw in event.get("Records", []):
            message_id = raw["messageId"]
            if message_id not in failed or message_id in self._settled:
                continue
            delivery = self._delivery(SQSRecord(raw))
            if delivery.receives < self._queue.receive_limit:
                self._change_visibility(raw["receiptHandle"], 0)
                continue
            error = ReceivesExhaustedError(
                f"received {delivery.receives} times, the queue's limit, while skipped behind a failed message of "
                "its FIFO group; it never ran in that delivery"
            )
            verdict = self._dead_letter_of(delivery, self._envelope_or_none(delivery), error, "receives_exhausted")
            try:
                self._send_dead_letter(delivery, verdict)
            except RetryLater:
                continue
            dead_lettered.add(message_id)
        return {"batchItemFailures": [item for item in failures if item["itemIdentifier"] not in dead_lettered]}

    def _delivery(self, record: SQSRecord) -> Delivery:
        receives = int(record.attributes.approximate_receive_count or "1")
        raw: Mapping[str, Any] = record.raw_event.get("messageAttributes") or {}
        if not raw:  # most messages carry none
            return Delivery(record=record, attributes=_NO_ATTRIBUTES, receives=receives)
        attributes = MessageAttributes.split(
            from_event(raw), self._provenance.sent_by_runtime(record.attributes.sender_id)
        )
        return Delivery(record=record, attributes=attributes, receives=receives)

    def _envelope_or_none(self, delivery: Delivery) -> Envelope | None:
        try:
            return parse_envelope(delivery.record.body, self._queue.accepted_jobs)
        except EnvelopeError:
            return None

    def _process_record(self, record: SQSRecord) -> Outcome:
        self._settled.add(record.message_id)
        delivery = self._delivery(record)
        logger = self._obs.logger
        logger.thread_safe_append_keys(message_id=record.message_id, receive=delivery.receives)
        try:
            verdict = self._verdict_safely(delivery)
            return self._carry_out(delivery, verdict)
        finally:
            logger.thread_safe_remove_keys(_RECORD_LOG_KEYS)

    # --- verdicts -------------------------------------------------------------------------------------------------

    def _verdict_safely(self, delivery: Delivery) -> _Verdict:
        try:
            return self._verdict(delivery)
        except Exception as error:
            # A fault of the runtime itself: the record comes back, and the runtime-faults alarm pages.
            self._tally.runtime_fault("runtime")
            self._obs.logger.exception("the runtime failed on a record; it comes back after a backoff")
            return self._hand_back(delivery, None, self._backoff(delivery.receives), DeferReason.RUNTIME_FAULT, error)

    def _verdict(self, delivery: Delivery) -> _Verdict:
        from functions.worker.classify import classify

        record = delivery.record
        try:
            envelope = parse_envelope(record.body, self._queue.accepted_jobs)
        except EnvelopeError as error:
            return self._dead_letter_of(delivery, None, error, DeadLetterFailure.PERMANENT, classify(error).reason)
        self._obs.logger.thread_safe_append_keys(job=envelope.job, id=envelope.id)
        if envelope.job == HEARTBEAT_JOB:
            return _Done(self._heartbeat(record))
        job = self._jobs[envelope.job]
        limit_s = self._queue.time_limit_s(envelope.job)
        if self._budget_s < limit_s + SETTLE_MARGIN_S:
            # No invocation of this function will ever have more: handing it back would go on for ever.
            unservable = TimeLimitUnservableError(
                f"the function's invocations last {self._budget_s:.1f}s; job {envelope.job!r} needs its "
                f"{limit_s:g}s time limit plus the {SETTLE_MARGIN_S}s settle margin: raise the function "
                "timeout or lower the job's time_limit_s"
            )
            return self._dead_letter_of(
                delivery, envelope, unservable, DeadLetterFailure.PERMANENT, classify(unservable).reason
            )
        if self._invocation.remaining_s() < limit_s + SETTLE_MARGIN_S:
            details = {"remaining_s": round(self._invocation.remaining_s(), 3), "time_limit_s": limit_s}
            return self._hand_back(delivery, envelope, 0, DeferReason.NO_TIME, TimeoutError("no time left"), details)
        try:
            key = job.idempotency_key(envelope)
        except Exception as error:
            # A key function is the job's own pure code: one that raises will raise again.
            bad_key = error
            if not isinstance(error, IdempotencyKeyError):
                bad_key = IdempotencyKeyError(
                    f"job {job.spec.name!r} idempotency_key raised {type(error).__name__}: {error}"
                )
                bad_key.__cause__ = error
            return self._dead_letter_of(
                delivery, envelope, bad_key, DeadLetterFailure.PERMANENT, classify(bad_key).reason
            )
        return self._run(job, envelope, delivery, key, limit_s)

    def _run(self, job: LoadedJob, envelope: Envelope, delivery: Delivery, key: str, limit_s: float) -> _Verdict:
        """Run the record's job (functions/worker/execution.py), then turn what it came to into a verdict."""
        execution = self._executor.prepare(job, envelope, delivery, key, limit_s)
        try:
            outcome = self._executor.run(execution, key)
        except Exception as error:
            return self._after_error(job, envelope, delivery, key, execution, error)
        finally:
            elapsed_ms = execution.elapsed_ms()
            if elapsed_ms is not None:
                self._tally.sample(envelope.job, DURATION, elapsed_ms)
        self._tally.add(envelope.job, SUCCEEDED if outcome is Outcome.SUCCEEDED else DUPLICATE)
        self._obs.logger.info("job done" if outcome is Outcome.SUCCEEDED else "duplicate skipped")
        return _Done(outcome)

    def _after_error(
        self,
        job: LoadedJob,
        envelope: Envelope,
        delivery: Delivery,
        key: str,
        execution: Execution,
        error: Exception,
    ) -> _Verdict:
        """What a run attempt that raised leads to: the job's failure, or one of the runtime's own answers."""
        from functions.worker.classify import classify

        if isinstance(error, JobInProgressError):
            # Another run holds the key (a crashed one holds it until its invocation's deadline at the latest).
            return self._hand_back(
                delivery,
                envelope,
                self._backoff(delivery.receives),
                DeferReason.IN_PROGRESS,
                error,
                {"error": str(error)},
            )
        if isinstance(error, PowertoolsIdempotencyKeyError):
            bad_key = IdempotencyKeyError(str(error))
            return self._dead_letter_of(
                delivery, envelope, bad_key, DeadLetterFailure.PERMANENT, classify(bad_key).reason
            )
        if isinstance(error, IdempotencyPersistenceLayerError):
            cause = error.__cause__
            if isinstance(cause, RunsExhaustedError):
                return self._dead_letter_exhausted(delivery, envelope, cause.entry)
            if execution.completed:
                return self._completed_unrecorded(delivery, key, error)
            # The idempotency table failed the runtime (permissions, throttling, an outage), not the job.
            self._tally.runtime_fault("idempotency_store")
            self._obs.logger.exception("idempotency store failed before the run; handed back")
            fault = RuntimeInfrastructureError(f"idempotency store: {error}")
            return self._hand_back(
                delivery,
                envelope,
                self._backoff(delivery.receives),
                DeferReason.RUNTIME_FAULT,
                fault,
                {"error": str(fault)},
            )
        started = self._ledger.started()
        if started is None:  # nothing started a run: the runtime's own fault
            raise error
        if execution.out_of_time:  # the run's start left the job too little time: given back before it began
            self._refund(started, held=False)
            details = {"remaining_s": round(self._invocation.remaining_s(), 3), "time_limit_s": execution.limit_s}
            return self._hand_back(
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
    ) -> _Verdict:
        from functions.worker.classify import Kind, classify

        if isinstance(error, _RUNTIME_ERRORS):
            classification = classify(error)  # the job's overrides are for the job's own errors
        else:
            classification = classify(error, job.permanent_errors, job.transient_errors)
        refusal = _circuit_refusal(error)
        if refusal is not None:
            held = self._hold(delivery, envelope, started, refusal)
            if held is not None:
                return held
            # Held for max_hold_s already: from now on a refusal is a failed run like any other.
        attempt = started.number
        first_failed_at = started.before.first_failed_at or time.time()
        self._tally.add(envelope.job, FAILED)  # every failed run, whatever happens next
        if classification.kind is Kind.PERMANENT or attempt >= self._queue.max_attempts:
            failure = (
                DeadLetterFailure.PERMANENT
                if classification.kind is Kind.PERMANENT
                else DeadLetterFailure.RETRIES_EXHAUSTED
            )
            return _DeadLetter(
                error_type=type(error).__name__,
                error_message=str(error),
                traceback=_traceback(error),
                failure=failure,
                classification=classification.kind.value,
                reason=classification.reason,
                attempts=attempt,
                envelope=envelope,
                first_failed_at=first_failed_at,
                key_record=_KeyRecord(started.before.record_id, attempt),
                run=started,
            )
        self._write(
            "fail",
            lambda time_left_s: self._ledger.fail(
                started,
                Failure(type(error).__name__, str(error), classification.kind.value),
                time_left_s=time_left_s,
            ),
        )
        delay_s = self._backoff(attempt, classification)
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
        return _Back(
            delay_s=delay_s,
            reason="retry",
            cause=error,
            envelope=envelope,
            attempts=attempt,
            first_failed_at=first_failed_at,
            key_record=_KeyRecord(started.before.record_id, attempt),
        )

    def _hold(
        self, delivery: Delivery, envelope: Envelope, started: StartedRun, refusal: CircuitOpenError
    ) -> _Back | None:
        """A call the job needed was refused by an open breaker: give the run back and hand the record back until
        the breaker may let a probe through; None once the key has been held for max_hold_s."""
        from functions.worker.breaker import hold_delay_s

        now = time.time()
        held_since = min(now, started.held_since or now)
        held_s = now - held_since
        if held_s >= self._queue.circuit_breaker.max_hold_s:
            return None
        self._refund(started, held=True)
        details = {"downstream": refusal.downstream, "held_s": round(held_s, 3)}
        return self._hand_back(
            delivery,
            envelope,
            hold_delay_s(refusal, self._rng),
            DeferReason.CIRCUIT_OPEN,
            refusal,
            details,
            key_record=self._record_of(started, refunded=True),
        )

    def _hand_back(
        self,
        delivery: Delivery,
        envelope: Envelope | None,
        delay_s: int,
        reason: str,
        cause: BaseException,
        details: Mapping[str, Any] | None = None,
        key_record: _KeyRecord | None = None,
    ) -> _Back:
        """Return a record that was not run (or whose run was given back) to its queue, due in `delay_s`."""
        self._tally.add(envelope.job if envelope else UNPARSEABLE_JOB, DEFERRED, reason=reason)
        return _Back(
            delay_s=delay_s,
            reason=reason,
            cause=cause,
            envelope=envelope,
            attempts=(key_record.runs or 0) if key_record else 0,
            key_record=key_record,
            details=details or {},
        )

    def _dead_letter_of(
        self, delivery: Delivery, envelope: Envelope | None, error: BaseException, failure: str, reason: str = ""
    ) -> _DeadLetter:
        """A record that ran no job this delivery (a bad envelope, an unservable limit, a bad key, its last
        receive spent), dead-lettered with `error` as its evidence."""
        if failure is DeadLetterFailure.PERMANENT:  # the record itself failed (not merely its receives)
            self._tally.add(envelope.job if envelope else UNPARSEABLE_JOB, FAILED)
        record_id = None
        if envelope is not None and envelope.job in self._jobs:
            try:
                record_id = idempotency_record_id(self._jobs[envelope.job].idempotency_key(envelope))
            except Exception:
                record_id = None
        return _DeadLetter(
            error_type=type(error).__name__,
            error_message=str(error),
            traceback=_traceback(error),
            failure=failure,
            classification="permanent" if failure is DeadLetterFailure.PERMANENT else "transient",
            reason=reason or type(error).__name__,
            attempts=1,
            envelope=envelope,
            key_record=_KeyRecord(record_id, None) if record_id else None,
        )

    def _dead_letter_exhausted(self, delivery: Delivery, envelope: Envelope, entry: LedgerEntry) -> _DeadLetter:
        """The key may run no more: its last allowed run never reported back, or its dead-lettering was pending
        (the DLQ refused it before). Dead-lettered from its record's evidence, without a run."""
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
        return _DeadLetter(
            error_type=error_type,
            error_message=message,
            traceback=trace,
            failure=failure,
            classification="permanent" if failure is DeadLetterFailure.PERMANENT else "transient",
            reason="runs_exhausted",
            attempts=entry.runs,
            envelope=envelope,
            first_failed_at=entry.first_failed_at,
            key_record=_KeyRecord(entry.record_id, entry.runs),
        )

    def _completed_unrecorded(self, delivery: Delivery, key: str, error: Exception) -> _Verdict:
        """The job ran and returned, and the write that marks it completed failed: its side effect is done, so the
        record is acknowledged, never run again for this message. The completion is tried once more, without the
        result, in the time left."""
        started = self._ledger.started()
        if started is not None:
            from functions.worker.run_ledger import is_condition_failure

            try:
                self._ledger.complete(started, time_left_s=self._invocation.call_time_s())
            except Exception as retry_error:
                if is_condition_failure(retry_error):  # the first write landed after all, or a newer run took over
                    return self._done_without_result(delivery)
                self._obs.logger.exception("second try of the completion write failed")
            else:
                self._obs.logger.warning(
                    "job done; its completion was written on a second try, without its result",
                    extra={"error": str(error)[:1024]},
                )
                return self._done_without_result(delivery)
        self._tally.runtime_fault("idempotency_store")
        self._obs.logger.error(
            "job done, but its completion could not be written to the idempotency store: acknowledged; a duplicate "
            "message of this key may run it again once the key's in-progress record expires",
            extra={"error": str(error)[:1024], "error_type": type(error.__cause__ or error).__name__},
        )
        return self._done_without_result(delivery)

    def _done_without_result(self, delivery: Delivery) -> _Verdict:
        envelope = self._envelope_or_none(delivery)
        self._tally.add(envelope.job if envelope else UNPARSEABLE_JOB, SUCCEEDED)
        return _Done(Outcome.SUCCEEDED)

    def _record_of(self, started: StartedRun, *, refunded: bool) -> _KeyRecord:
        return _KeyRecord(started.before.record_id, started.number - 1 if refunded else started.number)

    # --- carrying verdicts out ------------------------------------------------------------------------------------

    def _carry_out(self, delivery: Delivery, verdict: _Verdict) -> Outcome:
        if isinstance(verdict, _Done):
            return verdict.outcome
        if isinstance(verdict, _DeadLetter):
            return self._send_dead_letter(delivery, verdict)
        if delivery.receives >= self._queue.receive_limit:
            return self._last_receive(delivery, verdict)
        self._change_visibility(delivery.record.receipt_handle, verdict.delay_s)
        if verdict.reason != "retry":
            self._obs.logger.info(
                "handed back unrun; visible again later",
                extra={**verdict.details, "reason": verdict.reason, "next_delay_s": verdict.delay_s},
            )
        raise RetryLater(verdict.cause)

    def _last_receive(self, delivery: Delivery, verdict: _Back) -> Outcome:
        """The message may be received no more: one more receive and SQS's redrive policy moves it to the DLQ
        without evidence. A standard queue takes a fresh copy (its receive count starts again; its runs are the
        ledger's); a FIFO queue can't without breaking its group's order, so it is dead-lettered here."""
        record = delivery.record
        if not self._queue.fifo:
            from functions.worker.deadletter import CopyTooLargeError

            try:
                self._dead_letters.requeue(
                    self.settings.queue_url,
                    record.body,
                    delivery.attributes,
                    delay_s=min(SQS_MAX_DELAY_S, verdict.delay_s),
                )
            except CopyTooLargeError:
                # Only a producer that named its attributes `jobs.*` gets a copy bigger than its message: it keeps
                # the message itself, and SQS's redrive moves it on its next receive.
                self._obs.logger.warning("a fresh copy would not fit its queue; the message itself goes back")
                self._change_visibility(record.receipt_handle, verdict.delay_s)
                raise RetryLater(verdict.cause) from None
            except Exception:
                self._tally.runtime_fault("requeue")
                self._obs.logger.exception("could not send a fresh copy on the last receive; SQS may move it bare")
                self._change_visibility(record.receipt_handle, verdict.delay_s)
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
        return self._send_dead_letter(
            delivery,
            _DeadLetter(
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

    def _send_dead_letter(self, delivery: Delivery, verdict: _DeadLetter) -> Outcome:
        from functions.worker.deadletter import Evidence, iso_from_epoch_ms

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
        )
        try:
            dead_letter_id = self._dead_letters.send(record.body, evidence, record.raw_event, delivery.attributes)
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
            self._change_visibility(record.receipt_handle, self._backoff(max(1, verdict.attempts)))
            raise RetryLater(send_error) from send_error
        key_record = verdict.key_record
        if key_record is not None:
            self._write(
                "forget",
                lambda time_left_s: self._ledger.forget(key_record.record_id, key_record.runs, time_left_s=time_left_s),
            )
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
        return Outcome.DEAD_LETTERED

    # --- the runtime's own calls ------------------------------------------------------------------------------------

    def _write(self, what: str, write: Callable[[float], None]) -> None:
        """One of the runtime's writes to a key's record; a failure is the runtime's fault (alarmed), never the
        job's, and a write the record refused (another run has taken the key since) changes nothing."""
        from functions.worker.run_ledger import is_condition_failure

        try:
            write(self._invocation.call_time_s())
        except Exception as error:
            if is_condition_failure(error):
                self._obs.logger.info(f"key record moved on; {what} not written")
                return
            self._tally.runtime_fault("idempotency_store")
            self._obs.logger.exception(f"could not write the key's record ({what})")

    def _refund(self, started: StartedRun, *, held: bool) -> None:
        self._write("refund", lambda time_left_s: self._ledger.refund(started, held=held, time_left_s=time_left_s))

    def _backoff(self, attempt: int, classification: Classification | None = None) -> int:
        from functions.worker.backoff import backoff_delay_s
        from sqs_jobs.limits import SQS_MAX_VISIBILITY_S

        delay_s = backoff_delay_s(
            attempt,
            self._queue.backoff_base_s,
            self._queue.backoff_cap_s,
            self._rng,
            floor_s=classification.retry_after_s if classification else None,
        )
        # A visibility timeout counts from now and may not reach past 12 h from this receive.
        return min(delay_s, SQS_MAX_VISIBILITY_S - self._queue.function_timeout_s)

    def _change_visibility(self, receipt_handle: str, timeout_s: int) -> None:
        try:
            self._sqs().change_message_visibility(
                QueueUrl=self.settings.queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=timeout_s
            )
        except Exception:
            # The message keeps the queue's visibility timeout: retried later than planned, never lost.
            self._tally.runtime_fault("visibility_change")
            self._obs.logger.exception("could not change the message's visibility; the queue's timeout applies")

    # --- what the runtime says ----------------------------------------------------------------------------------

    def _heartbeat(self, record: SQSRecord) -> Outcome:
        """The canary got through the queue and reached a worker: that is all it has to say."""
        sent_ms = int(record.attributes.sent_timestamp or 0)
        lag_s = round(max(0.0, time.time() - sent_ms / 1000), 3) if sent_ms else None
        self._tally.add(HEARTBEAT_JOB, HEARTBEAT)
        self._obs.logger.info("heartbeat", extra={"lag_s": lag_s})
        return Outcome.HEARTBEAT


def build_worker(settings: WorkerSettings, clients: ClientFactory | None = None) -> Worker:
    return Worker(settings=settings, clients=clients or ClientFactory())
