"""Reports its progress three times in quick succession, reading its key's record between reports as an operator
would see it (SEEN[id]), then returns."""

from __future__ import annotations

from typing import Any

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext
from sqs_jobs.worker.settings import idempotency_record_id

SEEN: dict[str, list[dict[str, Any]]] = {}
WRITTEN: dict[str, list[bool]] = {}


def run(envelope: Envelope, context: JobContext) -> None:
    table = context.progress_reporter.table if context.progress_reporter else ""
    dynamodb = context.client("dynamodb")
    written = []
    for done, note in ((1, "first rows"), (2, "more rows"), (3, "all rows")):
        written.append(context.progress(done, 3, note))
        item = dynamodb.get_item(
            TableName=table, Key={"id": {"S": idempotency_record_id(context.key)}}, ConsistentRead=True
        )
        SEEN.setdefault(envelope.id, []).append(item["Item"])
    WRITTEN[envelope.id] = written
