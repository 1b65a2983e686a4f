"""A durable job's record in its queue's worker: start its durable execution, then acknowledge the record.

Behind SQS a durable function would be invoked synchronously by the event source mapping, so limited to 15 minutes
and started anew by every delivery ("Lambda event source mappings (ESM) don't support idempotency at launch ...
use a regular Lambda function as proxy (dispatcher) to invoke a durable function with an idempotency key (execution
name parameter)", https://docs.aws.amazon.com/lambda/latest/dg/durable-execution-idempotency.html). The worker is
that dispatcher: an asynchronous Invoke (InvocationType Event, which "support[s] execution durations up to 1 year",
https://docs.aws.amazon.com/lambda/latest/dg/durable-invoking.html) of the job's durable function, by its alias's
qualified ARN, named from the job's key and the key's generation (sqs_jobs.durable.execution_name):
- a second delivery of the record, or a second publish of the key, gives the same name: Lambda returns the running
  (or finished) execution, or DurableExecutionAlreadyStartedException when the payload differs; both are a no-op
  here, acknowledged;
- a key whose execution succeeded is acknowledged without a call (a duplicate, as for an ordinary job);
- a key whose execution failed has moved to its next generation (sqs_jobs.durable.record): its redriven dead
  letter, or a new publish, starts a new execution; a copy of a message an ended generation took (its
  acknowledgement lost to a crash or a hand-back) is acknowledged, starting no second life (each
  message is written to the record with its generation before its start).
A start that fails (throttled, the function missing, access denied) is the deployment's fault, not the job's: the
record comes back after a backoff without spending an attempt, and the runtime-faults alarm counts it
(RuntimeFault, reason durable_start).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from sqs_jobs.durable import execution_name
from sqs_jobs.durable.payload import DurableStart
from sqs_jobs.durable.record import SUCCEEDED, DurableRecords
from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.invocation import Delivery, Outcome
from sqs_jobs.worker.names import CANCELLED_COPY, DUPLICATE, DURABLE_STARTED, DeferReason
from sqs_jobs.worker.observability import BatchTally
from sqs_jobs.worker.settlement import Done, Settlement

if TYPE_CHECKING:
    from sqs_jobs.worker.settlement import Verdict

ALREADY_STARTED = "DurableExecutionAlreadyStartedException"


class DurableStarter(Protocol):
    """Starts a durable execution of `job` named `name` with `payload`: its ARN, or None when Lambda says one of that
    name already runs with another payload (a no-op all the same)."""

    def start(self, job: str, name: str, payload: str) -> str | None: ...


class LambdaDurableStarter:
    """Lambda's asynchronous Invoke of the job's durable function (its alias's qualified ARN)."""

    def __init__(self, lambda_client: Callable[[], Any], functions: Mapping[str, str]) -> None:
        self._client = lambda_client
        self._functions = functions

    def start(self, job: str, name: str, payload: str) -> str | None:
        try:
            response = self._client().invoke(
                FunctionName=self._functions[job],
                InvocationType="Event",
                DurableExecutionName=name,
                Payload=payload.encode("utf-8"),
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == ALREADY_STARTED:
                return None
            raise
        arn = response.get("DurableExecutionArn")
        return str(arn) if arn else None


class DurableDispatch:
    """The worker's part of a durable job: start, record, acknowledge."""

    def __init__(
        self, starter: DurableStarter, records: DurableRecords, settlement: Settlement, tally: BatchTally, logger: Any
    ) -> None:
        self._starter = starter
        self._records = records
        self._settlement = settlement
        self._tally = tally
        self._logger = logger

    def dispatch(self, envelope: Envelope, delivery: Delivery, key: str) -> Verdict:
        record = delivery.record
        try:
            if envelope.batch is not None:
                # Before the state is read: an execution that ends after this read counts it at its end; one that
                # ended before shows SUCCEEDED here, and the runtime counts this duplicate itself.
                self._records.add_batch_member(key, record.body)
            state = self._records.read(key)
            if state.status == SUCCEEDED:
                self._tally.add(envelope.job, DUPLICATE)
                self._logger.info("durable job already succeeded; duplicate skipped")
                return Done(Outcome.DUPLICATE)
            if state.cancelled_at is not None:
                # An operator cancelled the key (jobctl job cancel): its copies are acknowledged unrun, as an
                # ordinary job's are, until the cancel is withdrawn or the record expires.
                self._tally.add(envelope.job, CANCELLED_COPY)
                self._logger.info("durable job cancelled by an operator; acknowledged without starting")
                return Done(Outcome.CANCELLED)
            if state.ended_for(delivery.message_identity):
                # A copy of a message whose execution ended (its acknowledgement was lost: a crash, a hand-back after
                # the start): that life's end (its dead letter, its batch members counted) stands; a new publish or a
                # redrive runs the job again. Not a duplicate of a success: a batch member is not counted again.
                self._logger.info("durable job's execution for this message already ended; copy acknowledged")
                return Done(Outcome.DEAD_LETTERED)
            self._records.dispatching(key, state.generation, delivery.message_identity)
            name = execution_name(key, state.generation)
            start = DurableStart(
                body=record.body,
                key=key,
                generation=state.generation,
                source_queue=record.event_source_arn or "",
                message_group=record.attributes.message_group_id,
                attributes=dict(delivery.attributes.producer),
            )
            arn = self._starter.start(envelope.job, name, start.to_json())
            if state.execution_name != name or state.status is None:
                self._records.started(key, envelope.job, state.generation, name, arn)
        except Exception as error:
            self._tally.runtime_fault("durable_start")
            self._logger.exception("could not start the durable execution; the record comes back after a backoff")
            return self._settlement.hand_back(
                delivery, envelope, self._settlement.backoff(delivery.receives), DeferReason.RUNTIME_FAULT, error
            )
        self._tally.add(envelope.job, DURABLE_STARTED)
        self._logger.info("durable execution started", extra={"execution_name": name, "execution_arn": arn})
        return Done(Outcome.STARTED)
