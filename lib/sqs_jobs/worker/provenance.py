"""Who sent a message, and so which of its attributes the runtime may believe.

Any service allowed to send to a queue can set any message attribute, `jobs.*` included. What it can't set is
SQS's `SenderId` system attribute: the IAM identity that sent the message (a user's ID, or `<role ID>:<session>`
for a role). The runtime's own bookkeeping (`jobs.prior_attempts` on a copy it handed back, the evidence on a
dead letter) therefore counts only on messages sent by the worker's own role. On every other message each
attribute, whatever its name, is the producer's data: kept byte for byte through dead-lettering and redrive,
never read as bookkeeping and never shown as evidence.

The runtime's own messages carry the producer's attributes packed in one attribute, `jobs.original_attributes`, so
a producer's names can never mix with the runtime's and SQS's limit of 10 attributes per message always leaves
room for the evidence. The packing is a Binary attribute: each attribute's name, data type and raw value bytes,
length-prefixed, so it is exactly `PACKING_OVERHEAD_BYTES + PACKING_ATTRIBUTE_BYTES x n` bytes larger than the
same attributes sent one by one, as SQS counts them (`packed_size_bound`). Messages written before it carry a
String attribute holding JSON, binary values as base64; `unpack` reads both.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Collection, Mapping
from typing import Any, ClassVar, Final

RUNTIME_PREFIX = "jobs."
ORIGINAL_ATTRIBUTES = "jobs.original_attributes"
# On a copy the runtime handed back unrun: the runs its ancestors used, so the copy's fresh receive count
# doesn't reset the attempt count.
PRIOR_ATTEMPTS = "jobs.prior_attempts"
# On a copy handed back because an open circuit breaker refused a call it needed: when that first happened (epoch
# seconds), so the time it may be held without spending attempts is bounded across copies.
HELD_SINCE = "jobs.held_since"
# On every fresh copy the runtime sends: when the message it copies was first sent (epoch ms, the original's
# SentTimestamp), so a copy's own SentTimestamp never moves a unique or debounce window (worker/uniqueness.py).
SENT_AT = "jobs.sent_at"
# On every fresh copy the runtime sends: the SQS message ID of the message it copies (the first one's, through
# copies of copies), so the copy is that message to the key's record (docs/key-life.md, "Ending"). On every job
# the runtime publishes (a follow-up, a batch's callback, a chain's next step): its envelope's digest, so a second
# send of it (a publish retried after a fault) is the same message too, never a second life of its key.
ORIGINAL_MESSAGE = "jobs.original_message"


def published_identity(body: str) -> dict[str, dict[str, str]]:
    """The attribute a job the runtime publishes carries: the same for every send of the same envelope."""
    import hashlib

    digest = hashlib.sha256(body.encode()).hexdigest()[:32]
    return {ORIGINAL_MESSAGE: {"DataType": "String", "StringValue": f"published:{digest}"}}


# Where the producer's packed attributes went when they could not fit a dead letter (sqs_jobs.worker
# attribute_store.py): a reference, in their place.
STORED_ATTRIBUTES = "jobs.original_attributes_stored"
# SQS's limit of message attributes per message.
SQS_MAX_ATTRIBUTES = 10

# The binary packing: a version byte, then per attribute the lengths of its name, data type and value (4 bytes
# each, big-endian) and those three as bytes (UTF-8; a binary value raw).
_PACKING_VERSION = b"\x01"
_LENGTHS = struct.Struct(">III")
PACKING_ATTRIBUTE_BYTES = _LENGTHS.size
PACKING_OVERHEAD_BYTES = len(ORIGINAL_ATTRIBUTES) + len("Binary") + len(_PACKING_VERSION)

# A message attribute as SendMessage takes it: {"DataType": ..., "StringValue": str} or {..., "BinaryValue": bytes}.
Attributes = dict[str, dict[str, Any]]


def sender_principal(sender_id: str | None) -> str:
    """The IAM principal's unique ID in a SenderId: a role's ID without its session, or a user's ID."""
    return (sender_id or "").split(":", 1)[0].strip()


class Provenance:
    """Which senders are the runtime: the unique IDs of the worker roles (`AROA...`)."""

    # Plain classes, this and MessageAttributes: a dataclass's generated methods cost every cold start 0.4 ms.
    __slots__ = ("runtime_principals",)

    def __init__(self, runtime_principals: frozenset[str]) -> None:
        self.runtime_principals: Final = runtime_principals

    @classmethod
    def of(cls, principals: Collection[str | None]) -> Provenance:
        return cls(frozenset(principal for principal in principals if principal))

    def sent_by_runtime(self, sender_id: str | None) -> bool:
        principal = sender_principal(sender_id)
        return bool(principal) and principal in self.runtime_principals


def from_event(event_attributes: Mapping[str, Any]) -> Attributes:
    """A Lambda SQS record's `messageAttributes` (camelCase, binary as base64 text) in SendMessage's shape."""
    converted: Attributes = {}
    for name, attribute in event_attributes.items():
        data_type = str(attribute.get("dataType") or "String")
        if data_type.startswith("Binary"):
            raw = attribute.get("binaryValue") or ""
            value = base64.b64decode(raw) if isinstance(raw, str) else bytes(raw)
            converted[name] = {"DataType": data_type, "BinaryValue": value}
        else:
            converted[name] = {"DataType": data_type, "StringValue": str(attribute.get("stringValue") or "")}
    return converted


def from_received(message_attributes: Mapping[str, Any]) -> Attributes:
    """ReceiveMessage's `MessageAttributes` reduced to what SendMessage accepts."""
    shaped: Attributes = {}
    for name, attribute in message_attributes.items():
        value = {"DataType": attribute.get("DataType", "String")}
        for key in ("StringValue", "BinaryValue"):
            if attribute.get(key) is not None:
                value[key] = attribute[key]
        shaped[name] = value
    return shaped


def value_bytes(attribute: Mapping[str, Any]) -> bytes:
    """An attribute's value as SQS counts it: a string's UTF-8 bytes, a binary value's raw bytes."""
    value = attribute.get("BinaryValue")
    if value is not None:
        return bytes(value)
    return str(attribute.get("StringValue") or "").encode("utf-8")


def attribute_size(name: str, attribute: Mapping[str, Any]) -> int:
    """One attribute's share of a message's size, as SQS counts it: its name, data type and value."""
    return (
        len(name.encode("utf-8"))
        + len(str(attribute.get("DataType") or "").encode("utf-8"))
        + len(value_bytes(attribute))
    )


def attributes_size(attributes: Attributes) -> int:
    return sum(attribute_size(name, attribute) for name, attribute in attributes.items())


def packed_size_bound(attributes: Attributes) -> int:
    """The size of `jobs.original_attributes` packing `attributes`, as SQS counts it: their own size plus a fixed
    overhead and a few bytes per attribute (exact, not an estimate)."""
    if not attributes:
        return 0
    return attributes_size(attributes) + PACKING_OVERHEAD_BYTES + PACKING_ATTRIBUTE_BYTES * len(attributes)


def pack(attributes: Attributes) -> bytes:
    """The producer's attributes as one binary value (see the module's doc)."""
    parts = [_PACKING_VERSION]
    for name, attribute in sorted(attributes.items()):
        encoded = (name.encode("utf-8"), str(attribute.get("DataType") or "String").encode("utf-8"))
        value = value_bytes(attribute)
        parts += [_LENGTHS.pack(len(encoded[0]), len(encoded[1]), len(value)), *encoded, value]
    return b"".join(parts)


def portable(attributes: Attributes) -> dict[str, dict[str, str]]:
    """Attributes as JSON-ready values (binary as base64 text), for output and archives."""
    shown: dict[str, dict[str, str]] = {}
    for name, attribute in sorted(attributes.items()):
        value = attribute.get("BinaryValue")
        if value is not None:
            shown[name] = {"DataType": attribute["DataType"], "BinaryValue": base64.b64encode(value).decode("ascii")}
        else:
            shown[name] = {"DataType": attribute["DataType"], "StringValue": str(attribute.get("StringValue") or "")}
    return shown


class PackedAttributesError(ValueError):
    """A `jobs.original_attributes` value that is not what the runtime packs."""


def _unpack_binary(packed: bytes) -> Attributes:
    if packed[:1] != _PACKING_VERSION:
        raise PackedAttributesError(f"{ORIGINAL_ATTRIBUTES}: unknown packing version {packed[:1]!r}")
    restored: Attributes = {}
    offset = 1
    try:
        while offset < len(packed):
            name_length, type_length, value_length = _LENGTHS.unpack_from(packed, offset)
            offset += _LENGTHS.size
            end = offset + name_length + type_length + value_length
            if end > len(packed):
                raise PackedAttributesError(f"{ORIGINAL_ATTRIBUTES} is cut short")
            name = packed[offset : offset + name_length].decode("utf-8")
            data_type = packed[offset + name_length : offset + name_length + type_length].decode("utf-8")
            value = packed[offset + name_length + type_length : end]
            if data_type.startswith("Binary"):
                restored[name] = {"DataType": data_type, "BinaryValue": value}
            else:
                restored[name] = {"DataType": data_type, "StringValue": value.decode("utf-8")}
            offset = end
    except (struct.error, UnicodeDecodeError) as error:
        raise PackedAttributesError(f"{ORIGINAL_ATTRIBUTES} is not the runtime's packing: {error}") from None
    return restored


def _unpack_json(packed: str) -> Attributes:
    """The packing of runtimes before the binary one: JSON, binary values as base64 text."""
    try:
        decoded = json.loads(packed)
        if not isinstance(decoded, dict):
            raise PackedAttributesError("not a JSON object")
        restored: Attributes = {}
        for name, attribute in decoded.items():
            value = dict(attribute)
            if isinstance(value.get("BinaryValue"), str):
                value["BinaryValue"] = base64.b64decode(value["BinaryValue"], validate=True)
            restored[str(name)] = value
        return restored
    except (ValueError, TypeError, AttributeError, binascii.Error) as error:
        raise PackedAttributesError(f"{ORIGINAL_ATTRIBUTES} is not the runtime's packing: {error}") from None


def unpack(packed: bytes | str) -> Attributes:
    """The producer's attributes from `jobs.original_attributes`: the binary packing, or the older JSON."""
    return _unpack_binary(bytes(packed)) if isinstance(packed, bytes | bytearray) else _unpack_json(packed)


def packed_attribute(attributes: Attributes) -> Attributes:
    """`jobs.original_attributes` packing `attributes`, or nothing when there are none."""
    if not attributes:
        return {}
    return {ORIGINAL_ATTRIBUTES: {"DataType": "Binary", "BinaryValue": pack(attributes)}}


class MessageAttributes:
    """A message's attributes split by who set them: `bookkeeping` (the runtime's `jobs.*` string values, only on
    a message the runtime sent) and `producer` (everything else, in SendMessage's shape). Equal by value."""

    __slots__ = ("bookkeeping", "producer")
    # Unhashable, as its dicts are: Python sets __hash__ None in a class that defines __eq__ (typeshed's own spelling).
    __hash__: ClassVar[None]  # type: ignore[assignment]

    def __init__(self, bookkeeping: dict[str, str], producer: Attributes) -> None:
        self.bookkeeping: Final = bookkeeping
        self.producer: Final = producer

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageAttributes):
            return NotImplemented
        return self.bookkeeping == other.bookkeeping and self.producer == other.producer

    def __repr__(self) -> str:
        return f"MessageAttributes(bookkeeping={self.bookkeeping!r}, producer={self.producer!r})"

    @classmethod
    def split(cls, attributes: Attributes, sent_by_runtime: bool) -> MessageAttributes:
        if not sent_by_runtime:
            return cls(bookkeeping={}, producer=dict(attributes))
        bookkeeping = {
            name: str(value.get("StringValue", ""))
            for name, value in attributes.items()
            if name.startswith(RUNTIME_PREFIX) and name != ORIGINAL_ATTRIBUTES
        }
        producer = {name: value for name, value in attributes.items() if not name.startswith(RUNTIME_PREFIX)}
        original = attributes.get(ORIGINAL_ATTRIBUTES, {})
        packed = original.get("BinaryValue", original.get("StringValue"))
        if packed:
            try:
                producer.update(unpack(packed))
            except PackedAttributesError:
                # Our own packing, damaged: keep it as it came rather than lose it.
                producer[ORIGINAL_ATTRIBUTES] = attributes[ORIGINAL_ATTRIBUTES]
        return cls(bookkeeping=bookkeeping, producer=producer)
