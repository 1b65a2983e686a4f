"""The worker: one SQS batch in, a partial-batch response out. Knows nothing about any particular job.

Per record:
1. parse the envelope (a bad one is a permanent failure);
2. if the invocation has too little time left for the job's time limit, hand the record back at once
   (not counted as an attempt on a standard queue);
3. run the job under Powertools idempotency keyed on the business key, cut at the job's time limit;
4. settle: success or duplicate -> acknowledged; permanent failure, or any failure on the last allowed attempt
   -> dead-lettered with evidence, then acknowledged; transient failure -> visibility set to the backoff delay
   and reported as a batch item failure, so SQS redelivers it then.
No exception escapes a batch. See docs/failure-semantics.md.
"""

from __future__ import annotations

import random
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    process_partial_response,
)
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

from functions.worker.clients import ClientFactory
from functions.worker.errors import (
    EnvelopeError,
    IdempotencyKeyError,
    JobInProgressError,
    JobTimeLimitError,
    RuntimeInfrastructureError,
    TimeLimitInterrupt,
    TimeLimitUnservableError,
)
from functions.worker.jobs import JobContext, JobResult, LoadedJob, load_jobs
from functions.worker.observability import (
    DEAD_LETTERED,
    DEFERRED,
    DUPLICATE,
    DURATION,
    FAILED,
    HEARTBEAT,
    RETRIED,
    RUNTIME_FAULT,
    RUNTIME_JOB,
    SUCCEEDED,
    UNPARSEABLE_JOB,
    BatchTally,
    Observability,
)
from functions.worker.provenance import PRIOR_ATTEMPTS, MessageAttributes, Provenance, from_event
from functions.worker.settings import IDEMPOTENCY_KEY_PREFIX, WorkerSettings
from sqs_jobs.catalog import HEARTBEAT_JOB, SETTLE_MARGIN_S
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
# After a job's first interruption at its time limit, how often it is interrupted again if it catches it.
INTERRUPT_AGAIN_EVERY_S = 1.0
# SQS's longest DelaySeconds for a message.
SQS_MAX_DELAY_S = 900
# How long a record waits for a twin holding its key before it is handed back, and how often it looks.
IN_PROGRESS_PATIENCE_S = 2.0
IN_PROGRESS_POLL_S = 0.2

T = TypeVar("T")


# Errors the runtime raises about a record: classified by the runtime's rules alone, never the job's overrides.
_RUNTIME_ERRORS = (
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


def _run_job(job: LoadedJob, envelope: Envelope, context: JobContext) -> JobResult:
    """The one frame the job's code runs under: the time limit interrupts only code below it."""
    return job.run(envelope, context)


def _inside_job(frame: FrameType | None) -> bool:
    """True when `frame` is the job's own code (or something it called): strictly below `_run_job`'s frame.

    In `_run_job` itself the job has either not started or already returned; there the interruption waits for
    its next tick, so a run that finished is never reported as timed out."""
    current = frame
    while current is not None:
        if current.f_code is _run_job.__code__:
            return current is not frame
        current = current.f_back
    return False


@dataclass
class _Execution:
    """One run of a job; `ran` tells a fresh run from a result replayed by the idempotency layer."""

    job: LoadedJob
    context: JobContext
    # Set when the run is interrupted in place (main thread): only the job's own code is timed, never the
    # idempotency layer's bookkeeping around it.
    interrupt_after_s: float | None = None
    ran: bool = False
    started: float = 0.0
    finished: float | None = None
    # Times the job was interrupted at its limit (more than once only if it caught the interruption).
    interruptions: int = 0

    def __call__(self) -> JobResult:
        self.ran = True
        self.started = time.monotonic()
        try:
            with self._time_limit() if self.interrupt_after_s else nullcontext():
                result = _run_job(self.job, self.context.envelope, self.context)
        except TimeLimitInterrupt:
            # An Exception from here on: the idempotency layer releases the key only for those.
            raise JobTimeLimitError(
                f"run went past its time limit of {self.interrupt_after_s:g}s and was interrupted"
            ) from None
        finally:
            self.finished = time.monotonic()
        if self.interruptions:
            self.context.logger.warning(
                "job caught its time-limit interruption and finished late; its result stands",
                extra={"interruptions": self.interruptions, "elapsed_ms": self.elapsed_ms()},
            )
        return dict(result) if result is not None else None

    @contextmanager
    def _time_limit(self) -> Iterator[None]:
        """Interrupt the job's code after `interrupt_after_s` with TimeLimitInterrupt (main thread only), and again
        every INTERRUPT_AGAIN_EVERY_S while it keeps running.

        A signal reaches Python code blocked in a socket read too, so a hung call is really stopped: the run's
        exception goes up through the idempotency layer, which releases the key, and nothing keeps running
        behind the worker. `except Exception` in the job can't swallow it (it is a BaseException)."""
        limit_s = self.interrupt_after_s
        assert limit_s is not None

        def on_alarm(_signum: int, frame: FrameType | None) -> None:
            if not _inside_job(frame):
                return
            self.interruptions += 1
            raise TimeLimitInterrupt(f"time limit of {limit_s:g}s reached")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, limit_s, INTERRUPT_AGAIN_EVERY_S)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def elapsed_ms(self) -> float:
        """How long the job's own code ran (so far, for a run that was cut and is still going)."""
        return round(((self.finished or time.monotonic()) - self.started) * 1000, 3)


def _can_interrupt() -> bool:
    """Signals reach only the main thread: Lambda runs the handler there; the local engine's pollers don't."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


class TimeLimiter:
    """Off the main thread: runs a call in a helper thread and stops waiting for it at a time limit.

    Python cannot kill a thread: a cut run is abandoned (its thread and executor too) and the next run gets a
    fresh thread. Its idempotency record stays IN_PROGRESS until the run ends or the invocation's deadline
    passes, and while it is still running this worker refuses to start the same key again.
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._abandoned: dict[str, Future[Any]] = {}

    def still_running(self, key: str) -> bool:
        self._abandoned = {k: future for k, future in self._abandoned.items() if not future.done()}
        return key in self._abandoned

    def run(self, key: str, call: Callable[[], T], limit_s: float) -> T:
        if self.still_running(key):
            raise JobInProgressError(f"a cut run of key {key!r} is still running in this worker")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job")
        future = self._executor.submit(call)
        try:
            return future.result(timeout=limit_s)
        except FutureTimeoutError:
            if future.done():  # finished at the very limit: a finished run is never reported as timed out
                return future.result()
            self._executor.shutdown(wait=False)
            self._executor = None
            self._abandoned[key] = future
            raise JobTimeLimitError(f"run went past its time limit of {limit_s:g}s and was cut") from None


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
        self._sqs = clients("sqs")
        self._time_limiter = TimeLimiter()
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

                self._http = HttpClient()
            return self._http

    @staticmethod
    def _run_execution(*, idempotency: Mapping[str, str], execution: _Execution) -> JobResult:
        return execution()

    def _processor(self) -> BatchProcessor | SqsFifoPartialProcessor:
        if self._queue.fifo:
            # Stops a message group at its first failure, so retries never reorder a group.
            fifo = SqsFifoPartialProcessor(skip_group_on_error=True)
            # Its constructor doesn't take this flag; the base class reads the attribute.
            fifo.raise_on_entire_batch_failure = False
            return fifo
        return BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

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
        )
        log_keys = self._obs.logger.thread_safe_get_current_keys()

        def run_in_thread() -> JobResult:
            # The job's thread logs with the record's keys too.
            self._obs.logger.thread_safe_append_keys(**log_keys)
            try:
                return self._run_once(idempotency={_KEY_PATH: key}, execution=execution)  # type: ignore[no-any-return]
            finally:
                self._obs.logger.thread_safe_clear_keys()

        try:
            return self._run_patiently(execution, key, limit_s, run_in_thread)
        finally:
            if execution.ran:
                self._tally.sample(envelope.job, DURATION, execution.elapsed_ms())

    def _run_patiently(
        self, execution: _Execution, key: str, limit_s: float, run_in_thread: Callable[[], JobResult]
    ) -> Outcome:
        # A twin delivered at the same moment usually finishes in milliseconds: wait briefly for its result
        # before handing this one back.
        patience_ends = time.monotonic() + IN_PROGRESS_PATIENCE_S
        while True:
            try:
                if _can_interrupt():
                    execution.interrupt_after_s = limit_s
                    self._run_once(idempotency={_KEY_PATH: key}, execution=execution)
                else:
                    self._time_limiter.run(key, run_in_thread, limit_s)
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

    def _fail(
        self, delivery: _Delivery, envelope: Envelope | None, error: BaseException, classification: Classification
    ) -> Outcome:
        attempt = delivery.attempt
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
        raise RetryLater(error) from error

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
        self, delivery: _Delivery, envelope: Envelope, delay_s: int, reason: str, details: Mapping[str, Any]
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
