"""The article's first example: send the order confirmation mail.

The message carries only the order ID; the job re-reads the order, so a changed address or a cancelled order is
seen as it is now. A missing order can never succeed: it is a permanent failure and goes straight to the DLQ.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from functions.jobs.records import load_item, text_of
from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import PermanentError, RecordNotFoundError
from sqs_jobs.worker.jobs import JobContext


class OrderNotFoundError(RecordNotFoundError):
    """No order with this ID in the orders table."""


class OrderDataError(PermanentError):
    """The order exists but lacks what a confirmation needs (an e-mail address)."""


def _total(item: dict[str, Any]) -> str:
    raw = item.get("total", {}).get("N")
    currency = text_of(item, "currency") or ""
    try:
        return f"{Decimal(raw):.2f} {currency}".strip() if raw is not None else ""
    except InvalidOperation:
        return ""


def run(envelope: Envelope, context: JobContext) -> dict[str, str]:
    order = load_item(context, "orders_table", "order_id", envelope.id, OrderNotFoundError)
    recipient = text_of(order, "email")
    if recipient is None:
        raise OrderDataError(f"order {envelope.id!r} has no e-mail address to confirm to")
    name = text_of(order, "customer_name") or "customer"
    total = _total(order)
    body = f"Hello {name},\n\nthank you for your order {envelope.id}."
    if total:
        body += f" Total: {total}."
    body += "\n"
    sent = context.client("ses").send_email(
        Source=context.resource("mail_sender"),
        Destination={"ToAddresses": [recipient]},
        Message={
            "Subject": {"Data": f"Your order {envelope.id} is confirmed", "Charset": "UTF-8"},
            "Body": {"Text": {"Data": body, "Charset": "UTF-8"}},
        },
    )
    context.logger.info("confirmation sent", extra={"ses_message_id": sent["MessageId"]})
    return {"ses_message_id": sent["MessageId"]}
