"""Where a dead letter's producer attributes go when they can't travel in it: the idempotency table.

A dead letter is the original body, byte for byte, its evidence and the producer's attributes packed in
`jobs.original_attributes`. The DLQ takes SQS's largest message and the source queue leaves room below it
(`DEAD_LETTER_HEADROOM_BYTES`), so this never happens with the catalog's limits; it is for a deployed source
queue whose limit was raised by hand. Then the packed attributes are written here, in chunks under a DynamoDB
item's 400 KB, keyed by their SHA-256, and the dead letter carries `jobs.original_attributes_stored` naming them.
jobctl's redrive reads them back and sends the message with them (sqs_jobs.cli.dlq).

Why the idempotency table: the worker already writes to it (no new resource or grant), it has a TTL attribute, and
a keyed read is all a redrive needs. The items live `STORED_FOR_S`, longer than any DLQ keeps a message. Keys
start with `jobs.original_attributes#`, which Powertools' keys (`jobs#<md5>`) never do.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqs_jobs.limits import DAY, SQS_MAX_RETENTION_S
from sqs_jobs.worker.provenance import ORIGINAL_ATTRIBUTES, STORED_ATTRIBUTES, Attributes, unpack

# The idempotency table's partition key and TTL attribute (sqs_jobs.cdk.jobs: IDEMPOTENCY_PARTITION_KEY,
# IDEMPOTENCY_TTL_ATTRIBUTE; tests/unit/test_attribute_store.py checks they agree).
KEY_ATTRIBUTE = "id"
EXPIRY_ATTRIBUTE = "expiration"
DATA_ATTRIBUTE = "data"
# A DynamoDB item holds at most 400 KB, its attribute names and key included: a chunk leaves room for those.
CHUNK_BYTES = 350_000
# Outlives any DLQ's retention (at most SQS's 14 days), so a dead letter never outlives its attributes.
STORED_FOR_S = SQS_MAX_RETENTION_S + DAY


class StoredAttributesError(Exception):
    """Stored producer attributes could not be read back whole (expired, deleted, or not what was written)."""


@dataclass(frozen=True)
class StoredAttributes:
    """The reference a dead letter carries in `jobs.original_attributes_stored`."""

    table: str
    sha256: str
    chunks: int
    size: int

    def item_key(self, index: int) -> dict[str, dict[str, str]]:
        return {KEY_ATTRIBUTE: {"S": f"{ORIGINAL_ATTRIBUTES}#{self.sha256}#{index}"}}

    def to_attribute(self) -> dict[str, dict[str, str]]:
        text = json.dumps(
            {"table": self.table, "sha256": self.sha256, "chunks": self.chunks, "bytes": self.size},
            separators=(",", ":"),
            sort_keys=True,
        )
        return {STORED_ATTRIBUTES: {"DataType": "String", "StringValue": text}}

    @classmethod
    def parse(cls, text: str) -> StoredAttributes:
        try:
            fields = json.loads(text)
            reference = cls(
                table=str(fields["table"]),
                sha256=str(fields["sha256"]),
                chunks=int(fields["chunks"]),
                size=int(fields["bytes"]),
            )
        except (ValueError, TypeError, KeyError) as error:
            raise StoredAttributesError(f"{STORED_ATTRIBUTES} {text[:200]!r} is not a reference: {error}") from None
        if not reference.table or reference.chunks < 1 or reference.size < 0:
            raise StoredAttributesError(f"{STORED_ATTRIBUTES} {text[:200]!r} is not a reference")
        return reference


class AttributeStore:
    """Writes packed producer attributes to `table` (the worker's idempotency table) through `dynamodb`."""

    def __init__(self, dynamodb: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._clock = clock

    def put(self, packed: bytes) -> StoredAttributes:
        """Store `packed`; the same bytes always get the same keys, so writing them twice is harmless."""
        reference = StoredAttributes(
            table=self._table,
            sha256=hashlib.sha256(packed).hexdigest(),
            chunks=max(1, -(-len(packed) // CHUNK_BYTES)),
            size=len(packed),
        )
        expires = str(int(self._clock() + STORED_FOR_S))
        for index in range(reference.chunks):
            chunk = packed[index * CHUNK_BYTES : (index + 1) * CHUNK_BYTES]
            self._dynamodb.put_item(
                TableName=self._table,
                Item={**reference.item_key(index), DATA_ATTRIBUTE: {"B": chunk}, EXPIRY_ATTRIBUTE: {"N": expires}},
            )
        return reference

    def load(self, reference: StoredAttributes) -> Attributes:
        return read_attributes(self._dynamodb, reference)


def read_packed(dynamodb: Any, reference: StoredAttributes) -> bytes:
    """The packed attributes `reference` names, checked against its length and SHA-256."""
    chunks = []
    for index in range(reference.chunks):
        item = dynamodb.get_item(TableName=reference.table, Key=reference.item_key(index), ConsistentRead=True)
        if "Item" not in item:
            raise StoredAttributesError(
                f"chunk {index} of the stored attributes {reference.sha256} is not in table {reference.table} "
                f"(expired after {STORED_FOR_S // DAY} days, or deleted)"
            )
        chunks.append(bytes(item["Item"][DATA_ATTRIBUTE]["B"]))
    packed = b"".join(chunks)
    if len(packed) != reference.size or hashlib.sha256(packed).hexdigest() != reference.sha256:
        raise StoredAttributesError(f"the stored attributes {reference.sha256} in {reference.table} are damaged")
    return packed


def read_attributes(dynamodb: Any, reference: StoredAttributes) -> Attributes:
    """The producer's attributes `reference` names, unpacked."""
    return unpack(read_packed(dynamodb, reference))
