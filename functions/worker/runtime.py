"""The worker: one SQS batch in, a partial-batch response out. Knows nothing about any particular job.

Per record: parse the envelope (a bad one is dead-lettered at once), run the job under Powertools idempotency
keyed on the business key, and decide: success, duplicate (skipped, acknowledged), permanent failure
(dead-lettered with evidence, acknowledged), or transient failure (reported as a batch item failure, so SQS
redelivers it; dead-lettered with evidence on the last allowed attempt). No exception escapes a batch.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyKeyError as PowertoolsIdempotencyKeyError,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.worker.clients import ClientFactory
from functions.worker.deadletter import (
    FAILURE_EXHAUSTED,
    FAILURE_PERMANENT,
    DeadLetterQueue,
    Evidence,
    iso_from_epoch_ms,
)
from functions.worker.envelope import Envelope, parse_envelope
from functions.worker.errors import (
    IdempotencyKeyError,
    JobInProgressError,
    PermanentError,
)
from functions.worker.jobs import JobContext, JobResult, LoadedJob, load_jobs
from functions.worker.observability import (
    DEAD_LETTERED,
    DUPLICATE,
    FAILED,
    SUCCEEDED,
    UNPARSEABLE_JOB,
    BatchTally,
    Observability,
)
from functions.worker.settings import IDEMPOTENCY_KEY_PREFIX, WorkerSettings

# The idempotency payload is {"key": "<business key>"}; Powertools hashes the value under this path.
_KEY_PATH = "key"
_RECORD_LOG_KEYS = ("job", "id", "message_id", "attempt", "idempotency_key")


class Outcome(Enum):
    SUCCEEDED = "succeeded"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead_lettered"
    RETRY = "retry"


class RetryLater(Exception):
    """Raised to BatchProcessor so it reports the record as a batch item failure; SQS redelivers it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


@dataclass
class _Execution:
    """One run of a job; `ran` tells a fresh run from a result replayed by the idempotency layer."""

    job: LoadedJob
    context: JobContext
    ran: bool = False

    def __call__(self) -> JobResult:
        self.ran = True
        result = self.job.run(self.context.envelope, self.context)
        return dict(result) if result is not None else None


class Worker:
    """Drains batches of one catalog queue. Build one per execution environment (one per concurrent slot)."""

    def __init__(
        self,
        settings: WorkerSettings,
        clients: ClientFactory,
        observability: Observability | None = None,
    ) -> None:
        self.settings = settings
        self._queue = settings.queue
        self._clients = clients
        self._obs = observability or Observability.create()
        self._jobs = load_jobs(self._queue)
        self._dead_letters = DeadLetterQueue(clients("sqs"), settings.dlq_url)
        self._processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
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
        self._tally = BatchTally()
        self._lambda_context: LambdaContext | None = None
        self.handle = self._obs.logger.inject_lambda_context(self._handle, clear_state=True)

    @staticmethod
    def _run_execution(*, idempotency: Mapping[str, str], execution: _Execution) -> JobResult:
        return execution()

    def _handle(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        self._idempotency_config.register_lambda_context(context)
        self._lambda_context = context
        try:
            return process_partial_response(  # type: ignore[return-value]
                event=dict(event),
                record_handler=self._process_record,
                processor=self._processor,
                context=context,
            )
        finally:
            self._tally.flush(self._obs, self._queue.name)

    def _process_record(self, record: SQSRecord) -> Outcome:
        attempt = int(record.attributes.approximate_receive_count or "1")
        logger = self._obs.logger
        logger.thread_safe_append_keys(message_id=record.message_id, attempt=attempt)
        try:
            return self._settle(record, attempt)
        finally:
            logger.thread_safe_remove_keys(_RECORD_LOG_KEYS)

    def _settle(self, record: SQSRecord, attempt: int) -> Outcome:
        envelope: Envelope | None = None
        try:
            envelope = parse_envelope(record.body, self._queue.job_names)
            self._obs.logger.thread_safe_append_keys(job=envelope.job, id=envelope.id)
            outcome = self._run(envelope, record, attempt)
        except PermanentError as error:
            return self._dead_letter(record, envelope, error, attempt, FAILURE_PERMANENT)
        except Exception as error:
            if attempt >= self._queue.max_attempts:
                return self._dead_letter(record, envelope, error, attempt, FAILURE_EXHAUSTED)
            self._obs.logger.warning(
                "job failed; SQS will redeliver it",
                extra={"error_type": type(error).__name__, "error": str(error)[:1024]},
            )
            self._tally.add(envelope.job if envelope else UNPARSEABLE_JOB, FAILED)
            raise RetryLater(error) from error
        self._tally.add(envelope.job, SUCCEEDED if outcome is Outcome.SUCCEEDED else DUPLICATE)
        self._obs.logger.info("job done" if outcome is Outcome.SUCCEEDED else "duplicate skipped")
        return outcome

    def _run(self, envelope: Envelope, record: SQSRecord, attempt: int) -> Outcome:
        job = self._jobs[envelope.job]
        key = job.idempotency_key(envelope)
        self._obs.logger.thread_safe_append_keys(idempotency_key=key)
        assert self._lambda_context is not None
        execution = _Execution(
            job=job,
            context=JobContext(
                envelope=envelope,
                key=key,
                attempt=attempt,
                message_id=record.message_id,
                resources=self.settings.resources,
                clients=self._clients,
                logger=self._obs.logger,
                lambda_context=self._lambda_context,
            ),
        )
        try:
            self._run_once(idempotency={_KEY_PATH: key}, execution=execution)
        except IdempotencyAlreadyInProgressError as error:
            raise JobInProgressError(f"job key {key!r} is being run by another worker") from error
        except PowertoolsIdempotencyKeyError as error:
            raise IdempotencyKeyError(str(error)) from error
        return Outcome.SUCCEEDED if execution.ran else Outcome.DUPLICATE

    def _dead_letter(
        self,
        record: SQSRecord,
        envelope: Envelope | None,
        error: BaseException,
        attempt: int,
        failure: str,
    ) -> Outcome:
        first_receive = record.attributes.approximate_first_receive_timestamp
        evidence = Evidence(
            error_type=type(error).__name__,
            error_message=str(error),
            traceback="".join(traceback.format_exception(error)),
            failure=failure,
            attempts=attempt,
            first_failed_at=iso_from_epoch_ms(int(first_receive)) if first_receive else "",
            last_failed_at=iso_from_epoch_ms(time.time() * 1000),
            source_queue=record.event_source_arn or "",
            envelope=envelope,
        )
        try:
            dead_letter_id = self._dead_letters.send(record.body, evidence, record.raw_event)
        except Exception as send_error:
            # The original stays on the queue; SQS's redrive policy is the safety net.
            self._obs.logger.exception("could not dead-letter the record; leaving it to SQS redrive")
            self._tally.add(envelope.job if envelope else UNPARSEABLE_JOB, FAILED)
            raise RetryLater(send_error) from error
        self._obs.logger.error(
            "job dead-lettered",
            extra={
                "failure": failure,
                "error_type": evidence.error_type,
                "error": evidence.error_message[:1024],
                "dead_letter_message_id": dead_letter_id,
            },
        )
        self._tally.add(envelope.job if envelope else UNPARSEABLE_JOB, DEAD_LETTERED)
        return Outcome.DEAD_LETTERED


def build_worker(settings: WorkerSettings, clients: ClientFactory | None = None) -> Worker:
    return Worker(settings=settings, clients=clients or ClientFactory())
