"""The worker: one SQS batch in, a partial-batch response out. Knows nothing about any particular job.

Up to `QueueSpec.records_in_parallel` records of a batch run at once (functions/worker/batch.py; on a FIFO queue
one record at a time per message group). Per record:
1. parse the envelope (a bad one is a permanent failure);
2. if the invocation has too little time left for the job's time limit, hand the record back at once
   (not counted as an attempt on a standard queue);
3. run the job under Powertools idempotency keyed on the business key; the job's code runs in a job thread, cut
   at its time limit and fenced after (functions/worker/time_limit.py); its downstream calls pass the circuit
   breakers (functions/worker/downstream.py);
4. settle: success or duplicate -> acknowledged; a call refused by an open breaker -> handed back until the
   breaker may let a probe through, not counted as an attempt (for up to max_hold_s); permanent failure, or any
   failure on the last allowed attempt -> dead-lettered with evidence, then acknowledged; transient failure ->
   visibility set to the backoff delay and reported as a batch item failure, so SQS redelivers it then.
No exception escapes a batch. See docs/failure-semantics.md.
"""

from __future__ import annotations

import math
import random
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyKeyError as PowertoolsIdempotencyKeyError,
)

from functions.worker.batch import ParallelBatchProcessor, ParallelFifoProcessor
from functions.worker.breaker import Breakers, Snapshot
from functions.worker.clients import ClientFactory
from functions.worker.errors import (
    CircuitOpenError,
    EnvelopeError,
    IdempotencyKeyError,
    JobInProgressError,
    RuntimeInfrastructureError,
    TimeLimitUnservableError,
)
from functions.worker.jobs import JobContext, JobResult, LoadedJob, load_jobs
from functions.worker.observability import (
    CIRCUIT_OPENED,
    CUT_RUN_CALL,
    DEAD_LETTERED,
    DEFERRED,
    DUPLICATE,
    DURATION,
    FAILED,
    HEARTBEAT,
    RETRIED,
    RETRY_ATTEMPT,
    RUNTIME_FAULT,
    RUNTIME_JOB,
    SUCCEEDED,
    UNPARSEABLE_JOB,
    BatchTally,
    Observability,
)
from functions.worker.provenance import HELD_SINCE, PRIOR_ATTEMPTS, MessageAttributes, Provenance, from_event
from functions.worker.settings import IDEMPOTENCY_KEY_PREFIX, WorkerSettings
from functions.worker.time_limit import JobRun, JobRunner
from sqs_jobs.catalog import HEARTBEAT_JOB, SETTLE_MARGIN_S, SQS_MAX_DELAY_S
from sqs_jobs.envelope import Envelope, parse_envelope

# Modules only a failure, a hand-back or a job's HTTP call needs are imported there, on first use, not at
# cold start (docs/benchmarks.md, (a)).
if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from functions.worker.classify import Classification
    from functions.worker.deadletter import DeadLetterQueue
    from functions.worker.http import HttpClient

# The idempotency payload is {"key": "<business key>"}; Powertools hashes the value under this path.
_KEY_PATH = "key"
_RECORD_LOG_KEYS = ("job", "id", "message_id", "attempt", "idempotency_key")
# How long a record waits for a twin holding its key before it is handed back, and how often it looks.
IN_PROGRESS_PATIENCE_S = 2.0
IN_PROGRESS_POLL_S = 0.2

# Errors the runtime raises about a record: classified by the runtime's rules alone, never the job's overrides.
_RUNTIME_ERRORS = (
    CircuitOpenError,
    EnvelopeError,
    IdempotencyKeyError,
    JobInProgressError,
    RuntimeInfrastructureError,
    TimeLimitUnservableError,
)


class Outcome(Enum):
    SUCCEEDED = "succeeded"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead_lettered"
    DEFERRED = "deferred"
    HEARTBEAT = "heartbeat"


class RetryLater(Exception):
    """Raised to the batch processor so it reports the record as a batch item failure; SQS redelivers it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


@dataclass
class _Execution:
    """One run of a job, as the idempotency layer calls it; `ran` tells a fresh run from a replayed result."""

    job: LoadedJob
    context: JobContext
    limit_s: float
    runner: JobRunner
    breakers: Breakers
    # The record's log keys, for the job's own thread.
    log_keys: Mapping[str, Any]
    on_call_after_cut: Callable[[JobRun, str, str], None]
    ran: bool = False
    run: JobRun | None = None

    def __call__(self) -> JobResult:
        self.ran = True
        logger = self.context.logger
        log_keys = self.log_keys
        self.run = JobRun(
            key=self.context.key,
            job=self.job.spec.name,
            limit_s=self.limit_s,
            target=self.job.run,
            args=(self.context.envelope, self.context),
            breakers=self.breakers,
            on_call_after_cut=self.on_call_after_cut,
            on_start=lambda: logger.thread_safe_append_keys(**log_keys),
            on_end=logger.thread_safe_clear_keys,
        )
        result = self.runner.run(self.run)
        return dict(result) if result is not None else None

    def elapsed_ms(self) -> float | None:
        """How long the job's code ran; None if it never started (a cut run of its key was still going)."""
        return self.run.elapsed_ms() if self.run is not None and self.run.started else None


@dataclass(frozen=True)
class _Delivery:
    """One record as the runtime reads it: its attributes split by sender, and which attempt this is."""

    record: SQSRecord
    attributes: MessageAttributes
    # Failed or cut runs so far plus this one: receives of this message plus those of its deferred ancestors.
    attempt: int


_NO_ATTRIBUTES = MessageAttributes(bookkeeping={}, producer={})


def _prior_attempts(attributes: MessageAttributes) -> int:
    try:
        return max(0, int(attributes.bookkeeping.get(PRIOR_ATTEMPTS, "0")))
    except ValueError:
        return 0


def _held_since(attributes: MessageAttributes) -> float | None:
    """When open breakers first held this record back (epoch seconds), from the runtime's own bookkeeping."""
    try:
        value = float(attributes.bookkeeping.get(HELD_SINCE, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _circuit_refusal(error: BaseException) -> CircuitOpenError | None:
    """The breaker's refusal behind a failed run, if any: a job that wrapped it (raise ... from, or raising in its
    except block) still failed only because the call was refused."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, CircuitOpenError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _since(moment: float | None) -> float | None:
    return round(time.monotonic() - moment, 3) if moment is not None else None


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
        self._http = http_client
        self._http_lock = threading.Lock()
        self._jobs = load_jobs(self._queue)
        self._parallel = self._queue.records_in_parallel
        # Each record running at once may hold a connection of a client, and so may the runtime beside them.
        clients.reserve_connections(2 * self._parallel + 4)
        self._sqs = clients("sqs")
        self._runner = JobRunner(on_cut_run_end=self._cut_run_ended)
        self._breakers = Breakers(self._queue.circuit_breaker, on_open=self._circuit_opened)
        # The threads that settle the records of a batch at once; None runs them one after another here.
        self._record_pool = (
            ThreadPoolExecutor(max_workers=self._parallel, thread_name_prefix="record") if self._parallel > 1 else None
        )
        self._idempotency_config = IdempotencyConfig(
            event_key_jmespath=_KEY_PATH,
            raise_on_no_idempotency_key=True,
            expires_after_seconds=self._queue.idempotency_expiry_s,
        )
        persistence = DynamoDBPersistenceLayer(table_name=settings.idempotency_table, boto3_client=clients("dynamodb"))
        self._run_once = idempotent_function(
            self._run_execution,
            data_keyword_argument="idempotency",
            persistence_store=persistence,
            config=self._idempotency_config,
            key_prefix=IDEMPOTENCY_KEY_PREFIX,
        )
        # Whose `jobs.*` attributes count: messages this worker's own role sent (functions/worker/provenance.py).
        self._provenance = Provenance.of([settings.runtime_role_id])
        self._tally = BatchTally()
        self._lambda_context: LambdaContext | None = None
        # The whole invocation's time, read at its start: what any invocation of this function can give a record.
        self._budget_s = 0.0
        self._settled: set[str] = set()
        self.handle = self._obs.logger.inject_lambda_context(self._handle, clear_state=True)

    @cached_property
    def _dead_letters(self) -> DeadLetterQueue:
        """Built on the first dead letter or hand-back; a batch that all succeeds never needs it."""
        from functions.worker.deadletter import DeadLetterQueue

        return DeadLetterQueue(self._sqs, self.settings.dlq_url)

    def _http_client(self) -> HttpClient:
        """The worker's one HTTP client (one pool), built on a job's first request: most jobs make none."""
        with self._http_lock:
            if self._http is None:
                from functions.worker.http import HttpClient

                self._http = HttpClient(connections_per_host=self._parallel)
            return self._http

    @staticmethod
    def _run_execution(*, idempotency: Mapping[str, str], execution: _Execution) -> JobResult:
        return execution()

    def _processor(self) -> ParallelBatchProcessor | ParallelFifoProcessor:
        if self._queue.fifo:
            # One record at a time per message group, a group stopped at its first failure: retries never
            # reorder a group.
            return ParallelFifoProcessor(self._record_pool)
        return ParallelBatchProcessor(self._record_pool)

    def _handle(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        self._idempotency_config.register_lambda_context(context)
        self._lambda_context = context
        self._budget_s = self._remaining_s()
        self._settled = set()
        try:
            response = process_partial_response(
                event=dict(event), record_handler=self._process_record, processor=self._processor(), context=context
            )
            if self._queue.fifo:
                self._release_skipped(event, response)
            return response  # type: ignore[return-value]
        finally:
            self._tally.flush(self._obs, self._queue.name)

    def _release_skipped(self, event: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        """Records a FIFO group skipped after its failure were never run: make them visible again at once, so
        the group resumes when the failed record's backoff ends rather than after the full visibility timeout."""
        failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        for record in event.get("Records", []):
            if record["messageId"] in failed and record["messageId"] not in self._settled:
                self._change_visibility(record["receiptHandle"], 0)

    def _delivery(self, record: SQSRecord) -> _Delivery:
        receives = int(record.attributes.approximate_receive_count or "1")
        raw: Mapping[str, Any] = record.raw_event.get("messageAttributes") or {}
        if not raw:  # most messages carry none
            return _Delivery(record=record, attributes=_NO_ATTRIBUTES, attempt=receives)
        attributes = MessageAttributes.split(
            from_event(raw), self._provenance.sent_by_runtime(record.attributes.sender_id)
        )
        return _Delivery(record=record, attributes=attributes, attempt=receives + _prior_attempts(attributes))

    def _process_record(self, record: SQSRecord) -> Outcome:
        self._settled.add(record.message_id)
        delivery = self._delivery(record)
        logger = self._obs.logger
        logger.thread_safe_append_keys(message_id=record.message_id, attempt=delivery.attempt)
        try:
            return self._settle(delivery)
        finally:
            logger.thread_safe_remove_keys(_RECORD_LOG_KEYS)

    def _settle(self, delivery: _Delivery) -> Outcome:
        record = delivery.record
        envelope: Envelope | None = None
        job: LoadedJob | None = None
        try:
            envelope = parse_envelope(record.body, self._queue.accepted_jobs)
            self._obs.logger.thread_safe_append_keys(job=envelope.job, id=envelope.id)
            if envelope.job == HEARTBEAT_JOB:
                return self._heartbeat(record)
            job = self._jobs[envelope.job]
            limit_s = self._queue.time_limit_s(envelope.job)
            if self._budget_s < limit_s + SETTLE_MARGIN_S:
                # No invocation of this function will ever have more: handing it back would go on for ever.
                raise TimeLimitUnservableError(
                    f"the function's invocations last {self._budget_s:.1f}s; job {envelope.job!r} needs its "
                    f"{limit_s:g}s time limit plus the {SETTLE_MARGIN_S}s settle margin: raise the function "
                    "timeout or lower the job's time_limit_s"
                )
            if self._remaining_s() < limit_s + SETTLE_MARGIN_S:
                return self._defer(delivery, envelope, limit_s)
            outcome = self._run(job, envelope, delivery, limit_s)
        except Exception as error:
            from functions.worker.classify import classify

            if isinstance(error, _RUNTIME_ERRORS) or job is None:
                classification = classify(error)  # the job's overrides are for the job's own errors
            else:
                classification = classify(error, job.permanent_errors, job.transient_errors)
            return self._fail(delivery, envelope, error, classification)
        self._tally.add(envelope.job, SUCCEEDED if outcome is Outcome.SUCCEEDED else DUPLICATE)
        self._obs.logger.info("job done" if outcome is Outcome.SUCCEEDED else "duplicate skipped")
        return outcome

    def _heartbeat(self, record: SQSRecord) -> Outcome:
        """The canary got through the queue and reached a worker: that is all it has to say."""
        sent_ms = int(record.attributes.sent_timestamp or 0)
        lag_s = round(max(0.0, time.time() - sent_ms / 1000), 3) if sent_ms else None
        self._tally.add(HEARTBEAT_JOB, HEARTBEAT)
        self._obs.logger.info("heartbeat", extra={"lag_s": lag_s})
        return Outcome.HEARTBEAT

    def _remaining_s(self) -> float:
        assert self._lambda_context is not None
        return self._lambda_context.get_remaining_time_in_millis() / 1000

    def _run(self, job: LoadedJob, envelope: Envelope, delivery: _Delivery, limit_s: float) -> Outcome:
        key = job.idempotency_key(envelope)
        self._obs.logger.thread_safe_append_keys(idempotency_key=key)
        assert self._lambda_context is not None
        execution = _Execution(
            job=job,
            context=JobContext(
                envelope=envelope,
                key=key,
                attempt=delivery.attempt,
                message_id=delivery.record.message_id,
                resources=self.settings.resources,
                clients=self._clients,
                logger=self._obs.logger,
                lambda_context=self._lambda_context,
                http_client_provider=self._http_client,
            ),
            limit_s=limit_s,
            runner=self._runner,
            breakers=self._breakers,
            # The job's thread logs with the record's keys too.
            log_keys=self._obs.logger.thread_safe_get_current_keys(),
            on_call_after_cut=self._call_after_cut,
        )
        try:
            return self._run_patiently(execution, key, limit_s)
        finally:
            elapsed_ms = execution.elapsed_ms()
            if elapsed_ms is not None:
                self._tally.sample(envelope.job, DURATION, elapsed_ms)

    def _run_patiently(self, execution: _Execution, key: str, limit_s: float) -> Outcome:
        # A twin delivered at the same moment usually finishes in milliseconds: wait briefly for its result
        # before handing this one back.
        patience_ends = time.monotonic() + IN_PROGRESS_PATIENCE_S
        while True:
            try:
                # The idempotency layer runs here, in the record's thread; only the job's code runs in the job
                # thread, so a run that is cut can never write the store (functions/worker/time_limit.py).
                self._run_once(idempotency={_KEY_PATH: key}, execution=execution)
                return Outcome.SUCCEEDED if execution.ran else Outcome.DUPLICATE
            except IdempotencyAlreadyInProgressError as error:
                time_left = self._remaining_s() > limit_s + SETTLE_MARGIN_S + IN_PROGRESS_POLL_S
                if time.monotonic() >= patience_ends or not time_left:
                    raise JobInProgressError(f"job key {key!r} is being run by another worker") from error
                time.sleep(IN_PROGRESS_POLL_S)
            except PowertoolsIdempotencyKeyError as error:
                raise IdempotencyKeyError(str(error)) from error
            except IdempotencyPersistenceLayerError as error:
                # The idempotency table failed the runtime (permissions, throttling, an outage), not the job.
                raise RuntimeInfrastructureError(f"idempotency store: {error}") from error

    def _call_after_cut(self, run: JobRun, what: str, outcome: str) -> None:
        """A run cut at its limit called a downstream (refused) or got a late answer: its effect may have happened
        after the record was settled, so it is said, with the cut run's own record keys (its thread's)."""
        self._tally.add(run.job or RUNTIME_JOB, CUT_RUN_CALL, reason="refused" if outcome == "refused" else "ended")
        self._obs.logger.warning(
            "call of a run cut at its time limit: refused"
            if outcome == "refused"
            else "call of a run cut at its time limit ended after the cut; the retry relies on the job's key",
            extra={"call": what, "outcome": outcome, "since_cut_s": _since(run.cut_at)},
        )

    def _cut_run_ended(self, run: JobRun) -> None:
        """The thread of a run cut at its limit is done at last (it is never reused)."""
        self._obs.logger.info(
            "run cut at its time limit has ended",
            extra={
                "outcome": type(run.error).__name__ if run.error is not None else "returned",
                "since_cut_s": _since(run.cut_at),
                "interruptions": run.interruptions,
            },
        )

    def _circuit_opened(self, snapshot: Snapshot) -> None:
        self._tally.add(RUNTIME_JOB, CIRCUIT_OPENED, reason=snapshot.downstream)
        self._obs.logger.warning(
            "circuit opened",
            extra={
                "downstream": snapshot.downstream,
                "consecutive_failures": snapshot.consecutive_failures,
                "open_for_s": snapshot.open_for_s,
                "last_error": snapshot.last_error,
            },
        )

    def _fail(
        self, delivery: _Delivery, envelope: Envelope | None, error: BaseException, classification: Classification
    ) -> Outcome:
        attempt = delivery.attempt
        refusal = _circuit_refusal(error)
        if refusal is not None and envelope is not None:
            held = self._hold(delivery, envelope, refusal)
            if held is not None:
                return held
            # Held for max_hold_s already: from now on a refusal is a failed attempt like any other.
        if isinstance(error, JobInProgressError | RuntimeInfrastructureError) and envelope is not None:
            # Not a failed run of the job: another run holds the key (a crashed one holds it until its
            # invocation's deadline at the latest), or the runtime's own resources failed it. Come back after a
            # backoff, without using up an attempt.
            reason = "in_progress" if isinstance(error, JobInProgressError) else "runtime_fault"
            if reason == "runtime_fault":
                self._runtime_fault("idempotency_store")
            delay_s = min(SQS_MAX_DELAY_S, self._backoff(attempt, classification))
            return self._hand_back(delivery, envelope, delay_s, reason, {"error": str(error)[:1024]})
        from functions.worker.classify import Kind
        from functions.worker.deadletter import FAILURE_EXHAUSTED, FAILURE_PERMANENT

        job_name = envelope.job if envelope else UNPARSEABLE_JOB
        self._tally.add(job_name, FAILED)  # every failed run, whatever happens next
        if classification.kind is Kind.PERMANENT:
            return self._dead_letter(delivery, envelope, error, FAILURE_PERMANENT, classification)
        if attempt >= self._queue.max_attempts:
            return self._dead_letter(delivery, envelope, error, FAILURE_EXHAUSTED, classification)
        delay_s = self._backoff(attempt, classification)
        self._change_visibility(delivery.record.receipt_handle, delay_s)
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
        self._tally.add(job_name, RETRIED)
        self._tally.sample(job_name, RETRY_ATTEMPT, attempt)
        raise RetryLater(error) from error

    def _hold(self, delivery: _Delivery, envelope: Envelope, refusal: CircuitOpenError) -> Outcome | None:
        """A call the job needed was refused by an open breaker: hand the record back until the breaker may let a
        probe through, without spending an attempt; None once it has been held for max_hold_s."""
        from functions.worker.breaker import hold_delay_s

        now = time.time()
        held_since = min(now, _held_since(delivery.attributes) or now)
        held_s = now - held_since
        if held_s >= self._queue.circuit_breaker.max_hold_s:
            return None
        if self._queue.fifo and delivery.attempt >= self._queue.max_attempts:
            # A FIFO hand-back is this receive, counted by SQS: one more would let SQS's redrive move it to the
            # DLQ without evidence. Its last receive is a failed attempt, dead-lettered with the refusal.
            return None
        details = {"downstream": refusal.downstream, "held_s": round(held_s, 3)}
        delay_s = hold_delay_s(refusal, self._rng)
        return self._hand_back(delivery, envelope, delay_s, "circuit_open", details, held_since=held_since)

    def _runtime_fault(self, reason: str) -> None:
        """Count a failure of the runtime's own AWS resources: the runtime-faults alarm pages on it."""
        self._tally.add(RUNTIME_JOB, RUNTIME_FAULT, reason=reason)

    def _backoff(self, attempt: int, classification: Classification | None = None) -> int:
        from functions.worker.backoff import SQS_MAX_VISIBILITY_S, backoff_delay_s

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
            self._sqs.change_message_visibility(
                QueueUrl=self.settings.queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=timeout_s
            )
        except Exception:
            # The message keeps the queue's visibility timeout: retried later than planned, never lost.
            self._runtime_fault("visibility_change")
            self._obs.logger.exception("could not change the message's visibility; the queue's timeout applies")

    def _defer(self, delivery: _Delivery, envelope: Envelope, limit_s: float) -> Outcome:
        """Too little time left to run this record within its limit: hand it back now, unrun."""
        details = {"remaining_s": round(self._remaining_s(), 3), "time_limit_s": limit_s}
        return self._hand_back(delivery, envelope, 0, "no_time", details)

    def _hand_back(
        self,
        delivery: _Delivery,
        envelope: Envelope,
        delay_s: int,
        reason: str,
        details: Mapping[str, Any],
        held_since: float | None = None,
    ) -> Outcome:
        """Return a record that was not run to its queue, due in `delay_s`, without using up an attempt.

        Standard queue: an unrun copy carrying the attempts so far, and the original acknowledged. FIFO (or if
        the copy can't be sent): the message itself, made visible in `delay_s`; its order is kept, the receive
        counts.
        """
        record = delivery.record
        self._tally.add(envelope.job, DEFERRED, reason=reason)
        extra = {**details, "reason": reason, "next_delay_s": delay_s}
        if not self._queue.fifo:
            try:
                self._dead_letters.requeue(
                    self.settings.queue_url,
                    record.body,
                    delivery.attributes,
                    prior=delivery.attempt - 1,
                    delay_s=delay_s,
                    # Whatever the reason now, the time it has been held by open breakers goes on counting.
                    held_since=held_since or _held_since(delivery.attributes),
                )
            except Exception:
                self._runtime_fault("requeue")
                self._obs.logger.exception("could not requeue a record handed back; changing its visibility instead")
            else:
                self._obs.logger.info("handed back unrun; requeued", extra=extra)
                return Outcome.DEFERRED
        self._change_visibility(record.receipt_handle, delay_s)
        self._obs.logger.info("handed back unrun; visible again later", extra=extra)
        raise RetryLater(TimeoutError(f"handed back unrun: {reason}"))

    def _dead_letter(
        self,
        delivery: _Delivery,
        envelope: Envelope | None,
        error: BaseException,
        failure: str,
        classification: Classification,
    ) -> Outcome:
        from functions.worker.deadletter import Evidence, iso_from_epoch_ms

        record = delivery.record
        job_name = envelope.job if envelope else UNPARSEABLE_JOB
        first_receive = record.attributes.approximate_first_receive_timestamp
        evidence = Evidence(
            error_type=type(error).__name__,
            error_message=str(error),
            traceback="".join(traceback.format_exception(error)),
            failure=failure,
            attempts=delivery.attempt,
            first_failed_at=iso_from_epoch_ms(int(first_receive)) if first_receive else "",
            last_failed_at=iso_from_epoch_ms(time.time() * 1000),
            source_queue=record.event_source_arn or "",
            envelope=envelope,
        )
        try:
            dead_letter_id = self._dead_letters.send(record.body, evidence, record.raw_event, delivery.attributes)
        except Exception as send_error:
            # The DLQ refused it (permissions, KMS, an outage): the runtime's fault, not the job's. The original
            # stays on the queue and comes back after a backoff; SQS's redrive policy is the last safety net.
            self._runtime_fault("dead_letter_send")
            self._obs.logger.exception("could not dead-letter the record; it stays on its queue")
            self._change_visibility(record.receipt_handle, self._backoff(delivery.attempt))
            raise RetryLater(send_error) from error
        self._obs.logger.error(
            "job dead-lettered",
            extra={
                "failure": failure,
                "classification": classification.kind.value,
                "reason": classification.reason,
                "error_type": evidence.error_type,
                "error": evidence.error_message[:1024],
                "dead_letter_message_id": dead_letter_id,
            },
        )
        self._tally.add(job_name, DEAD_LETTERED, reason=failure)
        return Outcome.DEAD_LETTERED


def build_worker(settings: WorkerSettings, clients: ClientFactory | None = None) -> Worker:
    return Worker(settings=settings, clients=clients or ClientFactory())
