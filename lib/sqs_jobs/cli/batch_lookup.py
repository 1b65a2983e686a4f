"""One batch as an operator sees it (`jobctl batch show`, the console's batch page): its members by state, its
callbacks and whether each was published, and when it was created, last moved and ended. Read from the batch's
two items in the idempotency table (sqs_jobs.batches), found by the stack's SSM parameter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqs_jobs.batches import (
    COMPLETE_PUBLISHED_AT,
    COMPLETED_AT,
    CREATED_AT,
    DEAD,
    DESCRIPTION,
    EXPIRATION,
    LAST_ENDED_AT,
    MEMBERS,
    ON_COMPLETE,
    ON_SUCCESS,
    ON_SUCCESS_ENVELOPE,
    SIZE,
    SUCCEEDED,
    SUCCEEDED_AT,
    SUCCESS_PUBLISHED_AT,
    BatchDefinitionError,
    batch_item_id,
    check_batch_id,
    member_indices,
    members_item_id,
)
from sqs_jobs.cli.errors import OperatorError, OperatorUnreachableError, OperatorUsageError
from sqs_jobs.stack_names import batches_parameter_name

SUCCEEDED_STATE = "succeeded"
DEAD_STATE = "dead"
OPEN_STATE = "open"


class BatchLookupError(OperatorUnreachableError):
    """The stack's batch table can't be found (not deployed with batches, or not readable)."""


class BatchNotFoundError(OperatorError):
    """No batch of that ID: never published, or expired (its TTL)."""


class BadBatchIdError(OperatorUsageError):
    """Not a batch ID (32 hex digits)."""


def _when(item: dict[str, Any], name: str) -> datetime | None:
    value = int(item.get(name, {}).get("N", "0"))
    return datetime.fromtimestamp(value, UTC) if value else None


@dataclass(frozen=True)
class Callback:
    kind: str
    job: str
    entity_id: str
    published_at: datetime | None


@dataclass(frozen=True)
class BatchView:
    batch_id: str
    description: str
    size: int
    # Member index -> `<job>:<id>`, and each index's state.
    members: tuple[str, ...]
    states: dict[int, str]
    callbacks: tuple[Callback, ...]
    created_at: datetime
    last_ended_at: datetime | None
    succeeded_at: datetime | None
    completed_at: datetime | None
    expires_at: datetime | None
    # A chain's step: the next step's envelope (JSON) its success publishes (sqs_jobs.chains); None otherwise.
    next_step: str | None = None

    def of_state(self, state: str) -> list[tuple[int, str]]:
        return [(index, self.members[index]) for index in range(self.size) if self.states[index] == state]

    def count(self, state: str) -> int:
        return sum(1 for value in self.states.values() if value == state)

    @property
    def time_to_complete_s(self) -> float | None:
        return (self.completed_at - self.created_at).total_seconds() if self.completed_at else None

    @property
    def verdict(self) -> str:
        if self.count(OPEN_STATE):
            return f"open: {self.count(OPEN_STATE)} of {self.size} members have not ended"
        if self.count(DEAD_STATE):
            return (
                f"complete, not succeeded: {self.count(DEAD_STATE)} of {self.size} members dead (redrive their dead "
                "letters, fixed, or publish a member cancelled before it ran again: on_success follows)"
            )
        return f"succeeded: all {self.size} members"

    def to_dict(self) -> dict[str, Any]:
        def iso(moment: datetime | None) -> str | None:
            return moment.isoformat(timespec="seconds") if moment else None

        return {
            "batch_id": self.batch_id,
            "description": self.description,
            "size": self.size,
            "verdict": self.verdict,
            "counts": {state: self.count(state) for state in (SUCCEEDED_STATE, DEAD_STATE, OPEN_STATE)},
            "members": {
                state: [{"index": index, "member": member} for index, member in self.of_state(state)]
                for state in (SUCCEEDED_STATE, DEAD_STATE, OPEN_STATE)
            },
            "callbacks": [
                {
                    "kind": callback.kind,
                    "job": callback.job,
                    "id": callback.entity_id,
                    "published": callback.published_at is not None,
                    "published_at": iso(callback.published_at),
                }
                for callback in self.callbacks
            ],
            "created_at": iso(self.created_at),
            "last_ended_at": iso(self.last_ended_at),
            "succeeded_at": iso(self.succeeded_at),
            "completed_at": iso(self.completed_at),
            "time_to_complete_s": self.time_to_complete_s,
            "expires_at": iso(self.expires_at),
        }


def batch_table(ssm_client: Any, stack_name: str) -> str:
    """The table the stack's batches are defined in, from its SSM parameter."""
    name = batches_parameter_name(stack_name)
    found = ssm_client.get_parameters(Names=[name]).get("Parameters", [])
    if not found:
        raise BatchLookupError(f"stack {stack_name!r} has no SSM parameter {name}: is it deployed with batches here?")
    return str(found[0]["Value"])


def look_up_batch(dynamodb_client: Any, table: str, batch_id: str) -> BatchView:
    try:
        check_batch_id(batch_id)
    except BatchDefinitionError as error:
        raise BadBatchIdError(str(error)) from None
    counting = dynamodb_client.get_item(
        TableName=table, Key={"id": {"S": batch_item_id(batch_id)}}, ConsistentRead=True
    ).get("Item")
    if counting is None:
        raise BatchNotFoundError(f"no batch {batch_id} in {table}: never published, or expired")
    listed = dynamodb_client.get_item(TableName=table, Key={"id": {"S": members_item_id(batch_id)}}).get("Item", {})
    size = int(counting[SIZE]["N"])
    names = [entry["S"] for entry in listed.get(MEMBERS, {}).get("L", [])]
    members = tuple(names[index] if index < len(names) else f"(member {index})" for index in range(size))
    succeeded = member_indices(counting, SUCCEEDED)
    dead = member_indices(counting, DEAD)
    states = {
        index: SUCCEEDED_STATE if index in succeeded else DEAD_STATE if index in dead else OPEN_STATE
        for index in range(size)
    }
    callbacks = []
    for kind, attribute, published in (
        ("on_success", ON_SUCCESS, SUCCESS_PUBLISHED_AT),
        ("on_complete", ON_COMPLETE, COMPLETE_PUBLISHED_AT),
    ):
        if attribute in counting:
            job, entity_id = counting[attribute]["S"].split(":", 1)
            callbacks.append(Callback(kind, job, entity_id, _when(counting, published)))
    created_at = _when(counting, CREATED_AT)
    assert created_at is not None
    return BatchView(
        batch_id=batch_id,
        description=counting.get(DESCRIPTION, {}).get("S", ""),
        size=size,
        members=members,
        states=states,
        callbacks=tuple(callbacks),
        created_at=created_at,
        last_ended_at=_when(counting, LAST_ENDED_AT),
        succeeded_at=_when(counting, SUCCEEDED_AT),
        completed_at=_when(counting, COMPLETED_AT),
        expires_at=_when(counting, EXPIRATION),
        next_step=counting.get(ON_SUCCESS_ENVELOPE, {}).get("S"),
    )
