"""What a batch's callback may ask about its batch: `context.batch()` reads the batch's counting item (one
consistent GetItem of the idempotency table, a grant every worker has), so an `on_complete` callback can say how
many members succeeded and how many were dead-lettered, as Sidekiq Pro's callbacks get the batch's status."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqs_jobs.batches import COMPLETE, DEAD, DESCRIPTION, SIZE, SUCCEEDED, SUCCESS, batch_item_id, member_indices

# The idempotency key JobPublisher gives a callback (sqs_jobs.batches.callback_key).
_CALLBACK_KEY = re.compile(rf"^batch-([0-9a-f]{{32}})-({SUCCESS}|{COMPLETE})$")


@dataclass(frozen=True)
class BatchStatus:
    """A batch as its counting item says when read: members by how they ended (indices), the rest still open."""

    batch_id: str
    callback: str  # "success" or "complete": which of the batch's callbacks this run is
    size: int
    succeeded: frozenset[int]
    dead: frozenset[int]
    description: str

    @property
    def pending(self) -> int:
        return self.size - len(self.succeeded) - len(self.dead)


def callback_batch(key: str | None) -> tuple[str, str] | None:
    """(batch ID, callback kind) when `key` is a batch callback's key; else None."""
    found = _CALLBACK_KEY.fullmatch(key or "")
    return (found.group(1), found.group(2)) if found else None


def read_status(dynamodb: Any, table: str, batch_id: str, callback: str) -> BatchStatus | None:
    """The batch's status; None once its items have expired."""
    item = dynamodb.get_item(TableName=table, Key={"id": {"S": batch_item_id(batch_id)}}, ConsistentRead=True)
    found = item.get("Item")
    if not found:
        return None
    return BatchStatus(
        batch_id=batch_id,
        callback=callback,
        size=int(found[SIZE]["N"]),
        succeeded=member_indices(found, SUCCEEDED),
        dead=member_indices(found, DEAD),
        description=found.get(DESCRIPTION, {}).get("S", ""),
    )
