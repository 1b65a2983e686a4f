"""Re-reading the entity a job names, the ID-only rule's other half: the message says which, the table says what."""

from __future__ import annotations

from typing import Any

from sqs_jobs.worker.errors import RecordNotFoundError
from sqs_jobs.worker.jobs import JobContext


def load_item(
    context: JobContext, table_resource: str, key: str, entity_id: str, missing: type[RecordNotFoundError]
) -> dict[str, Any]:
    """The item whose `key` is `entity_id` in the table named by `table_resource` (read consistently, so a job
    published right after a write sees it); raise `missing` when there is none: a permanent failure."""
    table = context.resource(table_resource)
    response = context.client("dynamodb").get_item(TableName=table, Key={key: {"S": entity_id}}, ConsistentRead=True)
    item: dict[str, Any] | None = response.get("Item")
    if item is None:
        raise missing(f"{key} {entity_id!r} does not exist in table {table!r}")
    return item


def text_of(item: dict[str, Any], name: str) -> str | None:
    """A string attribute of a DynamoDB item (its wire form), or None when it is absent, not a string or blank."""
    value = item.get(name, {}).get("S")
    return value if isinstance(value, str) and value.strip() else None
