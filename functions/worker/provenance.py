"""Who sent a message, and so which of its attributes the runtime may believe.

Any service allowed to send to a queue can set any message attribute, `jobs.*` included. What it can't set is
SQS's `SenderId` system attribute: the IAM identity that sent the message (a user's ID, or `<role ID>:<session>`
for a role). The runtime's own bookkeeping (`jobs.prior_attempts` on a copy it handed back, the evidence on a
dead letter) therefore counts only on messages sent by the worker's own role. On every other message each
attribute, whatever its name, is the producer's data: kept byte for byte through dead-lettering and redrive,
never read as bookkeeping and never shown as evidence.

The runtime's own messages carry the producer's attributes packed in one attribute, `jobs.original_attributes`
(JSON; binary values as base64 text), so a producer's names can never mix with the runtime's and SQS's limit of
10 attributes per message always leaves room for the evidence.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

RUNTIME_PREFIX = "jobs."
ORIGINAL_ATTRIBUTES = "jobs.original_attributes"
# On a copy the runtime handed back unrun: the runs its ancestors used, so the copy's fresh receive count
# doesn't reset the attempt count.
PRIOR_ATTEMPTS = "jobs.prior_attempts"
# On a copy handed back because an open circuit breaker refused a call it needed: when that first happened (epoch
# seconds), so the time it may be held without spending attempts is bounded across copies.
HELD_SINCE = "jobs.held_since"

# A message attribute as SendMessage takes it: {"DataType": ..., "StringValue": str} or {..., "BinaryValue": bytes}.
Attributes = dict[str, dict[str, Any]]


def sender_principal(sender_id: str | None) -> str:
    """The IAM principal's unique ID in a SenderId: a role's ID without its session, or a user's ID."""
    return (sender_id or "").split(":", 1)[0].strip()


@dataclass(frozen=True)
class Provenance:
    """Which senders are the runtime: the unique IDs of the worker roles (`AROA...`)."""

    runtime_principals: frozenset[str]

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


def pack(attributes: Attributes) -> str:
    """The producer's attributes as one JSON text (binary values as base64)."""
    portable = {}
    for name, attribute in attributes.items():
        value = dict(attribute)
        if isinstance(value.get("BinaryValue"), bytes | bytearray):
            value["BinaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
        portable[name] = value
    return json.dumps(portable, separators=(",", ":"), sort_keys=True)


class PackedAttributesError(ValueError):
    """A `jobs.original_attributes` value that is not what the runtime packs."""


def unpack(packed: str) -> Attributes:
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


@dataclass(frozen=True)
class MessageAttributes:
    """A message's attributes split by who set them: `bookkeeping` (the runtime's `jobs.*` string values, only on
    a message the runtime sent) and `producer` (everything else, in SendMessage's shape)."""

    bookkeeping: dict[str, str]
    producer: Attributes

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
        packed = attributes.get(ORIGINAL_ATTRIBUTES, {}).get("StringValue")
        if packed:
            try:
                producer.update(unpack(packed))
            except PackedAttributesError:
                # Our own packing, damaged: keep it as it came rather than lose it.
                producer[ORIGINAL_ATTRIBUTES] = attributes[ORIGINAL_ATTRIBUTES]
        return cls(bookkeeping=bookkeeping, producer=producer)

    def packed_producer(self) -> Attributes:
        """The producer's attributes as the runtime's own messages carry them: one packed attribute, or none."""
        if not self.producer:
            return {}
        return {ORIGINAL_ATTRIBUTES: {"DataType": "String", "StringValue": pack(self.producer)}}
