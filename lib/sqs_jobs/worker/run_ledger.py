"""The runtime's count of each job key's runs, kept where the runs happen: in the key's idempotency record.

SQS's `ApproximateReceiveCount` counts receives, not runs. A record handed back unrun (no time left, its key busy,
an open breaker) or skipped behind a failing message of its FIFO group spends a receive without running, and a
copy sent to avoid that can't keep a FIFO group's order. So the runtime counts runs itself, in the one DynamoDB
item Powertools' idempotency already writes for every run, at no extra write:

- **Start** (Powertools' in-progress write): status INPROGRESS and `runs = if_not_exists(runs, seed) + 1`, an
  UpdateItem, only if the key is free (Powertools' conditions: absent, expired, or an in-progress record past its
  deadline; plus ours: FAILED), has runs left (`runs < max_attempts`) and no dead-lettering pending. A crashed run
  counts: it was started. The old item comes back, so the runtime learns the run's number, since when open
  breakers held it, and when it first failed. On a message's first delivery the key nearly always has no record:
  a PutItem `runs = 1` only if it has none (Powertools' own write) tries that first, and a record it finds (a
  duplicate, a busy key) answers as Powertools would; anything else takes the UpdateItem.
- **Completion** (Powertools' success write): status COMPLETED with the result, `runs` kept as the completing
  run's number: the same three attributes Powertools sets. A key reused after its completion expires starts
  afresh: the counting write refuses an expired completion, and a second write, conditioned on that completion,
  sets `runs = 1` (readers see a completion's `runs` as its `completed_run`, the count as 0).
- **Failure** (in place of Powertools' delete): status FAILED with the error's type and message, `runs` kept, so
  the next delivery counts on; a run refused by an open breaker is given its run back (`runs - 1`) and
  `held_since` set once. The runtime writes this after it has classified the failure.
- **Dead-lettered**: after the DLQ has the message the record is ENDING, naming it: its own redelivery is
  acknowledged, and the key's next other message (a redrive) deletes the record and starts the count afresh.
  If the DLQ refuses it, the failure is written with `pending_dead_letter` set, and the next delivery
  dead-letters it from the record without running it.

A delivery whose key has used its runs (the last one never reported back: a crash or a function timeout) or
whose dead-lettering is pending starts no run: the start write's condition fails, `RunsExhaustedError` carries the
record, and the runtime dead-letters the message with the record's evidence.

Writes per job: 2 for a run that succeeds (start, completion) as with plain Powertools; 2 per failed run (start,
failure); 2 for a run that is dead-lettered (start, delete). A hand-back before any run writes nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyItemAlreadyExistsError
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord
from botocore.exceptions import BotoCoreError, ClientError

from sqs_jobs.worker.key_life import (
    COMPLETED_RUN,
    DEAD_LETTERED_AT,
    ENDING_BODY,
    ENDING_MESSAGE,
    FIRST_FAILED_AT,
    FOLLOW_UPS,
    HELD_SINCE,
    LAST_ERROR,
    LAST_ERROR_TYPE,
    LAST_FAILED_AT,
    LAST_FAILURE,
    LAST_TRACEBACK,
    PENDING_DEAD_LETTER,
    RUNS,
    KeyRecord,
)
from sqs_jobs.worker.names import (
    CANCEL_REQUESTED_AT,
    CANCELLED_AT,
    CANCELLED_BY,
    LIFE,
    LIFE_AT,
    NEXT_RETRY_AT,
    RECORD_JOB,
    RECORD_JOB_ID,
    RECORD_JOB_KEY,
    RECORD_QUEUE,
    RECORD_TENANT,
    RUN_BY,
    STARTED_AT,
    TRACE_ID,
    LifeState,
    RecordStatus,
    life_partition,
)

# A failure's records are built by the first run that fails (sqs_jobs.worker.failure_path).
if TYPE_CHECKING:
    from sqs_jobs.worker.failure_path import DeadLettered, Failure

INPROGRESS = RecordStatus.INPROGRESS.value
COMPLETED = RecordStatus.COMPLETED.value
FAILED = RecordStatus.FAILED.value
CANCELLED = RecordStatus.CANCELLED.value

# What a failure record keeps of the error: enough to say why, small enough to stay far below DynamoDB's 400 KB.
MAX_ERROR_CHARS = 1024
MAX_TRACEBACK_CHARS = 8192
# The key's text is bounded by the envelope's limits; this caps what a record repeats of it for the lists.
MAX_IDENTITY_CHARS = 1024

# A client for a call that must end within the given seconds (sqs_jobs.worker.clients).
ClientFor = Callable[[float], Any]


class RunIdentity:
    """Whose key a run holds, written with its start so the operator's lists need no scan: the queue, the job, the
    envelope's ID, the idempotency key, and which worker runs it (log stream and request ID). A plain class, as is
    StartedRun: a dataclass's generated methods cost every cold start half a millisecond."""

    __slots__ = ("job", "job_id", "key", "queue", "run_by", "tenant", "trace_id")

    def __init__(
        self,
        queue: str = "",
        job: str = "",
        job_id: str = "",
        key: str = "",
        run_by: str = "",
        tenant: str | None = None,
        trace_id: str = "",
    ) -> None:
        self.queue: Final = queue
        self.job: Final = job
        self.job_id: Final = job_id
        self.key: Final = key
        self.run_by: Final = run_by
        # The envelope's tenant ("" for none), or None: not said (the record then says nothing of it).
        self.tenant: Final = tenant
        # The trace the run is a span of (a traced queue's); "": none, not written.
        self.trace_id: Final = trace_id

    def assignments(self, names: dict[str, str], values: dict[str, Any]) -> list[str]:
        """The start write's SET clauses for these (and the names and values they use)."""
        fields = {
            RECORD_QUEUE: self.queue,
            RECORD_JOB: self.job,
            RECORD_JOB_ID: self.job_id,
            RECORD_JOB_KEY: self.key,
            RUN_BY: self.run_by,
            RECORD_TENANT: self.tenant,
            TRACE_ID: self.trace_id,
        }
        clauses = []
        for attribute, value in fields.items():
            if value or (attribute == RECORD_TENANT and value is not None):
                names[f"#{attribute}"] = attribute
                values[f":{attribute}"] = {"S": value[:MAX_IDENTITY_CHARS]}
                clauses.append(f"#{attribute} = :{attribute}")
        return clauses

    def item(self) -> dict[str, Any]:
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        self.assignments(names, values)
        return {attribute: values[f":{attribute}"] for attribute in (name[1:] for name in names)}


# A key's record as the ledger read it: before a run started, or when a delivery could start none.
LedgerEntry = KeyRecord


class StartedRun:
    """A run the ledger let start: its number (1 = the key's first run), the record as it was before, and since
    when open breakers have held the key (the record's, or the seed it took over)."""

    __slots__ = ("before", "held_since", "identity", "listed", "number", "started_at")

    def __init__(
        self,
        number: int,
        before: LedgerEntry,
        held_since: float | None = None,
        identity: RunIdentity | None = None,
        listed: bool = True,
        started_at: float = 0.0,
    ) -> None:
        self.number: Final = number
        self.before: Final = before
        self.held_since: Final = held_since
        self.identity: Final = identity if identity is not None else RunIdentity()
        # Whether its start write listed the key as running (the in-flight index); a new key's first run is listed
        # only once it has lasted the queue's `list_running_after_s` (`list_running`).
        self.listed: Final = listed
        # When its start write was made (epoch seconds): since when it runs, as the list says.
        self.started_at: Final = started_at


class _ExpiredCompletionError(Exception):
    """The start write found the key's completion expired: its key starts a new life, counted from 1."""


class RunsExhaustedError(Exception):
    """No run may start: the key has used its runs (the last never reported back) or its dead-lettering is
    pending. Carries the record, whose evidence the dead letter gets."""

    def __init__(self, entry: LedgerEntry) -> None:
        super().__init__(
            f"key record {entry.record_id} has used {entry.runs} run(s)"
            + (f"; dead-lettering pending ({entry.pending_dead_letter})" if entry.pending_dead_letter else "")
        )
        self.entry = entry


class KeyCancelledError(Exception):
    """No run may start: an operator cancelled the key (`jobctl job cancel`). Its copies are acknowledged unrun."""

    def __init__(self, entry: LedgerEntry) -> None:
        super().__init__(f"key record {entry.record_id} was cancelled")
        self.entry = entry


class KeyEndingError(Exception):
    """No run may start yet: the key's last message is in the DLQ and what follows its dead letter (a batch
    member's count) has not held. The delivery finishes that first (docs/key-life.md, "Ending")."""

    def __init__(self, entry: LedgerEntry) -> None:
        super().__init__(f"key record {entry.record_id} was dead-lettered; its follow-through is pending")
        self.entry = entry


# The late listing's condition (`RunLedger.list_running`), which tells that write apart from every other: while the
# record is still the run's, in progress, and unlisted.
LISTING_CONDITION = "#status = :inprogress AND #runs = :run AND attribute_not_exists(#life)"


def _send_listing(client: Any, request: dict[str, Any]) -> None:
    # A refused or failed listing leaves the run unlisted; its completion (or failure) settles the key as ever.
    with contextlib.suppress(ClientError, BotoCoreError):
        client.update_item(**request)


class _Scope:
    """Per record thread: what the next start write needs and what it learned. A plain class: its dataclass cost
    every cold start half a millisecond (docs/benchmarks.md, issue 33)."""

    def __init__(
        self,
        max_runs: int = 1,
        seed_runs: int = 0,
        seed_held_since: float | None = None,
        time_left: Callable[[], float] = lambda: 60.0,
        first_delivery: bool = False,
        identity: RunIdentity | None = None,
    ) -> None:
        self.max_runs = max_runs
        self.seed_runs = seed_runs
        self.seed_held_since = seed_held_since
        # The seconds a write may take now, while the record's thread runs the key (its start and its completion).
        self.time_left = time_left
        # The message's first delivery, carrying no previous runtime's bookkeeping: its key most likely has no
        # record.
        self.first_delivery = first_delivery
        self.identity = identity if identity is not None else RunIdentity()
        self.started: StartedRun | None = None
        # The run's listing as running was sent (`list_running`): its completion takes the key out of the index.
        self.listed_late = False
        # The follow-ups the run's completion write keeps, and those a completed record answered the start with.
        self.follow_ups: str | None = None
        self.replayed_follow_ups: str | None = None


class RunLedger(DynamoDBPersistenceLayer):
    """Powertools' DynamoDB persistence layer, counting runs (see the module's docstring).

    Not thread-bound: each record's thread calls `prepare()` before running its key, and reads `started()` after."""

    def __init__(self, table_name: str, client_for: ClientFor, *, list_at_start: bool = True) -> None:
        # Powertools keeps one client; the ledger picks one per call whose timeouts fit the time left.
        super().__init__(table_name=table_name, boto3_client=client_for(60.0))
        self._client_for = client_for
        self._local = threading.local()
        # Whether a new key's first run is listed as running by its start write, or only once it runs long.
        self._list_at_start = list_at_start

    # --- the record's thread ------------------------------------------------------------------------------------

    def prepare(
        self,
        *,
        max_runs: int,
        time_left: Callable[[], float],
        seed_runs: int = 0,
        seed_held_since: float | None = None,
        first_delivery: bool = False,
        identity: RunIdentity | None = None,
    ) -> None:
        """Before a delivery runs its key in this thread: the runs it may have, what the message carried over
        from a previous runtime (see docs/failure-semantics.md, upgrades) and whose key it is (`identity`)."""
        self._local.scope = _Scope(
            identity=identity or RunIdentity(),
            max_runs=max_runs,
            seed_runs=max(0, min(seed_runs, max_runs - 1)),
            seed_held_since=seed_held_since,
            time_left=time_left,
            first_delivery=first_delivery and not seed_runs and seed_held_since is None,
        )

    def keep_follow_ups(self, encoded: str | None) -> None:
        """The follow-ups this thread's run asked for, written with its completion (no write of their own)."""
        self._scope().follow_ups = encoded

    def list_running(self, time_left_s: float) -> threading.Thread | None:
        """This thread's run has lasted the queue's `list_running_after_s`: list its key as running, since its start,
        if its start write didn't. Only while the record is still this run's and in progress: a late listing never
        brings a completed, failed or later run's key back into the index. Sent from a thread of its own, within
        `time_left_s`: the waiting thread that calls it keeps the run's limit whatever the store does (an
        in-process store has no socket timeout to bound a call). Best effort: the run goes on, unlisted, if the
        write fails. The thread it started, or None when there is nothing to list."""
        scope = self._scope()
        run = scope.started
        if run is None or run.listed or scope.listed_late or not run.identity.queue:
            return None
        scope.listed_late = True  # before the write: a completion that follows it takes the key out again
        names = {"#status": self.status_attr, "#runs": RUNS}
        values = {
            ":started_at": {"N": f"{run.started_at:.3f}"},
            ":inprogress": {"S": INPROGRESS},
            ":run": {"N": str(run.number)},
        }
        listed = _listed(run.identity.queue, LifeState.RUNNING, run.before.record_id, ":started_at", names, values)
        request = {
            "TableName": self.table_name,
            "Key": self._key(run.before.record_id),
            "UpdateExpression": "SET " + ", ".join(listed),
            "ConditionExpression": LISTING_CONDITION,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        thread = threading.Thread(
            target=_send_listing, args=(self._client_for(time_left_s), request), name="run-listing", daemon=True
        )
        thread.start()
        return thread

    def replayed_follow_ups(self) -> str | None:
        """The follow-ups the key's completed record holds, when this thread's start was answered as a duplicate."""
        return self._scope().replayed_follow_ups

    def started(self) -> StartedRun | None:
        """The run this thread's last start write began, if it began one."""
        return self._scope().started

    def _scope(self) -> _Scope:
        scope = getattr(self._local, "scope", None)
        if scope is None:
            scope = self._local.scope = _Scope()
        return scope

    def _client(self, time_left_s: float | None = None) -> Any:
        return self._client_for(self._scope().time_left() if time_left_s is None else time_left_s)

    def _key(self, record_id: str) -> dict[str, Any]:
        return {self.key_attr: {"S": record_id}}

    # --- Powertools' persistence layer ----------------------------------------------------------------------------

    def _put_record(self, data_record: DataRecord) -> None:
        scope = self._scope()
        scope.started = None
        scope.listed_late = False
        scope.follow_ups = scope.replayed_follow_ups = None
        now = time.time()
        if scope.first_delivery:
            started = self._start_new_key(data_record, scope, now)
            if started is not None:
                if started:
                    return
                self._start_counted(data_record, scope, now, afresh=True)
                return
        try:
            self._start_counted(data_record, scope, now, afresh=False)
        except _ExpiredCompletionError:
            self._start_counted(data_record, scope, now, afresh=True)

    def _start_counted(self, data_record: DataRecord, scope: _Scope, now: float, *, afresh: bool) -> None:
        """The start write that counts the run on the key's record: `runs + 1` on a free key's (absent, failed, an
        in-progress run past its deadline, expired); `afresh`: `runs = 1` on an expired completion's, whose key
        starts a new life (a completion keeps its run's number in `runs`). Raises _ExpiredCompletionError when the
        counting write finds an expired completion, so its caller starts afresh instead."""
        names = {
            "#id": self.key_attr,
            "#expiry": self.expiry_attr,
            "#in_progress_expiry": self.in_progress_expiry_attr,
            "#status": self.status_attr,
            "#runs": RUNS,
            "#pending": PENDING_DEAD_LETTER,
            "#dead_lettered_at": DEAD_LETTERED_AT,
        }
        values: dict[str, Any] = {
            ":now": {"N": str(int(now))},
            ":now_in_millis": {"N": str(int(now * 1000))},
            ":inprogress": {"S": INPROGRESS},
            ":failed": {"S": FAILED},
            ":expiry": {"N": str(data_record.expiry_timestamp)},
            ":seed": {"N": str(scope.seed_runs)},
            ":one": {"N": "1"},
            ":max": {"N": str(scope.max_runs)},
        }
        assignments = [
            "#status = :inprogress",
            "#expiry = :expiry",
            "#runs = :one" if afresh else "#runs = if_not_exists(#runs, :seed) + :one",
            *self._running(data_record.idempotency_key, scope.identity, now, names, values),
        ]
        if data_record.in_progress_expiry_timestamp is not None:
            assignments.append("#in_progress_expiry = :in_progress_expiry")
            values[":in_progress_expiry"] = {"N": str(data_record.in_progress_expiry_timestamp)}
        if scope.seed_held_since is not None:
            names["#held_since"] = HELD_SINCE
            values[":seed_held_since"] = {"N": f"{scope.seed_held_since:.3f}"}
            assignments.append("#held_since = if_not_exists(#held_since, :seed_held_since)")
        values[":completed"] = {"S": COMPLETED}
        if afresh:
            # Only the expired completion it found: anything else written since is answered as the count would be.
            condition = "#status = :completed AND #expiry < :now"
            del values[":seed"], values[":max"], values[":failed"], values[":now_in_millis"]
            del names["#id"], names["#pending"]
            if data_record.in_progress_expiry_timestamp is None:
                del names["#in_progress_expiry"]
        else:
            free = (
                "attribute_not_exists(#id) OR (#expiry < :now AND #status <> :completed) OR #status = :failed OR "
                "(#status = :inprogress AND attribute_exists(#in_progress_expiry) AND "
                "#in_progress_expiry < :now_in_millis)"
            )
            # A run an operator asked to stop that never reported back (a crash): its key is cancelled all the same.
            condition = (
                f"({free}) AND (attribute_not_exists(#runs) OR #runs < :max) AND attribute_not_exists(#pending) "
                "AND (attribute_not_exists(#cancel_requested_at) OR #expiry < :now) "
                "AND (attribute_not_exists(#dead_lettered_at) OR #expiry < :now)"
            )
        # What an earlier life of the key left: a due time, and a cancel that has expired.
        stale = {"#next_retry_at": NEXT_RETRY_AT, "#cancelled_at": CANCELLED_AT, "#cancelled_by": CANCELLED_BY}
        stale["#cancel_requested_at"] = CANCEL_REQUESTED_AT
        stale.update({"#ending_message": ENDING_MESSAGE, "#ending_body": ENDING_BODY})
        # A run's follow-ups are those of the run that completes: an expired completion's never carry over.
        stale["#follow_ups"] = FOLLOW_UPS
        # Where a completion of a runtime before 0.3.0 kept its run's number.
        stale["#completed_run"] = COMPLETED_RUN
        names.update(stale)
        stale = {**stale, "#dead_lettered_at": DEAD_LETTERED_AT}
        try:
            response = self._client().update_item(
                TableName=self.table_name,
                Key=self._key(data_record.idempotency_key),
                UpdateExpression="SET " + ", ".join(assignments) + " REMOVE " + ", ".join(stale),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            item: Mapping[str, Any] | None = error.response.get("Item")  # type: ignore[assignment]
            if item is None:  # the record vanished between the write and its answer: Powertools retries
                raise IdempotencyItemAlreadyExistsError() from error
            refusal = self._refusal(data_record.idempotency_key, item, now)
            if isinstance(refusal, _ExpiredCompletionError) and afresh:
                # Another start took the expired completion first and has since completed again: Powertools reads
                # the record again and answers from it.
                raise IdempotencyItemAlreadyExistsError() from error
            raise refusal from error
        old = response.get("Attributes") or {}
        before = LedgerEntry.from_item(data_record.idempotency_key, old)
        # No runs before: a new key, or a record a previous runtime wrote (the seed then stands for them).
        runs_before = before.runs if RUNS in old else scope.seed_runs
        held_since = before.held_since if HELD_SINCE in old else scope.seed_held_since
        scope.started = StartedRun(
            number=runs_before + 1, before=before, held_since=held_since, identity=scope.identity, started_at=now
        )

    @staticmethod
    def _running(
        record_id: str, identity: RunIdentity, now: float, names: dict[str, str], values: dict[str, Any]
    ) -> list[str]:
        """The start write's clauses that list the key as running, since now, by whom."""
        names["#started_at"] = STARTED_AT
        values[":started_at"] = {"N": f"{now:.3f}"}
        clauses = [*identity.assignments(names, values), "#started_at = :started_at"]
        return clauses + _listed(identity.queue, LifeState.RUNNING, record_id, ":started_at", names, values)

    def _start_new_key(self, data_record: DataRecord, scope: _Scope, now: float) -> bool | None:
        """A message's first delivery is nearly always its key's first run: start it with a plain conditional
        PutItem, as Powertools does (an UpdateItem costs DynamoDB nothing more, but moto twice as much). True: it
        started; False: the key's record is an expired completion (the caller starts afresh); None: a record this
        write can't settle (a failed run, another expired record), so the caller counts on with its UpdateItem."""
        item = {
            **self._key(data_record.idempotency_key),
            self.status_attr: {"S": INPROGRESS},
            self.expiry_attr: {"N": str(data_record.expiry_timestamp)},
            RUNS: {"N": "1"},
            **scope.identity.item(),
            STARTED_AT: {"N": f"{now:.3f}"},
        }
        listed = bool(scope.identity.queue) and self._list_at_start
        if listed:
            item[LIFE] = {"S": life_partition(scope.identity.queue, LifeState.RUNNING, data_record.idempotency_key)}
            item[LIFE_AT] = {"N": f"{now:.3f}"}
        if data_record.in_progress_expiry_timestamp is not None:
            item[self.in_progress_expiry_attr] = {"N": str(data_record.in_progress_expiry_timestamp)}
        try:
            self._client().put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(#id)",
                ExpressionAttributeNames={"#id": self.key_attr},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            old: Mapping[str, Any] | None = error.response.get("Item")  # type: ignore[assignment]
            refusal = self._refusal(data_record.idempotency_key, old or {}, now)
            if isinstance(refusal, IdempotencyItemAlreadyExistsError):
                raise refusal from error  # a duplicate, or its key busy: Powertools' answers
            return False if isinstance(refusal, _ExpiredCompletionError) else None
        scope.started = StartedRun(
            number=1,
            before=LedgerEntry(record_id=data_record.idempotency_key),
            identity=scope.identity,
            listed=listed,
            started_at=now,
        )
        return True

    def _refusal(self, record_id: str, item: Mapping[str, Any], now: float) -> Exception:
        """Why the start write's condition failed: a duplicate or a busy key (Powertools' answers), an expired
        completion (the key starts afresh), or no run left."""
        status = item.get(self.status_attr, {}).get("S")
        expiry = int(item.get(self.expiry_attr, {}).get("N", "0"))
        in_progress_expiry = item.get(self.in_progress_expiry_attr, {}).get("N")
        live = expiry >= int(now)
        busy = status == INPROGRESS and (in_progress_expiry is None or int(in_progress_expiry) >= int(now * 1000))
        if live and status == COMPLETED:
            self._scope().replayed_follow_ups = item.get(FOLLOW_UPS, {}).get("S")
        if live and (status == COMPLETED or busy):
            return IdempotencyItemAlreadyExistsError(old_data_record=self._item_to_data_record(dict(item)))
        if live and (status == CANCELLED or CANCEL_REQUESTED_AT in item):
            return KeyCancelledError(LedgerEntry.from_item(record_id, item))
        if live and DEAD_LETTERED_AT in item:
            return KeyEndingError(LedgerEntry.from_item(record_id, item))
        if status == COMPLETED:
            return _ExpiredCompletionError()
        return RunsExhaustedError(LedgerEntry.from_item(record_id, item))

    def _update_record(self, data_record: DataRecord) -> None:
        self._write_completion(
            data_record.idempotency_key,
            self._scope().started,
            {":response_data": {"S": data_record.response_data}, ":expiry": {"N": str(data_record.expiry_timestamp)}},
            time_left_s=self._scope().time_left(),
            follow_ups=self._scope().follow_ups,
        )

    def complete(self, run: StartedRun, *, time_left_s: float) -> None:
        """Mark the run completed without its result: a second try when Powertools' completion write failed."""
        self._write_completion(
            run.before.record_id,
            run,
            {":expiry": {"N": str(self._get_expiry_timestamp())}, ":inprogress": {"S": INPROGRESS}},
            time_left_s=time_left_s,
            only_if="#status = :inprogress AND #runs = :run",
            follow_ups=self._scope().follow_ups,
        )

    def complete_after_cut(
        self, record_id: str, number: int, *, time_left_s: float, follow_ups: str | None = None
    ) -> None:
        """A run cut at its time limit whose code then ran to its end (no interruption, no call after the cut): its
        side effects were all made before the cut, so its key is completed, while the record is still that run's,
        in progress or failed by the cut; never once a later run has started (then that run decides)."""
        self._write_completion(
            record_id,
            None,
            {
                ":expiry": {"N": str(self._get_expiry_timestamp())},
                ":run": {"N": str(number)},
                ":inprogress": {"S": INPROGRESS},
                ":failed": {"S": FAILED},
            },
            time_left_s=time_left_s,
            only_if="#runs = :run AND (#status = :inprogress OR #status = :failed)",
            follow_ups=follow_ups,
        )

    def _write_completion(
        self,
        record_id: str,
        run: StartedRun | None,
        values: dict[str, Any],
        *,
        time_left_s: float,
        only_if: str | None = None,
        follow_ups: str | None = None,
    ) -> None:
        """COMPLETED, `runs` kept (the completing run's number); `values` the expiry, if given the result, and the
        values `only_if` (the write's condition) names; the run's follow-ups, if it asked for any. As Powertools'
        own completion: three attributes set for a run that returns at once.

        The failure bookkeeping the record held when the run started is removed (a key reused after its record
        expires starts clean); only what was there, so a first run's completion stays as small a write as
        Powertools' own."""
        values = {**values, ":completed": {"S": COMPLETED}}
        names = {"#status": self.status_attr, "#expiry": self.expiry_attr}
        assignments = ["#status = :completed", "#expiry = :expiry"]
        if ":response_data" in values:
            names["#response_data"] = self.data_attr
            assignments.append("#response_data = :response_data")
        if follow_ups is not None:
            names["#follow_ups"] = FOLLOW_UPS
            values[":follow_ups"] = {"S": follow_ups}
            assignments.append("#follow_ups = :follow_ups")
        if only_if is not None and "#runs" in only_if:
            names["#runs"] = RUNS
            if run is not None:
                values[":run"] = {"N": str(run.number)}
        held = run is None or run.held_since is not None
        # A new key's first run that was never listed (most runs: they end before `list_running_after_s`) has no
        # listing or due time to take away.
        unlisted = run is not None and not run.listed and not self._scope().listed_late
        stale = {
            # The run's hold: read only while the record is INPROGRESS, so a new key's completion leaves it, as
            # Powertools' own does (one clause less for every job that succeeds at once).
            **({} if unlisted else {"#in_progress_expiry": self.in_progress_expiry_attr}),
            # A completed key leaves the lists (the sparse index holds keys in flight only).
            **({} if unlisted else {"#life": LIFE, "#life_at": LIFE_AT, "#next_retry_at": NEXT_RETRY_AT}),
            **({"#held_since": HELD_SINCE} if held else {}),
            **({"#first_failed_at": FIRST_FAILED_AT} if run is None or run.before.first_failed_at else {}),
            **({"#pending": PENDING_DEAD_LETTER} if run is None or run.before.pending_dead_letter else {}),
        }
        condition = {"ConditionExpression": only_if} if only_if is not None else {}
        self._client(time_left_s).update_item(
            TableName=self.table_name,
            Key=self._key(record_id),
            UpdateExpression="SET " + ", ".join(assignments) + (" REMOVE " + ", ".join(stale) if stale else ""),
            ExpressionAttributeNames={**names, **stale},
            ExpressionAttributeValues=values,
            **condition,
        )

    def delete_record(self, data: dict[str, Any], exception: Exception) -> None:
        """Powertools clears the in-progress record when the function raises; here the runtime writes the failure
        itself once it has classified it (`fail`, `refund`, `forget`), so this does nothing."""

    # --- the runtime's own writes -----------------------------------------------------------------------------

    def fail(
        self,
        run: StartedRun,
        failure: Failure,
        *,
        pending: bool = False,
        retry_at: float | None = None,
        time_left_s: float,
    ) -> None:
        """A run failed: FAILED with the error, its run counted, listed as retrying, due again at `retry_at`;
        `pending`: the DLQ refused it, so the next delivery dead-letters it from this record without running it.
        A run an operator asked to stop leaves its key CANCELLED instead, its run and error kept, and raises
        KeyCancelledError (its message is acknowledged, as any copy of a cancelled key is); a pending dead letter
        is still sent first."""
        values: dict[str, Any] = {}
        names: dict[str, str] = {}
        assignments = self._failure(failure, names, values)
        assignments += self._retrying(run, retry_at or time.time(), names, values)
        if pending:
            values[":traceback"] = {"S": failure.traceback[-MAX_TRACEBACK_CHARS:] or "(none)"}
            assignments += ["#pending = :kind", "#last_traceback = :traceback"]
            names.update({"#pending": PENDING_DEAD_LETTER, "#last_traceback": LAST_TRACEBACK})
            self._release(run, assignments, names, values, time_left_s)
            return
        self._release_unless_cancelled(run, assignments, names, values, time_left_s, failure)

    def refund(self, run: StartedRun, *, held: bool, retry_at: float | None = None, time_left_s: float) -> None:
        """A run that did not count: refused by an open breaker (`held`: `held_since` set on the first hold), or
        started with no time left to finish. Its run is given back and the key freed, listed as retrying (due
        again at `retry_at`); a key an operator asked to stop becomes CANCELLED (KeyCancelledError)."""
        values: dict[str, Any] = {":failed": {"S": FAILED}, ":one": {"N": "1"}}
        names: dict[str, str] = {}
        assignments = ["#status = :failed", "#runs = #runs - :one"]
        assignments += self._retrying(run, retry_at or time.time(), names, values)
        if held:
            values[":now"] = {"N": f"{time.time():.3f}"}
            names["#held_since"] = HELD_SINCE
            assignments.append("#held_since = if_not_exists(#held_since, :now)")
        self._release_unless_cancelled(run, assignments, names, values, time_left_s, None)

    @staticmethod
    def _failure(failure: Failure, names: dict[str, str], values: dict[str, Any]) -> list[str]:
        """The clauses that write FAILED and what the failure was."""
        now = time.time()
        values.update(
            {
                ":failed": {"S": FAILED},
                ":now": {"N": f"{now:.3f}"},
                ":type": {"S": failure.error_type[:256] or "Exception"},
                ":error": {"S": failure.error[:MAX_ERROR_CHARS] or "(no message)"},
                ":kind": {"S": failure.kind},
            }
        )
        names.update(
            {
                "#first_failed_at": FIRST_FAILED_AT,
                "#last_failed_at": LAST_FAILED_AT,
                "#last_error_type": LAST_ERROR_TYPE,
                "#last_error": LAST_ERROR,
                "#last_failure": LAST_FAILURE,
            }
        )
        return [
            "#status = :failed",
            "#first_failed_at = if_not_exists(#first_failed_at, :now)",
            "#last_failed_at = :now",
            "#last_error_type = :type",
            "#last_error = :error",
            "#last_failure = :kind",
        ]

    @staticmethod
    def _retrying(run: StartedRun, retry_at: float, names: dict[str, str], values: dict[str, Any]) -> list[str]:
        names["#next_retry_at"] = NEXT_RETRY_AT
        values[":next_retry_at"] = {"N": f"{retry_at:.3f}"}
        listed = _listed(run.identity.queue, LifeState.RETRYING, run.before.record_id, ":next_retry_at", names, values)
        return ["#next_retry_at = :next_retry_at", *listed]

    def _release_unless_cancelled(
        self,
        run: StartedRun,
        assignments: list[str],
        names: dict[str, str],
        values: dict[str, Any],
        time_left_s: float,
        failure: Failure | None,
    ) -> None:
        """`_release`, only while no cancel was asked of the run; if one was, the key is cancelled instead (the
        failure kept) and KeyCancelledError says so. A request withdrawn between the two writes (an undo) leaves
        the release to be written after all."""
        names = {**names, "#cancel_requested_at": CANCEL_REQUESTED_AT}
        for _ in range(2):
            try:
                self._release(
                    run, assignments, names, values, time_left_s, also="attribute_not_exists(#cancel_requested_at)"
                )
                return
            except ClientError as error:
                old = _refused_item(error)
                if old is None or CANCEL_REQUESTED_AT not in old:
                    raise
                entry = LedgerEntry.from_item(run.before.record_id, old)
                if entry.status != INPROGRESS or entry.runs != run.number:
                    raise
                try:
                    self.cancelled(run, time_left_s=time_left_s, failure=failure)
                except ClientError as refused:
                    if not is_condition_failure(refused):
                        raise
                    continue  # the request was withdrawn meanwhile (or the run overtaken: the release says which)
                raise KeyCancelledError(entry) from error
        self._release(run, assignments, names, values, time_left_s, also="attribute_not_exists(#cancel_requested_at)")

    def cancelled(
        self,
        run: StartedRun,
        *,
        time_left_s: float,
        failure: Failure | None = None,
        dead_lettered: DeadLettered | None = None,
    ) -> None:
        """The run stopped because an operator cancelled its key (or failed after a cancel was asked): CANCELLED,
        its runs kept, so no copy of the key runs again until the record expires (a redrive included; `jobctl job
        cancel --undo` withdraws it). Only while the request holds: one withdrawn first (an undo answered before
        this write landed) refuses it, and the key is not cancelled behind the operator's back. `failure`: what the
        run's own failure was; `dead_lettered`: the DLQ has its message, which the record names as ENDING does (an
        undo leaves it ENDING: that message's redelivery is acknowledged, the key's next message runs afresh)."""
        now = time.time()
        names = {"#expiry": self.expiry_attr, "#cancelled_at": CANCELLED_AT, "#next_retry_at": NEXT_RETRY_AT}
        values: dict[str, Any] = {
            ":cancelled": {"S": CANCELLED},
            ":at": {"N": f"{now:.3f}"},
            ":expiry": {"N": str(self._get_expiry_timestamp())},
        }
        assignments = ["#status = :cancelled", "#expiry = :expiry", "#cancelled_at = :at"]
        if failure is not None:
            assignments += [clause for clause in self._failure(failure, names, values) if clause.startswith("#last")]
            assignments.append("#first_failed_at = if_not_exists(#first_failed_at, :now)")
            del values[":failed"]
        if dead_lettered is not None:
            assignments += dead_lettered.assignments(":at", names, values)
        assignments += _listed(run.identity.queue, LifeState.CANCELLED, run.before.record_id, ":at", names, values)
        names["#cancel_requested_at"] = CANCEL_REQUESTED_AT
        self._release(
            run,
            assignments,
            names,
            values,
            time_left_s,
            remove=["#next_retry_at"],
            also="attribute_exists(#cancel_requested_at)",
        )

    def _release(
        self,
        run: StartedRun,
        assignments: list[str],
        names: dict[str, str],
        values: dict[str, Any],
        time_left_s: float,
        remove: list[str] | tuple[str, ...] = (),
        also: str = "",
    ) -> None:
        """Write how this run ended, only while the record is still this run's (a run whose in-progress record
        expired may have been overtaken by another), and `also` holds."""
        self._client(time_left_s).update_item(
            TableName=self.table_name,
            Key=self._key(run.before.record_id),
            UpdateExpression="SET " + ", ".join(assignments) + " REMOVE " + ", ".join([*remove, "#in_progress_expiry"]),
            ConditionExpression="#status = :inprogress AND #runs = :run" + (f" AND {also}" if also else ""),
            ExpressionAttributeNames={
                **names,
                "#status": self.status_attr,
                "#runs": RUNS,
                "#in_progress_expiry": self.in_progress_expiry_attr,
            },
            ExpressionAttributeValues={**values, ":inprogress": {"S": INPROGRESS}, ":run": {"N": str(run.number)}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )

    def forget(self, record_id: str, runs: int | None, *, time_left_s: float) -> None:
        """The key's message is in the DLQ: delete its record, so a redrive starts the count afresh. Only the
        record as the runtime last saw it (`runs`), never one a newer run has taken since; with `runs` None (no run
        of this delivery), any record of the key that no live run holds and that has not completed. A key an
        operator asked to stop is left CANCELLED instead (`cancelled_key`)."""
        names, values, condition = self._as_last_seen(record_id, runs)
        names["#cancel_requested_at"] = CANCEL_REQUESTED_AT
        try:
            self._client(time_left_s).delete_item(
                TableName=self.table_name,
                Key=self._key(record_id),
                ConditionExpression=f"{condition} AND attribute_not_exists(#cancel_requested_at)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as error:
            if not is_condition_failure(error):
                raise
            self._cancel_dead_lettered(record_id, runs, None, time_left_s)

    def _cancel_dead_lettered(
        self, record_id: str, runs: int | None, dead_lettered: DeadLettered | None, time_left_s: float
    ) -> None:
        """A key whose dead letter was sent (or, `dead_lettered` None, whose record was to be forgotten) while a
        cancel was asked of it: CANCELLED, as the operator left it (a redrive is acknowledged unrun until the cancel
        is undone), naming the dead-lettered message so that an undo leaves it ENDING."""
        names, values, condition = self._as_last_seen(record_id, runs)
        now = time.time()
        names.update(
            {
                "#cancel_requested_at": CANCEL_REQUESTED_AT,
                "#cancelled_at": CANCELLED_AT,
                "#dead_lettered_at": DEAD_LETTERED_AT,
                "#next_retry_at": NEXT_RETRY_AT,
                "#in_progress_expiry": self.in_progress_expiry_attr,
                "#life": LIFE,
            }
        )
        values.update({":at": {"N": f"{now:.3f}"}})
        ending = ["#dead_lettered_at = :at"]
        if dead_lettered is not None:
            ending = dead_lettered.assignments(":at", names, values)
        self._client(time_left_s).update_item(
            TableName=self.table_name,
            Key=self._key(record_id),
            UpdateExpression=(
                f"SET #status = :cancelled, #cancelled_at = :at, {', '.join(ending)} "
                "REMOVE #next_retry_at, #in_progress_expiry, #life"
            ),
            ConditionExpression=f"{condition} AND attribute_exists(#cancel_requested_at)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def ending(
        self,
        record_id: str,
        runs: int | None,
        *,
        message_id: str,
        body: str | None,
        tenant: str,
        time_left_s: float,
        unless_cancel_requested: bool = False,
        died_of: tuple[str, str] | None = None,
    ) -> None:
        """The key's message is in the DLQ: the record keeps that (ENDING) until another message of the key comes,
        so the message's own redelivery (its invocation ended before its acknowledgement, or what follows its dead
        letter failed) finishes it, running and sending nothing; any other message of the key finishes it first,
        then runs. `body`: a batch member's, counted dead by whoever finishes it. Conditioned as `forget` is; with
        `unless_cancel_requested`, a key an operator asked to stop is left CANCELLED instead, as `forget` leaves it.
        `died_of`: the dead letter's error type and message, kept as the key's last error (what a result reader says
        it died of; a run that failed before it already wrote its own)."""
        from sqs_jobs.worker.failure_path import DeadLettered

        dead_lettered = DeadLettered(message_id, body)
        names, values, condition = self._as_last_seen(record_id, runs)
        names.update(
            {
                "#pending": PENDING_DEAD_LETTER,
                "#in_progress_expiry": self.in_progress_expiry_attr,
                "#life": LIFE,
                "#expiry": self.expiry_attr,
                "#tenant": RECORD_TENANT,
            }
        )
        values.update(
            {
                ":at": {"N": f"{time.time():.3f}"},
                ":failed": {"S": FAILED},
                ":expiry": {"N": str(self._get_expiry_timestamp())},
                ":tenant": {"S": tenant},
            }
        )
        assignments = [
            "#status = :failed",
            *dead_lettered.assignments(":at", names, values),
            "#expiry = if_not_exists(#expiry, :expiry)",
            "#tenant = if_not_exists(#tenant, :tenant)",
        ]
        if died_of is not None:
            names.update({"#last_error_type": LAST_ERROR_TYPE, "#last_error": LAST_ERROR})
            values.update(
                {
                    ":error_type": {"S": died_of[0][:256] or "Exception"},
                    ":error": {"S": died_of[1][:MAX_ERROR_CHARS] or "(no message)"},
                }
            )
            assignments += ["#last_error_type = :error_type", "#last_error = :error"]
        removed = ["#pending", "#in_progress_expiry", "#life"]
        if body is None:
            names["#ending_body"] = ENDING_BODY
            removed.append("#ending_body")
        if unless_cancel_requested:
            names["#cancel_requested_at"] = CANCEL_REQUESTED_AT
            condition = f"{condition} AND attribute_not_exists(#cancel_requested_at)"
        try:
            self._client(time_left_s).update_item(
                TableName=self.table_name,
                Key=self._key(record_id),
                UpdateExpression="SET " + ", ".join(assignments) + " REMOVE " + ", ".join(removed),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as error:
            if not (unless_cancel_requested and is_condition_failure(error)):
                raise
            self._cancel_dead_lettered(record_id, runs, dead_lettered, time_left_s)

    def hold_for_dead_letter(self, entry: LedgerEntry, *, until_s: float, time_left_s: float) -> None:
        """A delivery that found the key's runs spent (or its dead letter pending) is about to dead-letter it from
        this record: it holds the record first, as a run's start does (INPROGRESS until `until_s`, its invocation's
        deadline), so that no other delivery of the key (another copy of the same published job, side by side)
        sends a second dead letter. Only the record as read, never one ENDING or held by a live run; refused
        (a condition failure): another delivery is dead-lettering it. The dead letter's ENDING write ends the
        hold; a delivery that dies first leaves it to expire, and the next one dead-letters the key."""
        names, values, condition = self._as_last_seen(entry.record_id, entry.runs)
        names.update(
            {
                "#in_progress_expiry": self.in_progress_expiry_attr,
                "#dead_lettered_at": DEAD_LETTERED_AT,
            }
        )
        values.update(
            {
                ":inprogress": {"S": INPROGRESS},
                ":now_in_millis": {"N": str(int(time.time() * 1000))},
                ":until": {"N": str(int(until_s * 1000))},
            }
        )
        if entry.runs is not None:  # (without `runs`, _as_last_seen refuses a live hold already)
            condition += (
                " AND NOT (#status = :inprogress AND attribute_exists(#in_progress_expiry) "
                "AND #in_progress_expiry >= :now_in_millis)"
            )
        self._client(time_left_s).update_item(
            TableName=self.table_name,
            Key=self._key(entry.record_id),
            UpdateExpression="SET #status = :inprogress, #in_progress_expiry = :until",
            ConditionExpression=f"{condition} AND attribute_not_exists(#dead_lettered_at)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def ended(self, entry: LedgerEntry, *, time_left_s: float) -> None:
        """The key's next delivery after its dead letter, what followed that dead letter done: its record goes (only
        the ENDING record read, never a newer one)."""
        self._client(time_left_s).delete_item(
            TableName=self.table_name,
            Key=self._key(entry.record_id),
            ConditionExpression="#dead_lettered_at = :at",
            ExpressionAttributeNames={"#dead_lettered_at": DEAD_LETTERED_AT},
            ExpressionAttributeValues={":at": {"N": _decimal(entry.dead_lettered_at)}},
        )

    def _as_last_seen(self, record_id: str, runs: int | None) -> tuple[dict[str, str], dict[str, Any], str]:
        """The condition of the writes after a dead letter: the record as the runtime last saw it (`runs`), or,
        with `runs` None, any record of the key no live run holds; never a completed or cancelled one."""
        names = {"#status": self.status_attr}
        values: dict[str, Any] = {":completed": {"S": COMPLETED}, ":cancelled": {"S": CANCELLED}}
        if runs is not None:
            condition = "#runs = :runs AND NOT (#status = :completed) AND NOT (#status = :cancelled)"
            names["#runs"] = RUNS
            values[":runs"] = {"N": str(runs)}
        else:
            condition = (
                "NOT (#status = :completed) AND NOT (#status = :cancelled) AND "
                "NOT (#status = :inprogress AND #in_progress_expiry >= :now_in_millis)"
            )
            names["#in_progress_expiry"] = self.in_progress_expiry_attr
            values[":inprogress"] = {"S": INPROGRESS}
            values[":now_in_millis"] = {"N": str(int(time.time() * 1000))}
        return names, values, condition


def _decimal(value: float | None) -> str:
    """A number as the record keeps it (written with 3 decimals)."""
    return f"{value or 0.0:.3f}"


def _refused_item(error: ClientError) -> Mapping[str, Any] | None:
    """The record a refused conditional write returned, or None if the error is not a refusal."""
    if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
        return None
    return error.response.get("Item")  # type: ignore[return-value]


def _listed(
    queue: str, state: LifeState, record_id: str, at_value: str, names: dict[str, str], values: dict[str, Any]
) -> list[str]:
    """The clauses that list the key under `state` in the sparse index, ordered by the value named `at_value`
    (none for a run that didn't say its queue)."""
    if not queue:
        return []
    names.update({"#life": LIFE, "#life_at": LIFE_AT})
    values[":life"] = {"S": life_partition(queue, state, record_id)}
    return ["#life = :life", f"#life_at = {at_value}"]


def is_condition_failure(error: BaseException) -> bool:
    """A conditional write the ledger refused because the record had moved on (not a store failure)."""
    return (
        isinstance(error, ClientError)
        and error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"
    )
