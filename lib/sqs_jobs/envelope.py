"""The message contract: `{"job": "<type>", "id": "<entity id>"}`, IDs only, and optionally the tenant the job is
for (`"tenant"`), which a publisher sends on a standard queue as SQS's MessageGroupId (fair queues).

One parser serves the publisher (reject before sending) and the worker (dead-letter on receipt), so the two
sides can never disagree. The same rules, for publishers in other languages, are in docs/envelope.schema.json.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqs_jobs.errors import (
    EnvelopeFieldError,
    EnvelopeNotJSONError,
    EnvelopeNotObjectError,
    EnvelopeTooLargeError,
    UnknownJobError,
)
from sqs_jobs.visible import describe, first_hidden

if TYPE_CHECKING:  # batches are loaded by the envelopes that carry one (most carry none)
    from sqs_jobs.batches import BatchMember

# The ID-only rule: a body that needs more than this is carrying data the worker should re-read.
MAX_ENVELOPE_BYTES = 1024
# A batch member's field: `<32 hex digits>.<index>` (sqs_jobs.batches).
BATCH_FIELD = "batch"
MAX_ID_CHARS = 256
MAX_EXTRA_FIELDS = 8
MAX_EXTRA_STRING_CHARS = 128
RESERVED_FIELDS = ("job", "id", "key", "tenant", "batch")
# The tenant travels as SQS's MessageGroupId too, so it takes what SQS takes there: 1 to 128 alphanumeric or
# punctuation characters, that is ASCII 0x21-0x7E (SQS API Reference, SendMessage, MessageGroupId).
MAX_TENANT_CHARS = 128
_TENANT_CHARACTER = re.compile(r"[!-~]")

Scalar = str | int | float | bool

_FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


@dataclass(frozen=True)
class Envelope:
    """A parsed, valid job message."""

    job: str
    id: str
    # Optional idempotency key chosen by the publisher; otherwise the job's default ("<job>:<id>").
    key: str | None = None
    # A few small scalar fields, for what an ID alone can't say (a locale, a version).
    extra: Mapping[str, Scalar] = field(default_factory=dict)
    # Whose job it is (a customer, an account): on a standard queue also its MessageGroupId, so SQS's fair queues
    # keep one tenant's backlog from delaying the others'. Last, so positional construction stays as it was.
    tenant: str | None = None
    # The batch this job is a member of, and its index there (sqs_jobs.batches): set by JobPublisher.batch.
    batch: BatchMember | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"job": self.job, "id": self.id}
        if self.key is not None:
            body["key"] = self.key
        if self.tenant is not None:
            body["tenant"] = self.tenant
        if self.batch is not None:
            body[BATCH_FIELD] = self.batch.field
        body.update(self.extra)
        return body

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name, value in pairs:
        if name in seen:
            raise EnvelopeFieldError(f"field {name!r} appears twice; each field may appear once")
        seen[name] = value
    return seen


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _identifier(body: Mapping[str, Any], name: str, required: bool, max_chars: int = MAX_ID_CHARS) -> str | None:
    if name not in body:
        if required:
            raise EnvelopeFieldError(f'missing field {name!r}; an envelope is {{"job": <type>, "id": <id>}}')
        return None
    value = body[name]
    if not isinstance(value, str):
        hint = f'; send it as a string, e.g. "{value}"' if type(value) in (int, float) else ""
        raise EnvelopeFieldError(f"field {name!r} must be a string, got {_type_name(value)}{hint}")
    if not value.strip():
        raise EnvelopeFieldError(f"field {name!r} is empty; it must be a non-blank string")
    if len(value) > max_chars:
        raise EnvelopeFieldError(f"field {name!r} is {len(value)} characters; at most {max_chars} are accepted")
    _refuse_hidden(name, value)
    return value


def checked_identifier(name: str, value: object) -> str:
    """`value` as the envelope's `name` field must be (a non-blank string, at most MAX_ID_CHARS, no hidden
    characters), or EnvelopeFieldError saying why: what a reader of a job's state checks an ID or key with, so a
    None, a number or "" is refused, not read as a job never published."""
    checked = _identifier({name: value}, name, required=True)
    assert checked is not None
    return checked


def _tenant(body: Mapping[str, Any]) -> str | None:
    """The tenant: an identifier (so the errors and the hidden-character rule are the ID's) that SQS also takes as
    a MessageGroupId."""
    tenant = _identifier(body, "tenant", required=False, max_chars=MAX_TENANT_CHARS)
    if tenant is None:
        return None
    for position, char in enumerate(tenant):
        if not _TENANT_CHARACTER.fullmatch(char):
            raise EnvelopeFieldError(
                f"field 'tenant' contains {describe(char)} at position {position}; accepted are a-z, A-Z, 0-9 and "
                "ASCII punctuation (what SQS takes as a MessageGroupId)"
            )
    return tenant


def tenant_of(body: str) -> str | None:
    """The tenant `body` names by the envelope's rule, or None (no tenant, or not an envelope at all): for what
    sends a message on as itself and keeps its tenant's MessageGroupId. Never raises."""
    try:
        decoded = json.loads(body)
        return _tenant(decoded) if isinstance(decoded, dict) else None
    except (ValueError, RecursionError, EnvelopeFieldError):
        return None


def _refuse_hidden(name: str, value: str) -> None:
    """Controls, format characters (bidi overrides, zero-width), line separators and unpaired surrogates (from a
    lone "\\ud800" escape: not text, can't be sent on as UTF-8) have no place in an identifier: they hide or
    reorder text in every log, terminal and page that shows it (sqs_jobs.visible)."""
    found = first_hidden(value)
    if found is not None:
        position, char = found
        raise EnvelopeFieldError(
            f"field {name!r} contains {describe(char)} at position {position}; printable text only (no control, "
            "format or line-separator characters)"
        )


def _extra_fields(body: Mapping[str, Any]) -> dict[str, Scalar]:
    extra = {name: value for name, value in body.items() if name not in RESERVED_FIELDS}
    if len(extra) > MAX_EXTRA_FIELDS:
        raise EnvelopeFieldError(
            f"{len(extra)} extra fields; at most {MAX_EXTRA_FIELDS} small scalar fields besides "
            f"{', '.join(RESERVED_FIELDS)}"
        )
    for name, value in extra.items():
        if not _FIELD_NAME.fullmatch(name):
            raise EnvelopeFieldError(f"field name {name[:40]!r} is not accepted; names match {_FIELD_NAME.pattern}")
        if isinstance(value, bool | int):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise EnvelopeFieldError(f"field {name!r} must be a finite number")
            continue
        if isinstance(value, str):
            if len(value) > MAX_EXTRA_STRING_CHARS:
                raise EnvelopeFieldError(
                    f"field {name!r} must be a short printable string (at most {MAX_EXTRA_STRING_CHARS} characters)"
                )
            _refuse_hidden(name, value)
            continue
        raise EnvelopeFieldError(
            f"field {name!r} is {_type_name(value)}; extra fields must be a string, number or boolean "
            "(IDs only: put data in your database, not in the message)"
        )
    return extra


def parse_envelope(body: str | bytes, accepted_jobs: Collection[str]) -> Envelope:
    """Parse and check a message body; raise an EnvelopeError subclass naming what is wrong and what is accepted.

    `accepted_jobs` are the job types valid here: the whole catalog at publish time, one queue's jobs in a worker.
    """
    raw = body.encode("utf-8", errors="surrogatepass") if isinstance(body, str) else body
    if len(raw) > MAX_ENVELOPE_BYTES:
        raise EnvelopeTooLargeError(
            f"body is {len(raw)} bytes; at most {MAX_ENVELOPE_BYTES} are accepted "
            "(IDs only: the worker re-reads the data from your database)"
        )
    try:
        decoded = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise EnvelopeNotJSONError(
            f"body is not valid UTF-8 JSON ({exc.__class__.__name__}); send a JSON object like "
            '{"job": "<type>", "id": "<id>"}'
        ) from None
    if not isinstance(decoded, dict):
        raise EnvelopeNotObjectError(
            f'body is a JSON {_type_name(decoded)}; it must be an object like {{"job": "<type>", "id": "<id>"}}'
        )
    job = _identifier(decoded, "job", required=True)
    assert job is not None
    if job not in accepted_jobs:
        raise UnknownJobError(f"unknown job type {job[:64]!r}; accepted: {', '.join(sorted(accepted_jobs))}")
    entity_id = _identifier(decoded, "id", required=True)
    assert entity_id is not None
    key = _identifier(decoded, "key", required=False)
    tenant = _tenant(decoded)
    batch = None
    if BATCH_FIELD in decoded:
        from sqs_jobs.batches import parse_member_field

        batch = parse_member_field(decoded[BATCH_FIELD])
    return Envelope(job=job, id=entity_id, key=key, extra=_extra_fields(decoded), tenant=tenant, batch=batch)


def build_envelope(
    job: str,
    entity_id: str,
    accepted_jobs: Collection[str],
    key: str | None = None,
    extra: Mapping[str, Scalar] | None = None,
    tenant: str | None = None,
    batch: BatchMember | None = None,
) -> Envelope:
    """Build an envelope for publishing, checked by exactly the rules a worker applies on receipt."""
    clashing = sorted(set(extra or {}) & set(RESERVED_FIELDS))
    if clashing:
        raise EnvelopeFieldError(f"extra fields may not be named {', '.join(clashing)}; those are reserved")
    body: dict[str, Any] = {"job": job, "id": entity_id, **(extra or {})}
    if key is not None:
        body["key"] = key
    if tenant is not None:
        body["tenant"] = tenant
    if batch is not None:
        from sqs_jobs.batches import BatchMember

        if not isinstance(batch, BatchMember):
            raise EnvelopeFieldError(
                f"batch is a {type(batch).__name__}; accepted: a BatchMember, e.g. "
                "sqs_jobs.batches.parse_member_field('<batch ID>.<index>')"
            )
        body[BATCH_FIELD] = batch.field
    try:
        encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise EnvelopeFieldError(f"envelope is not JSON-serialisable ({exc}); use strings, numbers, booleans") from None
    # Round-trip through the parser so publish-time and consume-time checks are one and the same.
    return parse_envelope(encoded, accepted_jobs)
