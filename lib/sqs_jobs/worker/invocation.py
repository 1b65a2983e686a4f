"""What the worker's parts share about the invocation they serve: its clock, how each record was delivered, and
what a record came to. The batch (sqs_jobs.worker.runtime), a job's run (execution.py) and its settling
(settlement.py) all read these; this module imports none of them."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Final

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from sqs_jobs.worker.provenance import ORIGINAL_MESSAGE, SENT_AT, MessageAttributes

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

# Kept back from the invocation's remaining time when the runtime's own calls are given their time: the
# invocation must still return its answer after them.
ANSWER_RESERVE_S = 0.25


class Outcome(Enum):
    SUCCEEDED = "succeeded"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead_lettered"
    DEFERRED = "deferred"
    HEARTBEAT = "heartbeat"
    CANCELLED = "cancelled"  # a copy of a cancelled key, acknowledged unrun
    DROPPED = "dropped"  # a copy of a unique or debounced job its flow setting dropped, acknowledged unrun
    STARTED = "started"  # a durable job's execution started (or found already started), acknowledged


class Delivery:
    """One record as the runtime reads it: its attributes split by sender, and how often SQS has delivered it. A
    plain class: a dataclass's generated methods cost every cold start half a millisecond."""

    __slots__ = ("attributes", "receives", "record")

    def __init__(self, record: SQSRecord, attributes: MessageAttributes, receives: int) -> None:
        self.record: Final = record
        self.attributes: Final = attributes
        self.receives: Final = receives

    @property
    def first_sent_ms(self) -> int | None:
        """When the message was first sent (epoch ms): SQS's SentTimestamp, or on a fresh copy the runtime sent, the
        original's, which the copy carries (a producer's attribute of that name is its data, never read here)."""
        carried = self.attributes.bookkeeping.get(SENT_AT, "")
        if carried.isdigit():
            return int(carried)
        sent = self.record.attributes.sent_timestamp
        return int(sent) if sent else None

    @property
    def message_identity(self) -> str:
        """The message this delivery is: its SQS message ID, or on a fresh copy the runtime sent, the original's."""
        return self.attributes.bookkeeping.get(ORIGINAL_MESSAGE) or self.record.message_id


class Invocation:
    """The invocation being served, set by the worker as each one starts: the time its records and the runtime's
    own calls may take."""

    def __init__(self) -> None:
        self.context: LambdaContext | None = None

    def remaining_s(self) -> float:
        assert self.context is not None
        return self.context.get_remaining_time_in_millis() / 1000

    def call_time_s(self, keep_s: float = 0.0) -> float:
        """How long one of the runtime's own calls may take: what the invocation has left, less `keep_s` (the
        settle margin, for the write that starts a run) and the time to return its answer."""
        if self.context is None:
            return 60.0
        return max(0.0, self.remaining_s() - keep_s - ANSWER_RESERVE_S)
