"""A new team's first mail job, as the soak runs it: it re-reads an order, mails a receipt and returns whatever its
code happens to return. The issue's examples are among them: `{"sent_at": datetime.now(UTC)}`, a result too big
for a DynamoDB item, a plain string (the SES message ID), an object with no JSON form.

Which result a run returns is chosen by the order's ID (`result_kind`), so the soak knows what each job returned.
The runtime keeps each by one rule (sqs_jobs.worker.results): converted to JSON, or dropped with a warning and
a `ResultDropped` metric; whichever, the run is completed once and its mail is never sent again.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Any

from functions.jobs.order_confirmation import OrderDataError, OrderNotFoundError
from functions.jobs.records import load_item, text_of
from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext

# What a run returns, by kind; those the runtime can't keep are DROPPED (no JSON form, or over 64 KiB of JSON).
RESULT_KINDS = ("datetime", "object", "too_large", "nan", "text", "list", "none")
DROPPED = frozenset({"object", "too_large", "nan"})
# About 90 KB of UTF-8 (3 bytes a character): over the 64 KiB the runtime keeps, under DynamoDB's 400 KB item.
_LARGE_CHARACTERS = 30_000


class Receipt:
    """A plain object, as a team's code returns by accident: it has no JSON form."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id


def result_kind(entity_id: str) -> str:
    """The kind of result the run for this ID returns (the same for the same ID, wherever it is asked)."""
    return RESULT_KINDS[zlib.crc32(entity_id.encode()) % len(RESULT_KINDS)]


def subject(job: str, entity_id: str) -> str:
    return f"Receipt {job} {entity_id}"


def result(kind: str, message_id: str) -> Any:
    """What a run of `kind` returns, naming the mail it sent."""
    if kind == "datetime":
        return {"message_id": message_id, "sent_at": datetime.now(UTC)}
    if kind == "object":
        return {"message_id": message_id, "receipt": Receipt(message_id)}
    if kind == "too_large":
        return {"message_id": message_id, "transcript": "送" * _LARGE_CHARACTERS}
    if kind == "nan":
        return {"message_id": message_id, "cost": float("nan")}
    if kind == "text":
        return message_id
    if kind == "list":
        return [message_id]
    return None


def run(envelope: Envelope, context: JobContext) -> Any:
    return result(result_kind(envelope.id), mail_receipt(envelope, context, receipt_recipient(envelope, context)))


def receipt_recipient(envelope: Envelope, context: Any) -> str:
    """The order's e-mail address (the soak's receipt jobs all mail the order they name)."""
    order = load_item(context, "orders_table", "order_id", envelope.id, OrderNotFoundError)
    recipient = text_of(order, "email")
    if recipient is None:
        raise OrderDataError(f"order {envelope.id!r} has no e-mail address to send a receipt to")
    return recipient


def mail_receipt(envelope: Envelope, context: Any, recipient: str) -> str:
    """Mail the receipt, its subject naming the job and ID (what the soak counts mails by); the SES message ID."""
    sent = context.client("ses").send_email(
        Source=context.resource("mail_sender"),
        Destination={"ToAddresses": [recipient]},
        Message={
            "Subject": {"Data": subject(envelope.job, envelope.id), "Charset": "UTF-8"},
            "Body": {"Text": {"Data": f"Your receipt for order {envelope.id}.\n", "Charset": "UTF-8"}},
        },
    )
    return str(sent["MessageId"])
