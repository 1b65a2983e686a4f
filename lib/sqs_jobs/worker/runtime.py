"""The worker: one SQS batch in, a partial-batch response out. Knows nothing about any particular job.

Up to `QueueSpec.records_in_parallel` records of a batch run at once (sqs_jobs.worker.batch; on a FIFO queue
one record at a time per message group). Each record first gets a verdict, then the verdict is carried out:

1. parse the envelope (a bad one is a permanent failure);
2. if the invocation has too little time left for the job's time limit, hand the record back at once;
3. a unique or debounced job's copy may be acknowledged unrun or wait for its window here
   (sqs_jobs.worker.uniqueness);
4. run the job (sqs_jobs.worker.execution) under Powertools idempotency keyed on the business key, its runs
   counted in the key's record (sqs_jobs.worker.run_ledger); the job's code runs in a job thread, cut at its
   time limit and fenced after (sqs_jobs.worker.time_limit); its downstream calls pass the circuit breakers
   (sqs_jobs.worker.downstream);
5. the verdict on what the run came to, carried out (sqs_jobs.worker.settlement): acknowledged, back to the
   queue after a backoff or until a breaker may probe, or dead-lettered with evidence.
No exception escapes a batch. See docs/failure-semantics.md.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from sqs_jobs.envelope import Envelope, parse_envelope
from sqs_jobs.limits import SETTLE_MARGIN_S
from sqs_jobs.specs import HEARTBEAT_JOB
from sqs_jobs.worker.batch import ParallelBatchProcessor, ParallelFifoProcessor
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.errors import EnvelopeError, IdempotencyKeyError, ReceivesExhaustedError, TimeLimitUnservableError
from sqs_jobs.worker.execution import JobExecutor
from sqs_jobs.worker.invocation import Delivery, Invocation, Outcome
from sqs_jobs.worker.jobs import LoadedJob, load_jobs
from sqs_jobs.worker.names import DURATION, HEARTBEAT, DeadLetterFailure, DeferReason
from sqs_jobs.worker.observability import BatchTally, Observability
from sqs_jobs.worker.provenance import MessageAttributes, Provenance, from_event
from sqs_jobs.worker.run_ledger import KeyEndingError, LedgerEntry, RunLedger
from sqs_jobs.worker.settings import WorkerSettings
from sqs_jobs.worker.settlement import Done, RetryLater, Settlement

# Modules only a failure, a dead letter or a job's HTTP call needs are imported there, on first use, not at
# cold start (docs/benchmarks.md, (a)).
if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from sqs_jobs.durable.executions import DurableExecutions
    from sqs_jobs.durable.sweep import DurableSweep
    from sqs_jobs.publisher import JobPublisher
    from sqs_jobs.worker.batch_members import BatchMembers
    from sqs_jobs.worker.deadletter import DeadLetterQueue
    from sqs_jobs.worker.durable_start import DurableDispatch, DurableStarter
    from sqs_jobs.worker.http import HttpClient
    from sqs_jobs.worker.settlement import Verdict
    from sqs_jobs.worker.tenant_keys import TenantKeys
    from sqs_jobs.worker.tracing import RunTracing
    from sqs_jobs.worker.uniqueness import Uniqueness

__all__ = ["Outcome", "RetryLater", "Worker", "build_worker"]

_RECORD_LOG_KEYS = ("job", "id", "message_id", "receive", "attempt", "idempotency_key", "unique_key")

_NO_ATTRIBUTES = MessageAttributes(bookkeeping={}, producer={})


class _ClientPerCall:
    """A client whose every call is made by the client `client_for()` gives at that moment: the runtime's own
    calls get timeouts that fit the time the invocation has left then."""

    def __init__(self, client_for: Callable[[], Any]) -> None:
        self._client_for = client_for

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client_for(), name)


class Worker:
    """Drains batches of one catalog queue. Build one per execution environment (one per concurrent slot)."""

    def __init__(
        self,
        settings: WorkerSettings,
        clients: ClientFactory,
        observability: Observability | None = None,
        rng: random.Random | None = None,
        http_client: HttpClient | None = None,
        clock: Callable[[], float] | None = None,
        durable_starter: DurableStarter | None = None,
        durable_executions: DurableExecutions | None = None,
    ) -> None:
        self.settings = settings
        self._queue = settings.queue
        self._clients = clients
        # What the worker's windows and the heartbeat's look at the batches are judged by.
        self._clock = clock or time.time
        self._obs = observability or Observability.create()
        self._jobs = load_jobs(self._queue)
        self._parallel = self._queue.records_in_parallel
        # Each record running at once may hold a connection of a client, and so may the runtime beside them.
        clients.reserve_connections(2 * self._parallel + 4)
        # The threads that settle the records of a batch at once; None runs them one after another here.
        self._record_pool = (
            ThreadPoolExecutor(max_workers=self._parallel, thread_name_prefix="record") if self._parallel > 1 else None
        )
        # Whose `jobs.*` attributes count: messages this worker's own role sent (sqs_jobs.worker.provenance).
        self._provenance = Provenance.of([settings.runtime_role_id])
        self._tally = BatchTally()
        self._invocation = Invocation()
        self._ledger = RunLedger(
            settings.idempotency_table,
            lambda time_left_s: clients.within("dynamodb", time_left_s),
            list_at_start=not settings.queue.list_running_after_s,
        )
        self._settlement = Settlement(
            settings,
            self._jobs,
            self._obs,
            self._tally,
            self._ledger,
            self._invocation,
            rng or random.Random(),
            sqs=self._sqs,
            # The worker's own, built on the first dead letter or copy.
            dead_letters=lambda: self._dead_letters,
            on_dead_lettered=self._member_dead_lettered,
        )
        # Each run a span in its publisher's trace (OpenTelemetry): loaded only for a queue that says `tracing`.
        self._tracing: RunTracing | None = None
        if self._queue.tracing:
            try:
                from sqs_jobs.worker.tracing import RunTracing
            except ImportError:  # a layer without the `tracing` extra: the jobs run, untraced, and the log says why
                self._obs.logger.warning(
                    "the queue says tracing=True, but OpenTelemetry is not in the worker's layer: runs are not traced; "
                    "add sqs-jobs[tracing] (opentelemetry-api) to the layer's requirements and run jobctl bundle"
                )
            else:
                self._tracing = RunTracing(self._queue.name)
        # Unique and debounced jobs' state, in the idempotency table; `clock` is what their windows are judged by.
        # Loaded only for a queue that has such jobs: the others' records never pass it.
        self._uniqueness: Uniqueness | None = None
        if any(job.exclusive for job in self._queue.jobs):
            from sqs_jobs.worker.uniqueness import FlowStore, Uniqueness

            self._uniqueness = Uniqueness(
                self._queue,
                FlowStore(
                    lambda: clients.within("dynamodb", self._invocation.call_time_s(SETTLE_MARGIN_S)),
                    settings.idempotency_table,
                ),
                self._settlement,
                self._tally,
                self._obs.logger,
                forget=lambda record_id: self._ledger.forget(
                    record_id, None, time_left_s=self._invocation.call_time_s()
                ),
                clock=clock,
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
        # Durable jobs' starts (sqs_jobs.worker.durable_start): Lambda's asynchronous Invoke unless given; and
        # what the heartbeat's sweep asks of their executions (sqs_jobs.durable.sweep): Lambda unless given.
        self._durable_starter = durable_starter
        self._durable_executions = durable_executions
        self.handle = self._obs.logger.inject_lambda_context(self._handle, clear_state=True)

    @cached_property
    def _dead_letters(self) -> DeadLetterQueue:
        """Built on the first dead letter or copy; a batch that all succeeds never needs it."""
        from sqs_jobs.worker.attribute_store import AttributeStore
        from sqs_jobs.worker.deadletter import DeadLetterQueue

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

    @cached_property
    def _batch_members(self) -> BatchMembers:
        """Built on the first batch member that ends; most records are none."""
        from sqs_jobs.worker.batch_members import BatchMembers

        return BatchMembers(
            self.settings.idempotency_table,
            lambda: self._clients.within("dynamodb", self._invocation.call_time_s()),
            lambda: self._publisher,
            retention_s=self._queue.dlq_retention_s,
            clock=self._clock,
        )

    @cached_property
    def _tenant_keys(self) -> TenantKeys:
        """Built on the first tenant's record; most queues have none."""
        from sqs_jobs.worker.settings import idempotency_record_id
        from sqs_jobs.worker.tenant_keys import TenantKeys

        return TenantKeys(
            lambda: self._clients.within("dynamodb", self._invocation.call_time_s(SETTLE_MARGIN_S)),
            self.settings.idempotency_table,
            self._queue.idempotency_expiry_s,
            idempotency_record_id,
        )

    @cached_property
    def _publisher(self) -> JobPublisher:
        """What publishes a batch's callbacks and a run's follow-ups: to the queues the worker is routed to."""
        from sqs_jobs.worker.batch_members import routed_publisher

        return routed_publisher(self.settings.routes, _ClientPerCall(self._sqs))

    def _member_ended(self, envelope: Envelope, outcome: Outcome) -> None:
        """Count a batch member that succeeded (or was answered as a duplicate); raises what the count raised."""
        from sqs_jobs.worker.names import BATCH_CALLBACK_PUBLISHED, BATCH_MEMBER_ENDED

        published = self._batch_members.succeeded(envelope)
        self._tally.add(envelope.job, BATCH_MEMBER_ENDED, reason="succeeded")
        for kind in published:
            self._tally.add(envelope.job, BATCH_CALLBACK_PUBLISHED, reason=kind)
        self._obs.logger.info(
            "batch member counted",
            extra={
                "batch": envelope.batch.field if envelope.batch else None,
                "outcome": outcome.value,
                "callbacks_published": published,
            },
        )

    def _member_dead_lettered(self, envelope: Envelope) -> None:
        """Count a batch member that ended without succeeding (the DLQ has it, or its key was cancelled); raises
        what the count raised, and the caller hands the record back for it (docs/key-life.md)."""
        if envelope.batch is None:
            return
        from sqs_jobs.worker.names import BATCH_CALLBACK_PUBLISHED, BATCH_MEMBER_ENDED

        published = self._batch_members.dead_lettered(envelope)
        self._tally.add(envelope.job, BATCH_MEMBER_ENDED, reason="dead")
        for kind in published:
            self._tally.add(envelope.job, BATCH_CALLBACK_PUBLISHED, reason=kind)

    @cached_property
    def _durable(self) -> DurableDispatch:
        """Built on a durable job's first record; a queue without durable jobs never needs it."""
        from sqs_jobs.durable.record import DurableRecords
        from sqs_jobs.worker.durable_start import DurableDispatch, LambdaDurableStarter

        def call_client(service: str) -> Any:
            return self._clients.within(service, self._invocation.call_time_s(SETTLE_MARGIN_S))

        starter = self._durable_starter or LambdaDurableStarter(
            lambda: call_client("lambda"), self.settings.durable_functions
        )
        records = DurableRecords(
            lambda: call_client("dynamodb"),
            self.settings.idempotency_table,
            self._queue.idempotency_expiry_s,
            queue=self._queue.name,
        )
        return DurableDispatch(starter, records, self._settlement, self._tally, self._obs.logger)

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
                self._settlement.change_visibility(raw["receiptHandle"], 0, raw.get("eventSourceARN"))
                continue
            error = ReceivesExhaustedError(
                f"received {delivery.receives} times, the queue's limit, while skipped behind a failed message of "
                "its FIFO group; it never ran in that delivery"
            )
            verdict = self._settlement.dead_letter_of(
                delivery, self._envelope_or_none(delivery), error, "receives_exhausted"
            )
            try:
                self._settlement.send_dead_letter(delivery, verdict)
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
            if self._tracing is None:
                verdict = self._verdict_safely(delivery)
                return self._settlement.carry_out(delivery, verdict)
            return self._traced(delivery)
        finally:
            logger.thread_safe_remove_keys(_RECORD_LOG_KEYS)

    def _traced(self, delivery: Delivery) -> Outcome:
        """The record's delivery as a span in its publisher's trace (a queue with `tracing`)."""
        assert self._tracing is not None
        with self._tracing.run(delivery) as traced:
            verdict = self._verdict_safely(delivery)
            try:
                outcome = self._settlement.carry_out(delivery, verdict)
            except RetryLater:
                traced.ended(None, verdict)
                raise
            traced.ended(outcome, verdict)
            return outcome

    # --- verdicts -------------------------------------------------------------------------------------------------

    def _verdict_safely(self, delivery: Delivery) -> Verdict:
        try:
            return self._verdict(delivery)
        except Exception as error:
            # A fault of the runtime itself: the record comes back, and the runtime-faults alarm pages.
            self._tally.runtime_fault("runtime")
            self._obs.logger.exception("the runtime failed on a record; it comes back after a backoff")
            return self._settlement.hand_back(
                delivery, None, self._settlement.backoff(delivery.receives), DeferReason.RUNTIME_FAULT, error
            )

    def _verdict(self, delivery: Delivery) -> Verdict:
        from sqs_jobs.worker.classify import classify

        record = delivery.record
        try:
            envelope = parse_envelope(record.body, self._queue.accepted_jobs)
        except EnvelopeError as error:
            return self._settlement.dead_letter_of(
                delivery, None, error, DeadLetterFailure.PERMANENT, classify(error).reason
            )
        self._obs.logger.thread_safe_append_keys(job=envelope.job, id=envelope.id, tenant=envelope.tenant)
        if envelope.job == HEARTBEAT_JOB:
            return Done(self._heartbeat(record))
        job = self._jobs[envelope.job]
        # A durable job's record only starts its execution (sqs_jobs.worker.durable_start): a call, not a run.
        limit_s = 0 if job.spec.durable is not None else self._queue.time_limit_s(envelope.job)
        if self._budget_s < limit_s + SETTLE_MARGIN_S:
            # No invocation of this function will ever have more: handing it back would go on for ever.
            unservable = TimeLimitUnservableError(
                f"the function's invocations last {self._budget_s:.1f}s; job {envelope.job!r} needs its "
                f"{limit_s:g}s time limit plus the {SETTLE_MARGIN_S}s settle margin: raise the function "
                "timeout or lower the job's time_limit_s"
            )
            return self._settlement.dead_letter_of(
                delivery, envelope, unservable, DeadLetterFailure.PERMANENT, classify(unservable).reason
            )
        if self._invocation.remaining_s() < limit_s + SETTLE_MARGIN_S:
            details = {"remaining_s": round(self._invocation.remaining_s(), 3), "time_limit_s": limit_s}
            return self._settlement.hand_back(
                delivery, envelope, 0, DeferReason.NO_TIME, TimeoutError("no time left"), details
            )
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
            return self._settlement.dead_letter_of(
                delivery, envelope, bad_key, DeadLetterFailure.PERMANENT, classify(bad_key).reason
            )
        if envelope.tenant is not None:
            try:
                # A tenant's job runs under its tenant's key, or under the key it had before the upgrade to them.
                key = self._tenant_keys.key_for(key, job.unscoped_key(envelope), envelope.tenant)
            except Exception as error:
                self._tally.runtime_fault("idempotency_store")
                self._obs.logger.exception("could not read the key's record; handed back")
                return self._settlement.hand_back(
                    delivery, envelope, self._settlement.backoff(delivery.receives), DeferReason.RUNTIME_FAULT, error
                )
        # A unique or debounced job's copy may be dropped or wait here; one that runs may get its own key.
        if self._uniqueness is not None:
            from sqs_jobs.worker.uniqueness import Admitted

            admission = self._uniqueness.admit(job, envelope, delivery, key)
            if not isinstance(admission, Admitted):
                return admission
            key = admission.key
        if job.spec.durable is not None:
            verdict = self._durable.dispatch(envelope, delivery, key)
            if envelope.batch is not None and isinstance(verdict, Done) and verdict.outcome is Outcome.DUPLICATE:
                # Its key's execution had already succeeded (and counted the members recorded before it ended):
                # this member is counted here, as an ordinary job's duplicate is.
                return self._count_member(envelope, delivery, verdict.outcome) or verdict
            if envelope.batch is not None and isinstance(verdict, Done) and verdict.outcome is Outcome.CANCELLED:
                return self._count_dead(envelope, delivery) or verdict  # as an ordinary cancelled member is
            return verdict
        return self._run(job, envelope, delivery, key, limit_s)

    def _run(
        self, job: LoadedJob, envelope: Envelope, delivery: Delivery, key: str, limit_s: float, *, again: bool = True
    ) -> Verdict:
        """Run the record's job (sqs_jobs.worker.execution), then turn what it came to into a verdict."""
        execution = self._executor.prepare(job, envelope, delivery, key, limit_s)
        try:
            outcome = self._executor.run(execution, key)
        except Exception as error:
            ending = _ending_of(error)
            if ending is not None:
                # Once: a record ENDING again by then is another writer's, and this message goes back for it.
                then_run = (lambda: self._run(job, envelope, delivery, key, limit_s, again=False)) if again else None
                return self._finish_ending(envelope, delivery, ending, then_run)
            verdict = self._settlement.after_error(job, envelope, delivery, key, execution, error)
            if isinstance(verdict, Done) and verdict.outcome is Outcome.CANCELLED and envelope.batch is not None:
                # An operator cancelled the member's key: it ended without succeeding, so it counts as dead and
                # its batch can complete (a batch would otherwise wait on it for ever).
                return self._count_dead(envelope, delivery) or verdict
            if isinstance(verdict, Done) and verdict.outcome is Outcome.SUCCEEDED:
                # Its run completed, its completion unwritten: acknowledged all the same, so followed through now.
                return self._followed_through(job, envelope, delivery, execution.follow_ups, verdict.outcome) or verdict
            return verdict
        finally:
            elapsed_ms = execution.elapsed_ms()
            if elapsed_ms is not None:
                self._tally.sample(envelope.job, DURATION, elapsed_ms)
        follow_ups = execution.follow_ups if outcome is Outcome.SUCCEEDED else self._ledger.replayed_follow_ups()
        return self._followed_through(job, envelope, delivery, follow_ups, outcome) or self._settlement.done(
            envelope, outcome
        )

    def _followed_through(
        self, job: LoadedJob, envelope: Envelope, delivery: Delivery, follow_ups: str | None, outcome: Outcome
    ) -> Verdict | None:
        """What follows a run that succeeded (or its duplicate), before its message is acknowledged: its follow-ups
        published and, for a batch member, its end counted. None: done; else the verdict of what failed."""
        if follow_ups is not None:
            unpublished = self._publish_follow_ups(job, envelope, delivery, follow_ups)
            if unpublished is not None:
                return unpublished
        if envelope.batch is not None:
            return self._count_member(envelope, delivery, outcome)
        return None

    def _publish_follow_ups(self, job: LoadedJob, envelope: Envelope, delivery: Delivery, kept: str) -> Verdict | None:
        """The follow-ups a succeeded run asked for (`context.then`), published before its message is acknowledged:
        if the publish fails the record comes back, is answered from its key's record, and publishes them then
        (each with its own key, so a second publish is a duplicate). None: published."""
        from sqs_jobs.worker.follow_ups import decoded, publish_follow_ups

        try:
            follow_ups = decoded(kept, job.spec.publishes)
            publish_follow_ups(self._publisher, follow_ups, envelope.job, self._tally, self._obs.logger)
        except Exception as error:
            self._tally.runtime_fault("follow_up_publish")
            self._obs.logger.exception("could not publish the run's follow-up jobs; the record comes back for them")
            return self._settlement.hand_back(
                delivery, envelope, self._settlement.backoff(delivery.receives), DeferReason.RUNTIME_FAULT, error
            )
        return None

    def _count_member(self, envelope: Envelope, delivery: Delivery, outcome: Outcome) -> Verdict | None:
        """A batch member's success counted before it is acknowledged: if the count fails the record comes back,
        and its duplicate counts it (a set holds an index once). None: counted."""
        from sqs_jobs.batches import BatchMemberError

        try:
            self._member_ended(envelope, outcome)
        except BatchMemberError as error:
            # The job ran (it is its own job, its key recorded); the message claims a batch that does not hold it.
            verdict = self._settlement.dead_letter_of(delivery, envelope, error, DeadLetterFailure.PERMANENT)
            return replace(verdict, key_record=None)
        except Exception as error:
            self._tally.runtime_fault("batch_count")
            self._obs.logger.exception("could not count the batch member; it comes back and is counted then")
            return self._settlement.hand_back(
                delivery, envelope, self._settlement.backoff(delivery.receives), DeferReason.RUNTIME_FAULT, error
            )
        return None

    def _count_dead(self, envelope: Envelope, delivery: Delivery) -> Verdict | None:
        """A batch member that ended without succeeding, counted before its message is acknowledged: if the count
        fails the record comes back (its key's record says how it ended) and is counted then. None: counted."""
        try:
            self._member_dead_lettered(envelope)
        except Exception as error:
            self._tally.runtime_fault("batch_count")
            self._obs.logger.exception("could not count the batch member that ended; it comes back for it")
            return self._settlement.hand_back(
                delivery, envelope, self._settlement.backoff(delivery.receives), DeferReason.RUNTIME_FAULT, error
            )
        return None

    def _finish_ending(
        self, envelope: Envelope, delivery: Delivery, entry: LedgerEntry, then_run: Callable[[], Verdict] | None
    ) -> Verdict:
        """The key's last message is in the DLQ (its record is ENDING): count it if its batch count is still owed,
        then clear the record. That message (redelivered: its invocation ended before its acknowledgement, or the
        count failed) is then acknowledged, never run again; another message of the key (a redrive, a new publish)
        runs now (`then_run`), or, where the record was ENDING again, goes back to run once it is cleared."""
        from sqs_jobs.worker.run_ledger import is_condition_failure

        ended = _envelope_in(entry.ending_body, self._queue.accepted_jobs)
        if ended is not None:
            counted = self._count_dead(ended, delivery)
            if counted is not None:
                return counted
        try:
            self._ledger.ended(entry, time_left_s=self._invocation.call_time_s())
        except Exception as error:
            if not is_condition_failure(error):
                self._tally.runtime_fault("idempotency_store")
                self._obs.logger.exception("could not clear the key's record after its dead letter")
                return self._settlement.hand_back(
                    delivery, envelope, self._settlement.backoff(delivery.receives), DeferReason.RUNTIME_FAULT, error
                )
        if delivery.message_identity == entry.ending_message:
            self._obs.logger.info("a redelivery of the key's dead-lettered message; acknowledged")
            return Done(Outcome.DEAD_LETTERED)
        if then_run is not None:
            self._obs.logger.info("an earlier life of the key ended; this message runs now")
            return then_run()
        return self._settlement.hand_back(
            delivery, envelope, 0, DeferReason.IN_PROGRESS, KeyEndingError(entry), {"error": "key was ending"}
        )

    # --- what the runtime says ----------------------------------------------------------------------------------

    def _heartbeat(self, record: SQSRecord) -> Outcome:
        """The canary got through the queue and reached a worker: that is all it has to say."""
        sent_ms = int(record.attributes.sent_timestamp or 0)
        lag_s = round(max(0.0, time.time() - sent_ms / 1000), 3) if sent_ms else None
        self._tally.add(HEARTBEAT_JOB, HEARTBEAT)
        self._obs.logger.info("heartbeat", extra={"lag_s": lag_s})
        self._watch_batches()
        if self.settings.durable_functions:  # a queue without durable jobs makes no call for them
            self._durable_sweep.sweep()
        return Outcome.HEARTBEAT

    @cached_property
    def _durable_sweep(self) -> DurableSweep:
        """Ends the durable executions that ended without their end (sqs_jobs.durable.sweep)."""
        from sqs_jobs.durable.executions import LambdaDurableExecutions
        from sqs_jobs.durable.sweep import DurableSweep

        def call_client(service: str) -> Any:
            return self._clients.within(service, self._invocation.call_time_s())

        executions = self._durable_executions or LambdaDurableExecutions(
            lambda: call_client("lambda"), self.settings.durable_functions
        )
        return DurableSweep(
            self.settings, executions, call_client, self._obs, self._tally, time_left=self._invocation.remaining_s
        )

    def _watch_batches(self) -> None:
        """Each heartbeat looks at the open batches (BatchMembers.watch_open): it counts the stalled ones, and
        publishes the callbacks a failed count left. A failure is the runtime's: it counts nothing."""
        from sqs_jobs.worker.names import (
            BATCH_CALLBACK_PUBLISHED,
            FINISHED_BY_HEARTBEAT,
            LIFE_INDEX,
            RUNTIME_JOB,
            STALLED_BATCHES,
        )

        try:
            seen = self._batch_members.watch_open(LIFE_INDEX, publishable=self.settings.routes)
        except Exception:
            self._tally.runtime_fault("batch_watch")
            self._obs.logger.exception("could not look at the open batches")
            return
        for batch_id, kind in seen.finished:
            self._tally.add(RUNTIME_JOB, BATCH_CALLBACK_PUBLISHED, reason=kind)
            self._obs.logger.warning(FINISHED_BY_HEARTBEAT, extra={"batch": batch_id, "callback": kind})
        for error in seen.failures:
            self._tally.runtime_fault("batch_watch")
            self._obs.logger.error("could not publish a batch callback its last count left", exc_info=error)
        self._tally.sample(RUNTIME_JOB, STALLED_BATCHES, seen.stalled)
        if seen.stalled:
            self._obs.logger.warning("batches stalled", extra={"stalled_batches": seen.stalled})


def _ending_of(error: BaseException) -> LedgerEntry | None:
    """The ENDING record behind a start the ledger refused, if that is why (sqs_jobs.worker.run_ledger)."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyPersistenceLayerError

    if isinstance(error, IdempotencyPersistenceLayerError) and isinstance(error.__cause__, KeyEndingError):
        return error.__cause__.entry
    return None


def _envelope_in(body: str | None, accepted_jobs: Any) -> Envelope | None:
    if body is None:
        return None
    try:
        return parse_envelope(body, accepted_jobs)
    except EnvelopeError:
        return None


def build_worker(settings: WorkerSettings, clients: ClientFactory | None = None) -> Worker:
    return Worker(settings=settings, clients=clients or ClientFactory())
