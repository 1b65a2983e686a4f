"""Batches: jobs that belong together, and the callbacks that follow them (docs/workflows.md).

A batch is two items of the idempotency table, written once by the publisher: `batch#<batch ID>` (its size,
callbacks and description; the workers count in it) and `batch#<batch ID>#members` (each member's job and ID, for
`jobctl batch show`, and each member's digest, which the worker compares before counting; kept apart so the
counting item stays a few KB: an UpdateItem is billed by the item's size).
The workers count: each member's envelope carries `batch` =
`<batch ID>.<member index>`, never the callbacks. A member that ends adds its index to the number set `succeeded`
or `dead` (one UpdateItem, idempotent: a set holds an index once); the update that completes a set publishes its
callback with a key named by the batch, so a second publish is answered as a duplicate, and then marks it
published.

This module names what the publisher, the worker and jobctl share: the item's attributes, the member field's
format, the limits. It imports nothing of the worker's.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqs_jobs.envelope import BATCH_FIELD
from sqs_jobs.errors import EnvelopeFieldError, JobError

if TYPE_CHECKING:
    from sqs_jobs.envelope import Envelope

# Members of one batch: their job:id list and index sets stay far below DynamoDB's 400 KB per item.
MAX_BATCH_MEMBERS = 1000
MAX_BATCH_ITEM_BYTES = 350 * 1024
MAX_DESCRIPTION_CHARS = 256
BATCH_ITEM_PREFIX = "batch#"
_MEMBER_FIELD = re.compile(r"^([0-9a-f]{32})\.(0|[1-9][0-9]{0,2})$")
_BATCH_ID = re.compile(r"^[0-9a-f]{32}$")

# The item's attributes.
SIZE = "size"
MEMBERS = "members"
# Beside MEMBERS: each member's digest (member_digest), MEMBER_DIGEST_BYTES each in index order, one binary value.
# Absent from batches published before it: their members are known by `<job>:<id>` alone.
MEMBER_DIGESTS = "member_digests"
MEMBER_DIGEST_BYTES = 16
DESCRIPTION = "description"
ON_SUCCESS = "on_success"
ON_COMPLETE = "on_complete"
SUCCEEDED = "succeeded"
DEAD = "dead"
CREATED_AT = "created_at"
LAST_ENDED_AT = "last_ended_at"
# A chain's step (sqs_jobs.chains): the next step's whole envelope (its key, its own `batch` field) that
# on_success publishes instead of `<job>:<id>` with the batch's key, and `<chain ID>.<step>`.
ON_SUCCESS_ENVELOPE = "on_success_envelope"
CHAIN = "chain"
# When each set first completed: all succeeded, all ended (succeeded or dead-lettered).
SUCCEEDED_AT = "succeeded_at"
COMPLETED_AT = "completed_at"
# When each callback was published (absent: not yet, or none).
SUCCESS_PUBLISHED_AT = "success_published_at"
COMPLETE_PUBLISHED_AT = "complete_published_at"
# The table's TTL attribute (Powertools' `expiration`, epoch seconds): the item goes once it can no longer matter.
EXPIRATION = "expiration"
# Until a member may still end: the longest SQS keeps a message (14 days) in its queue and again in its DLQ.
# Each member's end moves it to its DLQ's retention after that end (the worker knows its queue's).
OPEN_BATCH_TTL_S = 28 * 24 * 3600

# Open batches are listed in the table's sparse index of things in flight (`jobs-by-life`): `life` =
# `batches#open#<shard>` while any member is open, `life_at` its last member's end (or its creation), so the
# heartbeat finds stalled batches with a Query, never a scan. Removed once every member has ended.
OPEN_LIFE_PREFIX = "batches#open#"
OPEN_LIFE_SHARDS = 4

# A batch is stalled when no member has ended for this long while some are still open: the heartbeat counts them
# (StalledBatches) and the stack's alarm pages on one.
STALLED_AFTER_S = 3600

SUCCESS = "success"
COMPLETE = "complete"
CALLBACK_KINDS = (SUCCESS, COMPLETE)
# Each kind's "published at" attribute.
PUBLISHED_AT = {SUCCESS: SUCCESS_PUBLISHED_AT, COMPLETE: COMPLETE_PUBLISHED_AT}

# Which batch a callback (job, id) was last published for (callback_pointers): its batch ID and kinds.
CALLBACK_POINTER_PREFIX = f"{BATCH_ITEM_PREFIX}callback#"
POINTED_BATCH = "batch"
POINTED_KINDS = "kinds"


class BatchError(JobError):
    """Base of batch errors."""


class BatchDefinitionError(BatchError, ValueError):
    """A batch that can't be published: no members, too many, a callback that is not a (job, id) pair, a
    description too long, or a definition over the item's limit."""


class CallbackNotPublishableError(BatchDefinitionError):
    """A callback whose job a member's job does not list in its `publishes` (JobSpec): its worker may not send
    it."""


class BatchesNotConfiguredError(BatchError):
    """A batch, on a publisher without the stack's batch table (JobPublisher.from_stack, or `batches=`)."""


class BatchMemberError(BatchError):
    """A member's `batch` field names a batch or member index that does not hold this job: forged, or the batch
    has expired. The worker dead-letters it with this as its evidence; no batch is counted."""


@dataclass(frozen=True)
class BatchMember:
    """What a member's envelope says of its batch."""

    batch_id: str
    index: int

    @property
    def field(self) -> str:
        return f"{self.batch_id}.{self.index}"


def new_batch_id() -> str:
    return uuid.uuid4().hex


def check_batch_id(batch_id: str) -> str:
    if not isinstance(batch_id, str) or not _BATCH_ID.fullmatch(batch_id):
        raise BatchDefinitionError(f"batch ID {str(batch_id)[:64]!r} is not one; a batch ID is 32 hex digits")
    return batch_id


def parse_member_field(value: Any) -> BatchMember:
    """The envelope's `batch` field; EnvelopeFieldError (a permanent failure) for anything but
    `<batch ID>.<index>` with an index below MAX_BATCH_MEMBERS."""
    if not isinstance(value, str):
        raise EnvelopeFieldError(f"field 'batch' must be a string, got {type(value).__name__}")
    found = _MEMBER_FIELD.fullmatch(value)
    if found is None or int(found.group(2)) >= MAX_BATCH_MEMBERS:
        raise EnvelopeFieldError(
            f"field 'batch' is {value[:64]!r}; accepted is '<batch ID: 32 hex digits>.<member index 0-"
            f"{MAX_BATCH_MEMBERS - 1}>', as JobPublisher.batch writes it"
        )
    return BatchMember(found.group(1), int(found.group(2)))


def member_indices(item: Mapping[str, Any], name: str) -> frozenset[int]:
    """The member indices a counting item's number set `name` (SUCCEEDED or DEAD) holds, in DynamoDB's typed JSON."""
    return frozenset(int(value) for value in item.get(name, {}).get("NS", []))


def batch_item_id(batch_id: str) -> str:
    return f"{BATCH_ITEM_PREFIX}{batch_id}"


def member_name(job: str, entity_id: str) -> str:
    """How the item lists a member: `<job>:<id>` (a job name has no `:`, so it splits at the first)."""
    return f"{job}:{entity_id}"


def member_digest(envelope: Envelope) -> bytes:
    """What identifies a member: its envelope but its `batch` field (job, id, key, tenant, extra fields), which is
    all a job's idempotency key is computed from, so the same digest means the same key. The first 16 bytes of the
    SHA-256 of its JSON with sorted keys: a producer who copies a member's field onto another envelope would need a
    second preimage of 128 bits."""
    body = {name: value for name, value in envelope.to_dict().items() if name != BATCH_FIELD}
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", errors="surrogatepass")).digest()[:MEMBER_DIGEST_BYTES]


def listed_digest(item: Mapping[str, Any], index: int) -> bytes | None:
    """The digest a members' item (DynamoDB's typed JSON) lists at `index`; None for a batch published before
    digests (or an index it has none for)."""
    digests = item.get(MEMBER_DIGESTS, {}).get("B")
    if not isinstance(digests, bytes | bytearray):
        return None
    start = index * MEMBER_DIGEST_BYTES
    found = bytes(digests[start : start + MEMBER_DIGEST_BYTES])
    return found if len(found) == MEMBER_DIGEST_BYTES else None


def members_item_id(batch_id: str) -> str:
    return f"{BATCH_ITEM_PREFIX}{batch_id}#members"


def open_life(batch_id: str) -> str:
    return f"{OPEN_LIFE_PREFIX}{zlib.crc32(batch_id.encode()) % OPEN_LIFE_SHARDS}"


def open_lives() -> tuple[str, ...]:
    return tuple(f"{OPEN_LIFE_PREFIX}{shard}" for shard in range(OPEN_LIFE_SHARDS))


def callback_key(batch_id: str, kind: str) -> str:
    """The idempotency key a callback is published with: one per batch and kind, so a second publish (a recount
    after a crash, two workers completing at once) is answered as a duplicate."""
    return f"batch-{batch_id}-{kind}"


def callback_pointer_id(job: str, entity_id: str) -> str:
    """The item that says which batch last named `<job>:<id>` as a callback (callback_pointers): hashed, since an ID
    may be long, and under `batch#`, whose items alone the publisher may write."""
    digest = hashlib.sha256(member_name(job, entity_id).encode("utf-8", errors="surrogatepass")).hexdigest()
    return f"{CALLBACK_POINTER_PREFIX}{digest}"


def callback_pointers(
    batch_id: str, callbacks: Mapping[str, tuple[str, str] | None], now_s: int
) -> list[dict[str, Any]]:
    """One item per distinct callback (job, id) of a batch, written by its publisher beside the batch's own: the
    batch ID and the kinds it is the callback of. A callback is published under the batch's key (callback_key), so
    `jobctl job show JOB ID` finds its run through this item. A later batch naming the same callback takes it over;
    it expires with the batch."""
    kinds: dict[tuple[str, str], list[str]] = {}
    for kind in CALLBACK_KINDS:
        callback = callbacks.get(kind)
        if callback is not None:
            kinds.setdefault(callback, []).append(kind)
    return [
        {
            "id": {"S": callback_pointer_id(*callback)},
            POINTED_BATCH: {"S": batch_id},
            POINTED_KINDS: {"SS": named},
            EXPIRATION: {"N": str(now_s + OPEN_BATCH_TTL_S)},
        }
        for callback, named in kinds.items()
    ]


def callback_of(value: object, name: str) -> tuple[str, str] | None:
    if value is None:
        return None
    if isinstance(value, tuple | list) and len(value) == 2 and all(isinstance(part, str) for part in value):
        return str(value[0]), str(value[1])
    raise BatchDefinitionError(f"{name} is {str(value)[:64]!r}; accepted: a (job, id) pair of strings, or None")


def definition_items(
    batch_id: str,
    members: Sequence[tuple[str, str]],
    callbacks: Mapping[str, tuple[str, str] | None],
    description: str,
    now_s: int,
    extra: Mapping[str, Any] | None = None,
    digests: Sequence[bytes] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch's two items as the publisher writes them (DynamoDB's typed JSON): the counting item, and its
    members' (with `digests`, each member's member_digest in order)."""
    if not members:
        raise BatchDefinitionError("a batch needs at least one member")
    if len(members) > MAX_BATCH_MEMBERS:
        raise BatchDefinitionError(
            f"a batch of {len(members)} members; at most {MAX_BATCH_MEMBERS} are accepted: split the work into "
            "batches, each with its own callback"
        )
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise BatchDefinitionError(f"description is {len(description)} characters; at most {MAX_DESCRIPTION_CHARS}")
    listed: dict[str, Any] = {
        "id": {"S": members_item_id(batch_id)},
        MEMBERS: {"L": [{"S": member_name(job, entity_id)} for job, entity_id in members]},
        EXPIRATION: {"N": str(now_s + OPEN_BATCH_TTL_S)},
    }
    item: dict[str, Any] = {
        "id": {"S": batch_item_id(batch_id)},
        SIZE: {"N": str(len(members))},
        # 0: not yet; the update that marks a callback published sets it only from 0.
        SUCCESS_PUBLISHED_AT: {"N": "0"},
        COMPLETE_PUBLISHED_AT: {"N": "0"},
        CREATED_AT: {"N": str(now_s)},
        EXPIRATION: {"N": str(now_s + OPEN_BATCH_TTL_S)},
        # sqs_jobs.worker.names's LIFE and LIFE_AT (this package imports nothing of the worker's).
        "life": {"S": open_life(batch_id)},
        "life_at": {"N": str(now_s)},
    }
    if description:
        item[DESCRIPTION] = {"S": description}
    for kind, attribute in ((SUCCESS, ON_SUCCESS), (COMPLETE, ON_COMPLETE)):
        callback = callbacks.get(kind)
        if callback is not None:
            item[attribute] = {"S": member_name(*callback)}
    item.update(extra or {})
    size = len(json.dumps(listed, ensure_ascii=False).encode("utf-8", errors="surrogatepass"))
    if digests:
        if len(digests) != len(members) or any(len(digest) != MEMBER_DIGEST_BYTES for digest in digests):
            raise BatchDefinitionError(f"a batch needs one {MEMBER_DIGEST_BYTES}-byte digest per member")
        listed[MEMBER_DIGESTS] = {"B": b"".join(digests)}
        size += len(MEMBER_DIGESTS) + MEMBER_DIGEST_BYTES * len(digests)
    if size > MAX_BATCH_ITEM_BYTES:
        raise BatchDefinitionError(
            f"the batch's members are about {size} bytes; at most {MAX_BATCH_ITEM_BYTES} fit their item: fewer "
            "members, or shorter IDs"
        )
    return item, listed
