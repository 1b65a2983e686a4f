"""Mail the customer one update of an order, in the order the updates happened (the FIFO example).

The message names the order (`id`) and the update (the publisher's `key`, `<order>-u<n>`): the queue is FIFO with
one message group per order (JobPublisher's default group is the ID), so an order's updates are mailed in the
order they were published, and each update is its own idempotency key (`order_update_mail:<order>-u<n>`), so each
is mailed once. The job re-reads the order, as every job does: the mail says what the order is now.

    publisher.publish("order_update_mail", "1001", key="1001-u3")
"""

from __future__ import annotations

from functions.jobs.order_confirmation import OrderDataError, OrderNotFoundError
from functions.jobs.records import load_item, text_of
from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import PermanentError
from sqs_jobs.worker.jobs import JobContext


class UpdateKeyError(PermanentError):
    """The message names no update of its order: the publisher's key is missing or is not `<order>-<update>`."""


def idempotency_key(envelope: Envelope) -> str:
    """Only used when the publisher sent no key: an update without a name would share the order's key, and every
    later update of the order would be skipped as its duplicate. So there is none (the runtime dead-letters it)."""
    raise UpdateKeyError(
        f"order_update_mail for order {envelope.id!r} has no key naming the update; publish it with "
        f"key='{envelope.id}-u<n>'"
    )


def update_of(envelope: Envelope) -> str:
    """The update's name: the publisher's key, which must start with the order's ID (`<order>-...`), so two orders'
    updates can never share a key."""
    update = envelope.key or ""
    if not update.startswith(f"{envelope.id}-") or update == f"{envelope.id}-":
        raise UpdateKeyError(
            f"key {update!r} does not name an update of order {envelope.id!r}; expected '{envelope.id}-<update>', "
            f"e.g. '{envelope.id}-u1'"
        )
    return update


def subject(order_id: str, update: str) -> str:
    return f"Your order {order_id}: update {update}"


def run(envelope: Envelope, context: JobContext) -> dict[str, str]:
    update = update_of(envelope)
    order = load_item(context, "orders_table", "order_id", envelope.id, OrderNotFoundError)
    recipient = text_of(order, "email")
    if recipient is None:
        raise OrderDataError(f"order {envelope.id!r} has no e-mail address to send update {update!r} to")
    name = text_of(order, "customer_name") or "customer"
    status = text_of(order, "status")
    body = f"Hello {name},\n\nthere is news of your order {envelope.id} ({update})"
    body += f": it is {status}.\n" if status else ".\n"
    sent = context.client("ses").send_email(
        Source=context.resource("mail_sender"),
        Destination={"ToAddresses": [recipient]},
        Message={
            "Subject": {"Data": subject(envelope.id, update), "Charset": "UTF-8"},
            "Body": {"Text": {"Data": body, "Charset": "UTF-8"}},
        },
    )
    context.logger.info("order update sent", extra={"update": update, "ses_message_id": sent["MessageId"]})
    return {"update": update, "ses_message_id": sent["MessageId"]}
