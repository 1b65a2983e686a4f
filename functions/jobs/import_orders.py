"""A durable job: import a CSV of orders from S3 into the imported orders table, 1,000 rows a step.

The message carries the import's ID; the file is `imports/<id>.csv` in the imports bucket (a header line, then one
order a line: order_id,customer,amount). The import runs as a durable execution (JobSpec.durable), so it may take
longer than one Lambda invocation:
1. step `plan`: one streaming read of the file finds where each chunk of CHUNK_ROWS rows starts and ends (byte
   offsets, checkpointed: a few bytes per chunk);
2. one step per chunk, `chunk-<n>`: a ranged GET of just that chunk's bytes, its rows written with BatchWriteItem.
   Each row's item is keyed by its order_id, so a chunk written again (a step interrupted mid-way runs again from
   its start, its finished steps never) leaves each order once, as the same item;
3. step `summary`: what was imported, the execution's result. The seam for a follow-up (a batch's completion
   callback) is `imported(...)`: it runs once, in the last step.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal, InvalidOperation
from functools import partial
from typing import TYPE_CHECKING, Any

from functions.catalog import IMPORTS_PREFIX
from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import PermanentError

if TYPE_CHECKING:
    from sqs_jobs.durable.context import DurableJobContext

CHUNK_ROWS = 1000
COLUMNS = ("order_id", "customer", "amount")
# BatchWriteItem's most items a call.
BATCH_WRITE_MAX = 25
# Unprocessed items are sent again at most this many times within a step (then the step fails, transiently).
MAX_UNPROCESSED_ROUNDS = 8


class ImportFileError(PermanentError):
    """The file is not an orders CSV (no such key, a wrong header, a row that isn't an order): a retry won't help."""


class UnprocessedWritesError(Exception):
    """DynamoDB kept refusing some of a chunk's writes (throttling): transient, the step is retried."""


def csv_key(import_id: str) -> str:
    return f"{IMPORTS_PREFIX}{import_id}.csv"


def run(envelope: Envelope, context: DurableJobContext) -> dict[str, Any]:
    bucket = context.resource("imports_bucket")
    key = csv_key(envelope.id)
    chunks: list[list[int]] = context.step("plan", lambda: plan_chunks(context.client("s3"), bucket, key))
    imported = 0
    for number, (start, end) in enumerate(chunks):
        imported += context.step(f"chunk-{number}", partial(import_chunk, context, bucket, key, start, end))
        context.progress(number + 1, len(chunks), "chunks")
    return context.step("summary", lambda: imported_summary(envelope, key, len(chunks), imported))


def imported_summary(envelope: Envelope, key: str, chunks: int, rows: int) -> dict[str, Any]:
    summary = {"import_id": envelope.id, "file": key, "chunks": chunks, "rows": rows}
    imported(summary)
    return summary


def imported(summary: dict[str, Any]) -> None:
    """Runs once when the import has ended well: where a follow-up goes (a batch's completion callback)."""


def plan_chunks(s3: Any, bucket: str, key: str) -> list[list[int]]:
    """[start, end) byte offsets of each chunk of CHUNK_ROWS rows after the header, from one streaming read."""
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    except s3.exceptions.NoSuchKey:
        raise ImportFileError(f"no file {key!r} in bucket {bucket!r}") from None
    lines = body.iter_lines(keepends=True)
    header = next(lines, b"")
    if tuple(header.decode("utf-8").strip().split(",")) != COLUMNS:
        raise ImportFileError(f"{key}: header must be {','.join(COLUMNS)}, not {header[:100]!r}")
    offset = len(header)
    chunks: list[list[int]] = []
    start, rows = offset, 0
    for line in lines:
        if not line.strip():
            offset += len(line)
            continue
        offset += len(line)
        rows += 1
        if rows == CHUNK_ROWS:
            chunks.append([start, offset])
            start, rows = offset, 0
    if rows:
        chunks.append([start, offset])
    return chunks


def parse_rows(data: bytes, where: str) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for number, fields in enumerate(csv.reader(io.StringIO(data.decode("utf-8")))):
        if not fields:
            continue
        if len(fields) != len(COLUMNS):
            raise ImportFileError(f"{where}: row {number + 1} has {len(fields)} fields, not {len(COLUMNS)}")
        order_id, customer, amount = (field.strip() for field in fields)
        try:
            Decimal(amount)
        except InvalidOperation:
            raise ImportFileError(f"{where}: row {number + 1}: amount {amount[:40]!r} is not a number") from None
        if not order_id:
            raise ImportFileError(f"{where}: row {number + 1} has no order_id")
        rows.append({"order_id": order_id, "customer": customer, "amount": amount})
    return rows


def import_chunk(context: DurableJobContext, bucket: str, key: str, start: int, end: int) -> int:
    """Read bytes [start, end) of the file and write its rows; the number of rows written."""
    data = context.client("s3").get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")["Body"].read()
    rows = parse_rows(data, f"{key} bytes {start}-{end}")
    table = context.resource("imported_orders_table")
    dynamodb = context.client("dynamodb")
    for first in range(0, len(rows), BATCH_WRITE_MAX):
        requests: list[dict[str, Any]] = [
            {
                "PutRequest": {
                    "Item": {
                        "order_id": {"S": row["order_id"]},
                        "customer": {"S": row["customer"]},
                        "amount": {"N": row["amount"]},
                        "import_id": {"S": context.envelope.id},
                    }
                }
            }
            for row in rows[first : first + BATCH_WRITE_MAX]
        ]
        for _ in range(MAX_UNPROCESSED_ROUNDS):
            response = dynamodb.batch_write_item(RequestItems={table: requests})
            requests = response.get("UnprocessedItems", {}).get(table, [])
            if not requests:
                break
        else:
            raise UnprocessedWritesError(f"{len(requests)} writes still unprocessed after {MAX_UNPROCESSED_ROUNDS}")
    return len(rows)
