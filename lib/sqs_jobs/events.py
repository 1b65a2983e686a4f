"""Events sent to durable jobs waiting for them (DurableJobContext.wait_for_event; docs/workflows.md "Waiting for
an event").

A waiting execution writes the event's name and the callback Lambda completes its wait with into its durable record
(sqs_jobs.durable.record). Sending the event reads that record (one consistent GetItem of what `EVENT_ATTRIBUTES`
names, all `JobsStack.grant_send_events` lets a sender read) and completes the callback with the payload as JSON
(Lambda's SendDurableExecutionCallbackSuccess). An event is delivered only to a job waiting for it: one sent before
the job waits, after its wait ended, or twice, is refused (EventNotAwaitedError), never kept for later.

Boto3 only, as the publisher: a service needs no worker dependency to send events.
"""

from __future__ import annotations

import json
from typing import Any

from sqs_jobs.envelope import checked_identifier
from sqs_jobs.worker.key_life import scoped_key
from sqs_jobs.worker.names import CALLBACK_ID, DURABLE_RECORD_PREFIX, WAITING_FOR, durable_record_id

RECORD_KEY = "id"
# What a sender reads of a durable job's record: whether, and for what, it waits.
EVENT_ATTRIBUTES = (RECORD_KEY, WAITING_FOR, CALLBACK_ID)
# SendDurableExecutionCallbackSuccess's Result: at most 256 KB (the Lambda API Reference).
MAX_EVENT_PAYLOAD_BYTES = 256 * 1024
# What Lambda answers for a callback that no longer waits: CallbackTimeoutException ("the callback ID token has
# either expired or the callback associated with the token has already been closed", the API Reference);
# ResourceNotFoundException for one it doesn't know (its execution gone past its retention).
CLOSED_CALLBACK_CODES = frozenset({"CallbackTimeoutException", "ResourceNotFoundException"})


class EventNotAwaitedError(LookupError):
    """The job is not waiting for this event: it waits for another (`waiting_for`), for none (not started, between
    waits, ended), or its wait for it has just ended (the event came already, or timed out)."""

    def __init__(self, message: str, waiting_for: str | None = None) -> None:
        super().__init__(message)
        self.waiting_for = waiting_for


class NotADurableJobError(ValueError):
    """Only durable jobs wait for events: the job named is an ordinary one."""


class EventsNotConfiguredError(RuntimeError):
    """The publisher was built without what sending events needs (a DynamoDB and a Lambda client)."""


class EventPayloadError(ValueError):
    """The payload can't be sent: not JSON-serializable, or larger than Lambda takes."""


class JobEvents:
    """Sends events to waiting durable jobs, with injected DynamoDB and Lambda clients; `table` is the stack's
    idempotency table (the `/<stack>/results/table` parameter)."""

    def __init__(self, dynamodb_client: Any, lambda_client: Any, table: str) -> None:
        self._dynamodb = dynamodb_client
        self._lambda = lambda_client
        self._table = table

    def send(
        self,
        job: str,
        job_id: str,
        name: str,
        payload: Any = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
    ) -> None:
        """Complete the wait of job `job` (published with ID `job_id`, or `key`, `tenant`) for the event `name`
        with `payload` (JSON). Raises EventNotAwaitedError when it is not waiting for it, EventPayloadError for a
        payload Lambda can't take; Lambda's own errors (throttling, access) pass through as botocore's."""
        try:
            body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as error:
            raise EventPayloadError(f"event {name!r}: the payload is not JSON-serializable ({error})") from None
        size = len(body.encode())
        if size > MAX_EVENT_PAYLOAD_BYTES:
            raise EventPayloadError(
                f"event {name!r}: the payload is {size} bytes as JSON; Lambda takes at most {MAX_EVENT_PAYLOAD_BYTES}"
            )
        checked_identifier("id", job_id)
        if key is not None:
            checked_identifier("key", key)
        scoped = scoped_key(job, key if key is not None else job_id, tenant)
        waiting_for, callback_id = self._waiting(scoped)
        if waiting_for != name or not callback_id:
            now = f"it waits for event {waiting_for!r}" if waiting_for else "it waits for no event now"
            raise EventNotAwaitedError(f"job {scoped!r} is not waiting for event {name!r}: {now}", waiting_for)
        from botocore.exceptions import ClientError

        try:
            self._lambda.send_durable_execution_callback_success(CallbackId=callback_id, Result=body.encode())
        except ClientError as error:
            if not _closed(error):
                raise
            raise EventNotAwaitedError(
                f"job {scoped!r} no longer waits for event {name!r}: the event came already, or its wait timed out "
                "or its execution ended",
                None,
            ) from None

    def _waiting(self, scoped: str) -> tuple[str | None, str | None]:
        names = {f"#a{index}": name for index, name in enumerate(EVENT_ATTRIBUTES)}
        item = self._dynamodb.get_item(
            TableName=self._table,
            Key={RECORD_KEY: {"S": durable_record_id(scoped)}},
            ConsistentRead=True,
            ProjectionExpression=", ".join(names),
            ExpressionAttributeNames=names,
        ).get("Item", {})
        return item.get(WAITING_FOR, {}).get("S"), item.get(CALLBACK_ID, {}).get("S")


def _closed(error: Any) -> bool:
    """Lambda says the callback no longer waits. By its error code only: a bare status with no code (a client whose
    endpoint is not Lambda's callback API answers 404 too) is not an answer about the callback, and passes through."""
    return error.response.get("Error", {}).get("Code") in CLOSED_CALLBACK_CODES


# The records a sender may read: durable jobs' only (`durable#<key>`).
EVENT_KEYS = (f"{DURABLE_RECORD_PREFIX}*",)
