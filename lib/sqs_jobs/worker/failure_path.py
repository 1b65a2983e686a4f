"""What a record that didn't succeed carries: the settlement's verdicts on it (to the DLQ with its evidence, back to
the queue), and what the run ledger writes of its failure and of its dead letter.

Loaded by the first record that fails, is handed back or is dead-lettered: a batch that succeeds never builds
these classes (docs/benchmarks.md, issue 33).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqs_jobs.worker.key_life import DEAD_LETTERED_AT, ENDING_BODY, ENDING_MESSAGE

if TYPE_CHECKING:
    from sqs_jobs.envelope import Envelope
    from sqs_jobs.worker.run_ledger import StartedRun


@dataclass(frozen=True)
class KeyRecord:
    """The key's run record to delete once the message is in the DLQ (a redrive then starts the count afresh):
    only as the runtime last wrote it (`runs`), or, with runs None, unless a run holds it."""

    record_id: str
    runs: int | None


@dataclass(frozen=True)
class DeadLetter:
    """To the DLQ with this evidence, then acknowledged."""

    error_type: str
    error_message: str
    traceback: str
    failure: str
    classification: str
    reason: str
    attempts: int
    envelope: Envelope | None
    first_failed_at: float | None = None
    key_record: KeyRecord | None = None
    # The run this dead letter ends, not yet written: if the DLQ refuses it, its failure is written as pending.
    run: StartedRun | None = None
    # The failed HTTP call behind the error, if there was one: its status and the start of its response.
    http_status: int | None = None
    http_body: str | None = None


@dataclass(frozen=True)
class Back:
    """Back to the queue, due in `delay_s`: after a failed run (`reason` "retry") or handed back unrun."""

    delay_s: int
    reason: str
    cause: BaseException
    envelope: Envelope | None
    attempts: int
    first_failed_at: float | None = None
    key_record: KeyRecord | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    """How a run ended in failure, as the failure record keeps it."""

    error_type: str
    error: str
    # The classification: permanent, retries_exhausted, transient, ...
    kind: str
    traceback: str = ""


@dataclass(frozen=True)
class DeadLettered:
    """The message the DLQ has of a key (its identity, `Delivery.message_identity`) and, for a batch member whose
    count may still be owed, its body: what an ENDING record names, and so does a cancelled one whose message was
    dead-lettered, so that its redelivery never runs again, even after an undo."""

    message_id: str
    body: str | None = None

    def assignments(self, at: str, names: dict[str, str], values: dict[str, Any]) -> list[str]:
        """The SET clauses naming it (`at`: the placeholder of the dead letter's time)."""
        names.update({"#dead_lettered_at": DEAD_LETTERED_AT, "#ending_message": ENDING_MESSAGE})
        values[":ending_message"] = {"S": self.message_id}
        clauses = [f"#dead_lettered_at = {at}", "#ending_message = :ending_message"]
        if self.body is not None:
            names["#ending_body"] = ENDING_BODY
            values[":ending_body"] = {"S": self.body}
            clauses.append("#ending_body = :ending_body")
        return clauses
