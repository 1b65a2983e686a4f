"""A durable job's record: one item per job key in the idempotency table, beside the key's Powertools record.

What the dispatcher, the durable function and `jobctl job show` share:
- `generation`: how many of the key's executions ended in failure. The execution's name is made from the key and
  this number (sqs_jobs.durable.execution_name), so a second start of a running or finished execution is a no-op
  (Lambda returns the existing execution for a known name), while a redrive after a failure starts a new one.
- the execution's state as its handler last wrote it: status, the step running or done, steps done, the step's
  attempt and next retry, and `beat_at` (the heartbeat: written at every step's start and end, and by
  `context.heartbeat()`). Lambda keeps the execution's own history; this is what the operator reads without it.

Every write is conditioned on the key's generation (a late write of an execution a newer generation replaced is
refused), and none undoes an end: SUCCEEDED is final for its generation (a late heartbeat, e.g. of a step cut at its
time limit whose thread ran on, is refused), the dispatcher's `started` never writes STARTING over the execution's
own RUNNING or SUCCEEDED (its Invoke may answer after the execution ran, or ended), and an end written twice (a
retried end step, a sweep after it) is written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from sqs_jobs.worker.names import (
    CALLBACK_ID,
    CANCELLED_AT,
    CANCELLED_BY,
    DURABLE_RECORD_PREFIX,
    LIFE,
    LIFE_AT,
    WAITING_FOR,
    WAITING_SINCE,
    WAITING_UNTIL,
    LifeState,
    durable_record_id,
    life_partition,
)

RECORD_PREFIX = DURABLE_RECORD_PREFIX

# Statuses, as Lambda names an execution's (API_Execution's Status), plus STARTING: dispatched, not yet running.
STARTING = "STARTING"
RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"

GENERATION = "generation"
STATUS = "status"
EXECUTION_NAME = "execution_name"
EXECUTION_ARN = "execution_arn"
JOB = "job"
KEY = "key"
STEP = "step"
STEPS_DONE = "steps_done"
STEP_ATTEMPT = "step_attempt"
NEXT_RETRY_AT = "next_retry_at"
LAST_ERROR_TYPE = "last_error_type"
LAST_ERROR = "last_error"
STARTED_AT = "started_at"
BEAT_AT = "beat_at"
ENDED_AT = "ended_at"
NOTE = "note"
# A sweep's claim on ending an execution that ended without its end (sqs_jobs.durable.sweep): until when.
CLAIMED_UNTIL = "claimed_until"
EXPIRATION = "expiration"
# The bodies of the batch members' messages that named the key (a string set): each execution's end counts them all,
# whichever message started it.
BATCH_MEMBERS = "batch_members"
# The messages handed to the key's executions (a string set of `<generation>:<message identity>`), each written before
# its start: a copy of one whose generation has ended (its acknowledgement lost) starts no second life.
DISPATCHED = "dispatched"
MAX_TEXT_CHARS = 1024
# What an execution waiting for an event writes, and what its end removes.
WAITING = (WAITING_FOR, CALLBACK_ID, WAITING_SINCE, WAITING_UNTIL)


@dataclass(frozen=True)
class DurableState:
    """The record as read: what `jobctl job show` prints."""

    key: str
    generation: int
    status: str | None
    execution_name: str | None
    execution_arn: str | None
    step: str | None
    steps_done: int
    step_attempt: int | None
    next_retry_at: float | None
    last_error_type: str | None
    last_error: str | None
    started_at: float | None
    beat_at: float | None
    ended_at: float | None
    note: str | None
    # `<generation>:<message identity>` of each message handed to an execution of the key (DISPATCHED).
    dispatched: frozenset[str] = frozenset()
    # The event the execution waits for (DurableJobContext.wait_for_event), since and until when; None: none.
    waiting_for: str | None = None
    waiting_since: float | None = None
    waiting_until: float | None = None
    # An operator cancelled the key (`jobctl job cancel`): when and who. Every copy of it is acknowledged unrun.
    cancelled_at: float | None = None
    cancelled_by: str | None = None

    @classmethod
    def of(cls, key: str, item: Mapping[str, Any] | None) -> DurableState:
        item = item or {}

        def number(name: str) -> float | None:
            value = item.get(name)
            return float(value) if value is not None else None

        def text(name: str) -> str | None:
            value = item.get(name)
            return str(value) if value is not None else None

        attempt = item.get(STEP_ATTEMPT)
        return cls(
            key=key,
            generation=int(item.get(GENERATION, 0)),
            status=text(STATUS),
            execution_name=text(EXECUTION_NAME),
            execution_arn=text(EXECUTION_ARN),
            step=text(STEP),
            steps_done=int(item.get(STEPS_DONE, 0)),
            step_attempt=int(attempt) if attempt is not None else None,
            next_retry_at=number(NEXT_RETRY_AT),
            last_error_type=text(LAST_ERROR_TYPE),
            last_error=text(LAST_ERROR),
            started_at=number(STARTED_AT),
            beat_at=number(BEAT_AT),
            ended_at=number(ENDED_AT),
            note=text(NOTE),
            dispatched=frozenset(item.get(DISPATCHED, ())),
            waiting_for=text(WAITING_FOR),
            waiting_since=number(WAITING_SINCE),
            waiting_until=number(WAITING_UNTIL),
            cancelled_at=number(CANCELLED_AT),
            cancelled_by=text(CANCELLED_BY),
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> DurableState:
        """A record as DynamoDB returns it (typed attribute values), the key read from its own attribute."""
        plain = _plain(item) or {}
        return cls.of(str(plain.get(KEY, "")), plain)

    def to_json(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if value is not None and name != DISPATCHED}

    def ended_for(self, message: str) -> bool:
        """`message` was handed to an execution of an earlier generation, which has ended: its life is over."""
        for entry in self.dispatched:
            generation, _, identity = entry.partition(":")
            if identity == message and int(generation) < self.generation:
                return True
        return False


class StaleGenerationError(Exception):
    """A write of an execution whose key has moved on to a newer generation (a redrive started a new one), or that
    would undo its end (a heartbeat after its success)."""


class ClaimedError(Exception):
    """Another sweep claimed ending this execution, and its claim has not lapsed."""


class DurableRecords:
    """Reads and writes durable jobs' records in the idempotency table. `client()` gives the DynamoDB client for one
    call; `expiry_s` is how long a record outlives its last write (the queue's idempotency_expiry_s). `queue`: the
    job's queue, under which a started execution is listed as running (the `jobs-by-life` index: `jobctl job list`,
    the console's jobs page) until it ends; None (a reader's): nothing listed."""

    def __init__(
        self,
        client: Callable[[], Any],
        table: str,
        expiry_s: int,
        clock: Callable[[], float] = time.time,
        queue: str | None = None,
    ) -> None:
        self._client = client
        self._table = table
        self._expiry_s = expiry_s
        self._clock = clock
        self._queue = queue

    def _listed(self, key: str, since: float) -> dict[str, Any]:
        """The attributes that list the key's execution as running since `since` (none without a queue)."""
        if self._queue is None:
            return {}
        return {LIFE: life_partition(self._queue, LifeState.RUNNING, durable_record_id(key)), LIFE_AT: since}

    def read(self, key: str) -> DurableState:
        response = self._client().get_item(
            TableName=self._table, Key={"id": {"S": durable_record_id(key)}}, ConsistentRead=True
        )
        return DurableState.of(key, _plain(response.get("Item")))

    def started(self, key: str, job: str, generation: int, execution_name: str, execution_arn: str | None) -> None:
        """The dispatcher started (or found) the execution of `generation`: STARTING, unless the execution already
        said where it is (RUNNING, or SUCCEEDED: the Invoke may answer after it ran), whose state is kept."""
        now = self._clock()
        values: dict[str, Any] = {KEY: key, JOB: job, EXECUTION_NAME: execution_name}
        if execution_arn:
            values[EXECUTION_ARN] = execution_arn
        listed = self._listed(key, now)
        try:
            self._update(
                key,
                generation,
                {**values, **listed, STATUS: STARTING, BEAT_AT: now},
                unless_status=(RUNNING, SUCCEEDED),
            )
        except ConditionRefusedError:
            try:  # it runs already: listed with its state kept; ended already: never listed again
                self._update(key, generation, {**values, **listed}, unless_status=(SUCCEEDED, FAILED))
            except ConditionRefusedError:
                self._update(key, generation, values)

    def beat(self, key: str, generation: int, **values: Any) -> None:
        """The execution's handler says where it is (RUNNING, a step, steps done, a retry's time, a note); refused
        (StaleGenerationError) once the execution succeeded or its key moved on."""
        now = self._clock()
        fields = {STATUS: RUNNING, BEAT_AT: now, **{name: value for name, value in values.items()}}
        try:
            self._update(key, generation, fields, remove_none=True, unless_status=(SUCCEEDED,))
        except ConditionRefusedError as error:
            raise StaleGenerationError(
                f"{key}: generation {generation} is no longer the key's, or its execution already succeeded"
            ) from error

    def add_batch_member(self, key: str, body: str) -> None:
        """A batch member's message named the key: its execution's end counts it, whichever message started it."""
        self._client().update_item(
            TableName=self._table,
            Key={"id": {"S": durable_record_id(key)}},
            UpdateExpression="ADD #members :body SET #expiration = :expiration",
            ExpressionAttributeNames={"#members": BATCH_MEMBERS, "#expiration": EXPIRATION},
            ExpressionAttributeValues={
                ":body": {"SS": [body]},
                ":expiration": {"N": str(int(self._clock()) + self._expiry_s)},
            },
        )

    def dispatching(self, key: str, generation: int, message: str) -> None:
        """`message` is handed to `generation`'s execution (written before its start, so a copy of it redelivered
        after that execution ended is known: DurableState.ended_for)."""
        self._client().update_item(
            TableName=self._table,
            Key={"id": {"S": durable_record_id(key)}},
            UpdateExpression="ADD #dispatched :message SET #expiration = :expiration",
            ExpressionAttributeNames={"#dispatched": DISPATCHED, "#expiration": EXPIRATION},
            ExpressionAttributeValues={
                ":message": {"SS": [f"{generation}:{message}"]},
                ":expiration": {"N": str(int(self._clock()) + self._expiry_s)},
            },
        )

    def batch_members(self, key: str) -> list[str]:
        """The batch members' message bodies that named the key, read consistently."""
        item = (
            self._client()
            .get_item(
                TableName=self._table,
                Key={"id": {"S": durable_record_id(key)}},
                ProjectionExpression="#members",
                ExpressionAttributeNames={"#members": BATCH_MEMBERS},
                ConsistentRead=True,
            )
            .get("Item", {})
        )
        return sorted(item.get(BATCH_MEMBERS, {}).get("SS", []))

    def first_start(self, key: str, generation: int, started_at: float) -> None:
        self._update(key, generation, {STARTED_AT: started_at}, only_if_absent=STARTED_AT)

    def ended(self, key: str, generation: int, succeeded: bool, error_type: str = "", error: str = "") -> None:
        """The execution ended: a failure moves the key to the next generation, so a redrive starts a new one. A
        failure written again (a retried end step, a sweep) is a no-op; an end that contradicts the record (a failure
        after its success, a success of a generation the key left) is StaleGenerationError."""
        now = self._clock()
        values: dict[str, Any] = {
            STATUS: SUCCEEDED if succeeded else FAILED,
            ENDED_AT: now,
            BEAT_AT: now,
            NEXT_RETRY_AT: None,
            CLAIMED_UNTIL: None,
            **dict.fromkeys(WAITING),
            # No longer in flight.
            LIFE: None,
            LIFE_AT: None,
        }
        if not succeeded:
            values[LAST_ERROR_TYPE] = error_type[:MAX_TEXT_CHARS] or "(unknown)"
            values[LAST_ERROR] = error[:MAX_TEXT_CHARS] or "(no message)"
        try:
            self._update(
                key,
                generation,
                values,
                remove_none=True,
                next_generation=not succeeded,
                unless_status=() if succeeded else (SUCCEEDED,),
            )
        except ConditionRefusedError as refused:
            state = self.read(key)
            # Only a failure's end moves the key on: past `generation`, this failure was written already.
            if succeeded or state.generation <= generation:
                raise StaleGenerationError(
                    f"{key}: generation {generation} can't end {'SUCCEEDED' if succeeded else 'FAILED'}: the record "
                    f"is at generation {state.generation}, {state.status}"
                ) from refused

    def cancel(self, key: str, by: str) -> DurableState:
        """An operator cancels the key: every later copy of it is acknowledged unrun (the dispatcher reads this),
        until its record expires or the cancel is withdrawn; the record as it is then. Stopping a running execution
        is the caller's (StopDurableExecution): its end is then written as any stopped execution's."""
        now = self._clock()
        response = self._client().update_item(
            TableName=self._table,
            Key={"id": {"S": durable_record_id(key)}},
            UpdateExpression="SET #at = :at, #by = :by, #key = if_not_exists(#key, :key), #expiration = :expiration",
            ExpressionAttributeNames={"#at": CANCELLED_AT, "#by": CANCELLED_BY, "#key": KEY, "#expiration": EXPIRATION},
            ExpressionAttributeValues={
                ":at": _attribute(now),
                ":by": {"S": by[:MAX_TEXT_CHARS]},
                ":key": {"S": key},
                ":expiration": {"N": str(int(now) + self._expiry_s)},
            },
            ReturnValues="ALL_NEW",
        )
        return DurableState.of(key, _plain(response.get("Attributes")))

    def withdraw_cancel(self, key: str) -> bool:
        """Withdraw an operator's cancel: the next copy starts (a redrive too). Whether there was one."""
        try:
            self._client().update_item(
                TableName=self._table,
                Key={"id": {"S": durable_record_id(key)}},
                UpdateExpression="REMOVE #at, #by",
                ConditionExpression="attribute_exists(#at)",
                ExpressionAttributeNames={"#at": CANCELLED_AT, "#by": CANCELLED_BY},
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def claim(self, key: str, generation: int, until: float) -> None:
        """A sweep's claim on ending `generation` (sqs_jobs.durable.sweep), so two sweeps never both send its
        dead letter: ClaimedError while another's claim holds, StaleGenerationError once it ended."""
        try:
            self._update(key, generation, {CLAIMED_UNTIL: until}, unless_status=(SUCCEEDED,), unless_claimed=True)
        except ConditionRefusedError as refused:
            state = self.read(key)
            if state.generation == generation and state.status != SUCCEEDED:
                raise ClaimedError(f"{key}: generation {generation} is claimed by another sweep") from refused
            raise StaleGenerationError(
                f"{key}: generation {generation} already ended (the record is at generation {state.generation}, "
                f"{state.status})"
            ) from refused

    def _update(
        self,
        key: str,
        generation: int,
        values: Mapping[str, Any],
        *,
        remove_none: bool = False,
        only_if_absent: str | None = None,
        next_generation: bool = False,
        unless_status: tuple[str, ...] = (),
        unless_claimed: bool = False,
    ) -> None:
        """One conditional UpdateItem at `generation`. Refused: ConditionRefusedError (StaleGenerationError for a
        plain write), except for `only_if_absent`, which is quietly kept."""
        names: dict[str, str] = {"#generation": GENERATION, "#expiration": EXPIRATION}
        attribute_values: dict[str, Any] = {
            ":generation": {"N": str(generation)},
            ":expiration": {"N": str(int(self._clock()) + self._expiry_s)},
        }
        sets = ["#expiration = :expiration"]
        removes: list[str] = []
        for index, (name, value) in enumerate(values.items()):
            names[f"#a{index}"] = name
            if value is None:
                if remove_none:
                    removes.append(f"#a{index}")
                continue
            attribute_values[f":v{index}"] = _attribute(value)
            sets.append(f"#a{index} = :v{index}")
        if next_generation:
            attribute_values[":next"] = {"N": str(generation + 1)}
            sets.append("#generation = :next")
        else:
            sets.append("#generation = :generation")
        condition = "(attribute_not_exists(#generation) OR #generation = :generation)"
        if only_if_absent is not None:
            names["#absent"] = only_if_absent
            condition += " AND attribute_not_exists(#absent)"
        if unless_status:
            names["#status"] = STATUS
            for index, status in enumerate(unless_status):
                attribute_values[f":final{index}"] = {"S": status}
            refused = ", ".join(f":final{index}" for index in range(len(unless_status)))
            condition += f" AND (attribute_not_exists(#status) OR NOT #status IN ({refused}))"
        if unless_claimed:
            names["#claimed"] = CLAIMED_UNTIL
            attribute_values[":now"] = _attribute(self._clock())
            condition += " AND (attribute_not_exists(#claimed) OR #claimed < :now)"
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        try:
            self._client().update_item(
                TableName=self._table,
                Key={"id": {"S": durable_record_id(key)}},
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=attribute_values,
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            if only_if_absent is None:
                raise ConditionRefusedError(f"{key}: generation {generation} is no longer the key's") from error


class ConditionRefusedError(StaleGenerationError):
    """A write's condition refused it: the generation moved on, or the status it may not overwrite is there."""


def _attribute(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        return {"N": repr(round(float(value), 3)) if isinstance(value, float) else str(value)}
    return {"S": str(value)}


def _plain(item: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if item is None:
        return None
    plain: dict[str, Any] = {}
    for name, value in item.items():
        if "S" in value:
            plain[name] = value["S"]
        elif "N" in value:
            number = float(value["N"])
            plain[name] = int(number) if number.is_integer() else number
        elif "BOOL" in value:
            plain[name] = value["BOOL"]
        elif "SS" in value:
            plain[name] = frozenset(value["SS"])
    return plain
