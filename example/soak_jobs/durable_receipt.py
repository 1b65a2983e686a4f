"""A durable receipt job, as the soak runs it: a checkpointed step reads the order, the execution waits a second (so
the next invocation replays what came before), and a second step mails the receipt.

A share of its IDs (`drifting`) is written the way a new team's first durable job goes wrong: the first step's name
is made outside any step from the clock, so the replay after the wait no longer matches its checkpoint. Such an
execution must end with one dead letter (`NonDeterministicExecutionError`, permanent), its durable record FAILED,
and no mail (docs/workflows.md, "How a durable execution ends").
"""

from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING, Any

from example.soak_jobs import odd_results
from functions.jobs.order_confirmation import OrderDataError, OrderNotFoundError
from functions.jobs.records import load_item, text_of
from sqs_jobs.envelope import Envelope

if TYPE_CHECKING:
    from functions.durable.context import DurableJobContext

# The error a drifting execution's dead letter names.
DRIFT_ERROR = "NonDeterministicExecutionError"


def drifting(entity_id: str) -> bool:
    """Whether this ID's code reads the clock outside its steps (the same for the same ID, wherever it is asked)."""
    return zlib.crc32(entity_id.encode()) % 2 == 0


def run(envelope: Envelope, context: DurableJobContext) -> str:
    # Outside any step: a drifting run names its step after the clock, which a replay reads anew.
    read = f"read-{time.time_ns()}" if drifting(envelope.id) else "read"
    recipient = context.step(read, lambda: _recipient(envelope, context))
    context.wait(1)
    return context.step("mail", lambda: _mail(envelope, context, recipient))


def _recipient(envelope: Envelope, context: Any) -> str:
    order = load_item(context, "orders_table", "order_id", envelope.id, OrderNotFoundError)
    recipient = text_of(order, "email")
    if recipient is None:
        raise OrderDataError(f"order {envelope.id!r} has no e-mail address to send a receipt to")
    return recipient


def _mail(envelope: Envelope, context: Any, recipient: str) -> str:
    sent = context.client("ses").send_email(
        Source=context.resource("mail_sender"),
        Destination={"ToAddresses": [recipient]},
        Message={
            "Subject": {"Data": odd_results.subject(envelope.job, envelope.id), "Charset": "UTF-8"},
            "Body": {"Text": {"Data": f"Your receipt for order {envelope.id}.\n", "Charset": "UTF-8"}},
        },
    )
    return str(sent["MessageId"])
