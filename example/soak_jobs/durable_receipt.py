"""A durable receipt job, as the soak runs it: a checkpointed step reads the order, the execution waits a second (so
the next invocation replays what came before), and a second step mails the receipt.

A share of the others (`awaits_confirmation`) waits, after the wait, for the event `confirmed`, which the soak sends
as a service would (JobPublisher.send_event) once the job's record says it waits; the mail names who confirmed.

A share of its IDs (`drifting`) is written the way a new team's first durable job goes wrong: the first step's name
is made outside any step from the clock, so the replay after the wait no longer matches its checkpoint. Such an
execution must end with one dead letter (`NonDeterministicExecutionError`, permanent), its durable record FAILED,
and no mail (docs/workflows.md, "How a durable execution ends").
"""

from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING

from example.soak_jobs import odd_results
from sqs_jobs.envelope import Envelope

if TYPE_CHECKING:
    from sqs_jobs.durable.context import DurableJobContext

# The error a drifting execution's dead letter names.
DRIFT_ERROR = "NonDeterministicExecutionError"


# The event an awaiting receipt waits for, and how long before its wait would time out (the soak sends it long before).
CONFIRMED = "confirmed"
CONFIRM_WAIT_S = 600


def awaits_confirmation(entity_id: str) -> bool:
    """Whether this ID's receipt waits for its confirmation (a quarter of the IDs, none of them drifting)."""
    return zlib.crc32(entity_id.encode()) % 4 == 1


def drifting(entity_id: str) -> bool:
    """Whether this ID's code reads the clock outside its steps (the same for the same ID, wherever it is asked)."""
    return zlib.crc32(entity_id.encode()) % 2 == 0


def run(envelope: Envelope, context: DurableJobContext) -> str:
    # Outside any step: a drifting run names its step after the clock, which a replay reads anew.
    read = f"read-{time.time_ns()}" if drifting(envelope.id) else "read"
    recipient = context.step(read, lambda: odd_results.receipt_recipient(envelope, context))
    context.wait(1)
    if awaits_confirmation(envelope.id):
        context.wait_for_event(CONFIRMED, timeout_s=CONFIRM_WAIT_S)
    return context.step("mail", lambda: odd_results.mail_receipt(envelope, context, recipient))
