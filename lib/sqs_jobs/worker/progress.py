"""A long job's progress, reported through its context (`context.progress(done, total, note)`) and kept in its
key's idempotency record, where `jobctl job show` and the console read it.

Throttled: at most one write every PROGRESS_INTERVAL_S per run (the first report, and one whose `done` reaches
its `total`, always write), so a job may report from a tight loop. The write is the job's own call
(`context.client("dynamodb")`), so the time limit's fence and the breakers see it, and it changes the record only
while this very run holds the key (status INPROGRESS, `runs` = this run's number): a late report of a cut or
superseded run changes nothing. A report that can't be written is logged and dropped; it never fails the job.
The note is cut to MAX_NOTE_CHARS; `done` and `total` must be numbers (TypeError otherwise).

It is also how a run learns that an operator cancelled its key (`jobctl job cancel`): a report finds the record's
CANCEL_REQUESTED_AT (its write's condition fails and returns the record), and before each call the run makes
(`raise_if_cancelled`, from sqs_jobs.worker.downstream) the record is read, at most once every
CANCEL_CHECK_INTERVAL_S and never in the run's first interval, so a short job never pays for it. Either raises
JobCancelledError, and so does every later report or call of the run. A read that fails is ignored (the next one
tries again): cancelling is best effort, never a new way for a job to fail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqs_jobs.worker.errors import JobCancelledError
from sqs_jobs.worker.key_life import RUNS
from sqs_jobs.worker.names import (
    CANCEL_REQUESTED_AT,
    PROGRESS_AT,
    PROGRESS_DONE,
    PROGRESS_NOTE,
    PROGRESS_RUN,
    PROGRESS_TOTAL,
)
from sqs_jobs.worker.run_ledger import INPROGRESS

PROGRESS_INTERVAL_S = 5.0
MAX_NOTE_CHARS = 200
CANCEL_CHECK_INTERVAL_S = 10.0


class ProgressReporter:
    """One run's progress reports: `report` writes the newest to the key's record, at most every `interval_s`."""

    def __init__(
        self,
        client: Callable[[], Any],
        table: str,
        record_id: str,
        run: int,
        *,
        on_unwritten: Callable[[str], None] = lambda reason: None,
        interval_s: float = PROGRESS_INTERVAL_S,
        cancel_check_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._table = table
        self._record_id = record_id
        self._run = run
        self._on_unwritten = on_unwritten
        self._interval_s = interval_s
        self._clock = clock
        self._last_written: float | None = None
        self._lock = threading.Lock()
        self._cancel_check_interval_s = (
            CANCEL_CHECK_INTERVAL_S if cancel_check_interval_s is None else cancel_check_interval_s
        )
        self._last_cancel_check = clock()
        self._cancelled_at: float | None = None

    @property
    def table(self) -> str:
        """The idempotency table the record is in."""
        return self._table

    def report(self, done: float, total: float | None = None, note: str = "") -> bool:
        """Keep `done` (of `total`, with a short `note`) as this run's progress; True if it was written now, False
        if throttled or refused (a report after the run lost its key, or a write that failed)."""
        if (
            isinstance(done, bool)
            or not isinstance(done, int | float)
            or (total is not None and (isinstance(total, bool) or not isinstance(total, int | float)))
        ):
            raise TypeError("progress(done, total=None, note='') takes numbers for done and total")
        self._raise_if_seen()
        finished = total is not None and done >= total  # the last report is never throttled away
        with self._lock:
            now = self._clock()
            if self._last_written is not None and now - self._last_written < self._interval_s and not finished:
                return False
            self._last_written = now
        values: dict[str, Any] = {
            ":done": {"N": repr(float(done)) if isinstance(done, float) else str(done)},
            ":at": {"N": f"{time.time():.3f}"},
            ":run": {"N": str(self._run)},
            ":inprogress": {"S": INPROGRESS},
            ":note": {"S": str(note)[:MAX_NOTE_CHARS]},
        }
        assignments = [
            f"{PROGRESS_DONE} = :done",
            f"{PROGRESS_AT} = :at",
            f"{PROGRESS_RUN} = :run",
            f"{PROGRESS_NOTE} = :note",
        ]
        removals = []
        if total is None:
            removals.append(PROGRESS_TOTAL)
        else:
            values[":total"] = {"N": repr(float(total)) if isinstance(total, float) else str(total)}
            assignments.append(f"{PROGRESS_TOTAL} = :total")
        expression = "SET " + ", ".join(assignments) + (" REMOVE " + ", ".join(removals) if removals else "")
        try:
            self._client().update_item(
                TableName=self._table,
                Key={"id": {"S": self._record_id}},
                UpdateExpression=expression,
                ConditionExpression="#status = :inprogress AND #runs = :run AND attribute_not_exists(#cancel)",
                ExpressionAttributeNames={"#status": "status", "#runs": RUNS, "#cancel": CANCEL_REQUESTED_AT},
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            self._note_cancel(error.response.get("Item") or {})  # type: ignore[arg-type]
            self._raise_if_seen()
            code = error.response.get("Error", {}).get("Code", "unknown")
            self._on_unwritten("the run no longer holds its key" if code == "ConditionalCheckFailedException" else code)
            return False
        except BotoCoreError as error:
            self._on_unwritten(type(error).__name__)
            return False
        return True

    def raise_if_cancelled(self) -> None:
        """Before a call of the run: JobCancelledError if an operator cancelled its key (read at most once every
        CANCEL_CHECK_INTERVAL_S; see the module's docstring)."""
        self._raise_if_seen()
        with self._lock:
            now = self._clock()
            if now - self._last_cancel_check < self._cancel_check_interval_s:
                return
            self._last_cancel_check = now
        try:
            item = (
                self._client()
                .get_item(
                    TableName=self._table,
                    Key={"id": {"S": self._record_id}},
                    ProjectionExpression="#cancel, #runs",
                    ExpressionAttributeNames={"#cancel": CANCEL_REQUESTED_AT, "#runs": RUNS},
                )
                .get("Item", {})
            )
        except (ClientError, BotoCoreError):
            return
        self._note_cancel(item)
        self._raise_if_seen()

    def _note_cancel(self, item: dict[str, Any]) -> None:
        """Keep a cancel the record holds for this very run (a later run of the key is not this one's to stop)."""
        requested = item.get(CANCEL_REQUESTED_AT, {}).get("N")
        if requested is not None and item.get(RUNS, {}).get("N") == str(self._run):
            self._cancelled_at = float(requested)

    def _raise_if_seen(self) -> None:
        if self._cancelled_at is not None:
            at = datetime.fromtimestamp(self._cancelled_at, tz=UTC).isoformat(timespec="seconds")
            raise JobCancelledError(f"cancelled by an operator at {at}; the run stopped at its next report or call")
