"""Unique and debounced jobs (`JobSpec.unique_for_s`, `JobSpec.debounce_s`), decided when a record is consumed,
just before its run.

Why at consume, in the worker: it then holds for every producer (JobPublisher, services in other languages,
EventBridge schedules, `jobctl enqueue`, redrives) and no producer needs a grant on the idempotency table. The
price: a copy that is dropped still crossed the queue.

Both are keyed by the job's unique key: its module's `unique_key(envelope)`, else the entity ID, within the job and
the envelope's tenant. Deliberately not the idempotency key: publishes of one entity under distinct idempotency
keys (its versions) are what they collapse. A copy's time is when its message was first sent: SQS's
SentTimestamp, which the runtime's fresh copies carry over as `jobs.sent_at`; never a time a producer wrote. A
key's state is one item of the idempotency table, `flow#unique#<sha256>` or `flow#debounce#<sha256>`, changed by
one conditional UpdateItem per delivery that returns the old item when its condition fails; it expires (the table's
TTL attribute) once no copy sent in its window can still be in the queue (its window's end plus the queue's
retention).

- unique: the first copy consumed claims the window from its send to its send + unique_for_s. A copy of another
  publish sent within a claimed window is acknowledged unrun (JobDropped, reason unique). Redeliveries, retries,
  fresh copies and redrives of the claiming publish carry its idempotency key, recorded as the claimant: they run,
  and idempotency answers them as ever. A copy sent a whole window or more before the claim began belongs to an
  earlier window: it runs, and the claim stays.
- debounce: each copy registers itself as its key's latest (by first send, then by its idempotency key's record
  ID, so ties break the same way everywhere) and, while its window (its send + debounce_s) is open, is handed back
  until the window ends, spending no run (JobDeferred, reason debounce). A copy that finds a later one registered
  is acknowledged unrun (JobDropped, reason superseded). At its window's end the latest runs and is recorded as the
  one that fired, so its own retries run even once a later publish has registered. When neither the publisher nor
  the job named its idempotency key, it runs under `<job>:<id>@<its first send>`: the next burst is a new run,
  not a duplicate of this one for the rest of the idempotency expiry.
See docs/failure-semantics.md, "Unique and debounced jobs".
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sqs_jobs.envelope import Envelope
from sqs_jobs.specs import JobSpec, QueueSpec
from sqs_jobs.worker.errors import DebounceWaitError, RuntimeInfrastructureError, UniqueKeyError
from sqs_jobs.worker.names import (
    CLAIMANT,
    CLAIMANT_KEY,
    CLAIMANT_MESSAGE,
    CLAIMED_AT,
    DROPPED,
    FIRED_AT,
    FIRED_RECORD,
    FIRED_RUN_KEY,
    FIRED_SENT_MS,
    FLOW_DEBOUNCE_PREFIX,
    FLOW_JOB,
    FLOW_KEY,
    FLOW_TENANT,
    FLOW_UNIQUE_PREFIX,
    LATEST_KEY,
    LATEST_MESSAGE,
    LATEST_RECORD,
    LATEST_SENT_MS,
    LIFE,
    LIFE_AT,
    WINDOW_END_MS,
    WINDOW_START_MS,
    DeadLetterFailure,
    DeferReason,
    DropReason,
    LifeState,
    life_partition,
)
from sqs_jobs.worker.settings import idempotency_record_id

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

    from sqs_jobs.worker.invocation import Delivery
    from sqs_jobs.worker.jobs import LoadedJob
    from sqs_jobs.worker.observability import BatchTally
    from sqs_jobs.worker.settlement import Settlement, Verdict

# What an item repeats of a key or message ID for operators: the envelope bounds them, this caps the repeat.
MAX_TEXT_CHARS = 1024
_CONDITION_FAILED = "ConditionalCheckFailedException"


class FlowKind(Enum):
    UNIQUE = FLOW_UNIQUE_PREFIX
    DEBOUNCE = FLOW_DEBOUNCE_PREFIX


def flow_kind(spec: JobSpec) -> FlowKind | None:
    """The job's flow setting, if it has one."""
    if spec.unique_for_s is not None:
        return FlowKind.UNIQUE
    if spec.debounce_s is not None:
        return FlowKind.DEBOUNCE
    return None


def iso_ms(epoch_ms: int) -> str:
    """`2026-12-02T04:00:07.250Z`: a first send as operators read it, and as a debounced run's key ends."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class FlowKey:
    """What a unique or debounced job is unique by: the job, its unique key within the job, and the tenant."""

    job: str
    key: str
    tenant: str | None = None

    @property
    def text(self) -> str:
        return f"{self.job}:{self.key}"

    def record_id(self, kind: FlowKind) -> str:
        # JSON keeps the parts apart (a key holding the separator can't collide with another job's or tenant's).
        parts = json.dumps([self.job, self.key, self.tenant], ensure_ascii=False, separators=(",", ":"))
        return kind.value + hashlib.sha256(parts.encode()).hexdigest()


def flow_key(spec: JobSpec, unique_key: Callable[[Envelope], str] | None, envelope: Envelope) -> FlowKey:
    """The envelope's unique key: the job module's `unique_key(envelope)`, else the entity ID, and the envelope's
    tenant if it carries one. A key function that raises or gives a blank key is a UniqueKeyError."""
    try:
        key = unique_key(envelope) if unique_key is not None else envelope.id
    except Exception as error:
        raise UniqueKeyError(f"job {spec.name!r} unique_key raised {type(error).__name__}: {error}") from error
    if not isinstance(key, str) or not key.strip():
        raise UniqueKeyError(f"job {spec.name!r} produced unique key {key!r}; it must be a non-blank string")
    tenant = envelope.to_dict().get("tenant")
    return FlowKey(spec.name, key, None if tenant is None else str(tenant))


@dataclass(frozen=True, order=True)
class Copy:
    """A publish as unique and debounce tell them apart: when it was first sent (epoch ms), then its idempotency
    key's record ID. Copies alike in both are one publish (a redelivery, a fresh copy): the key and message ID are
    what operators are shown."""

    sent_ms: int
    record: str
    key: str = field(default="", compare=False)
    message_id: str = field(default="", compare=False)


# --- unique ----------------------------------------------------------------------------------------------------


class UniqueVerdict(Enum):
    CLAIM = "claim"  # no claim covers its send: it claims the window from its send, and runs
    CLAIMANT = "claimant"  # a copy of the publish that claimed the window: runs
    EARLIER = "earlier"  # sent a window or more before the claim began, in an earlier window: runs
    DROP = "drop"  # sent within another publish's window: acknowledged unrun

    @property
    def runs(self) -> bool:
        return self is not UniqueVerdict.DROP


@dataclass(frozen=True)
class Claim:
    """A unique key's window: from the claiming copy's first send to `end_ms`, and that copy."""

    start_ms: int
    end_ms: int
    claimant: Copy

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Claim:
        return cls(
            start_ms=_int(item, WINDOW_START_MS),
            end_ms=_int(item, WINDOW_END_MS),
            claimant=Copy(
                sent_ms=_int(item, WINDOW_START_MS),
                record=_text(item, CLAIMANT),
                key=_text(item, CLAIMANT_KEY),
                message_id=_text(item, CLAIMANT_MESSAGE),
            ),
        )


def unique_verdict(claim: Claim | None, copy: Copy, window_ms: int) -> UniqueVerdict:
    """What becomes of `copy` of a unique job whose key's live claim is `claim` (None: no live claim)."""
    if claim is None or claim.end_ms <= copy.sent_ms:
        return UniqueVerdict.CLAIM
    if claim.claimant.record == copy.record:
        return UniqueVerdict.CLAIMANT
    if copy.sent_ms <= claim.start_ms - window_ms:
        return UniqueVerdict.EARLIER
    return UniqueVerdict.DROP


# --- debounce --------------------------------------------------------------------------------------------------


class DebounceVerdict(Enum):
    WAIT = "wait"  # its window is open: handed back until it ends
    RUN = "run"  # its window has ended and no later publish came; or it is the copy that fired, come back
    SUPERSEDED = "superseded"  # a later publish registered: acknowledged unrun

    @property
    def runs(self) -> bool:
        return self is DebounceVerdict.RUN


@dataclass(frozen=True)
class DebounceState:
    """A debounced key's latest copy, and the copy that last ran at its window's end (with the key it ran under)."""

    latest: Copy | None
    fired: Copy | None = None
    fired_run_key: str | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> DebounceState:
        latest = None
        if LATEST_SENT_MS in item:
            latest = Copy(
                sent_ms=_int(item, LATEST_SENT_MS),
                record=_text(item, LATEST_RECORD),
                key=_text(item, LATEST_KEY),
                message_id=_text(item, LATEST_MESSAGE),
            )
        fired = None
        if FIRED_SENT_MS in item:
            fired = Copy(sent_ms=_int(item, FIRED_SENT_MS), record=_text(item, FIRED_RECORD))
        return cls(latest=latest, fired=fired, fired_run_key=item.get(FIRED_RUN_KEY, {}).get("S"))


def debounce_verdict(state: DebounceState | None, copy: Copy, window_ms: int, now_ms: int) -> DebounceVerdict:
    """What becomes of `copy` of a debounced job whose key's state is `state` (None: none live)."""
    if state is not None and state.fired == copy:
        return DebounceVerdict.RUN  # the winner's retries and redeliveries run, whatever registered since
    if state is not None and state.latest is not None and state.latest > copy:
        return DebounceVerdict.SUPERSEDED
    if now_ms < copy.sent_ms + window_ms:
        return DebounceVerdict.WAIT
    return DebounceVerdict.RUN


def wait_s(copy: Copy, window_ms: int, now_ms: int) -> int:
    """Whole seconds until `copy`'s window ends (at least 1: a hand-back of 0 would come straight back)."""
    return max(1, math.ceil((copy.sent_ms + window_ms - now_ms) / 1000))


def debounced_run_key(key: str, copy: Copy) -> str:
    """The idempotency key a debounced job runs under when the runtime derived its key: one per firing copy."""
    return f"{key}@{iso_ms(copy.sent_ms)}"


# --- the state's store: conditional writes to the idempotency table --------------------------------------------


def _int(item: Mapping[str, Any], name: str) -> int:
    return int(item.get(name, {}).get("N", "0"))


def _text(item: Mapping[str, Any], name: str) -> str:
    return str(item.get(name, {}).get("S", ""))


def _s(value: str) -> dict[str, str]:
    return {"S": value[:MAX_TEXT_CHARS] or "-"}


def _n(value: float) -> dict[str, str]:
    return {"N": str(value)}


def condition_failed_item(error: ClientError) -> Mapping[str, Any] | None:
    """The item a conditional write was refused on (ReturnValuesOnConditionCheckFailure), or None when the error is
    not a refused condition."""
    if error.response.get("Error", {}).get("Code") != _CONDITION_FAILED:
        return None
    return error.response.get("Item") or {}  # type: ignore[return-value]


@dataclass(frozen=True)
class Decision:
    """What the store decided for one copy, and the state it decided on (the old item)."""

    verdict: UniqueVerdict | DebounceVerdict
    claim: Claim | None = None
    state: DebounceState | None = None


class FlowStore:
    """Unique claims and debounce registrations in the idempotency table: one conditional UpdateItem per copy."""

    def __init__(self, client_for: Callable[[], Any], table: str) -> None:
        self._client_for = client_for
        self._table = table

    def _identity(self, key: FlowKey, names: dict[str, str], values: dict[str, Any]) -> list[str]:
        names.update({"#job": FLOW_JOB, "#flow_key": FLOW_KEY})
        values.update({":job": _s(key.job), ":flow_key": _s(key.text)})
        clauses = ["#job = :job", "#flow_key = :flow_key"]
        if key.tenant is not None:
            names["#tenant"] = FLOW_TENANT
            values[":tenant"] = _s(key.tenant)
            clauses.append("#tenant = :tenant")
        return clauses

    def _update(
        self,
        record_id: str,
        sets: list[str],
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        removes: tuple[str, ...] = (),
    ) -> tuple[bool, Mapping[str, Any]]:
        """The write; (True, the old item) when it was made, (False, the item that refused it) when not."""
        try:
            response = self._client_for().update_item(
                TableName=self._table,
                Key={"id": {"S": record_id}},
                UpdateExpression="SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else ""),
                ConditionExpression=condition,
                ExpressionAttributeNames={"#id": "id", "#expiry": "expiration", **names},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            item = condition_failed_item(error)
            if item is None:
                raise
            return False, item
        return True, response.get("Attributes") or {}

    def claim(self, key: FlowKey, copy: Copy, window_ms: int, keep_s: int, now: float) -> Decision:
        """Claim the window from `copy`'s send unless a live claim covers it; else decide by that claim."""
        end_ms = copy.sent_ms + window_ms
        names = {
            "#start": WINDOW_START_MS,
            "#end": WINDOW_END_MS,
            "#claimant": CLAIMANT,
            "#claimant_key": CLAIMANT_KEY,
            "#claimant_message": CLAIMANT_MESSAGE,
            "#claimed_at": CLAIMED_AT,
        }
        values: dict[str, Any] = {
            ":start": _n(copy.sent_ms),
            ":end": _n(end_ms),
            ":claimant": _s(copy.record),
            ":claimant_key": _s(copy.key),
            ":claimant_message": _s(copy.message_id),
            ":claimed_at": _n(round(now, 3)),
            ":expiry": _n(math.ceil(end_ms / 1000) + keep_s),
            ":now": _n(int(now)),
        }
        sets = [
            "#start = :start",
            "#end = :end",
            "#claimant = :claimant",
            "#claimant_key = :claimant_key",
            "#claimant_message = :claimant_message",
            "#claimed_at = :claimed_at",
            "#expiry = :expiry",
            *self._identity(key, names, values),
        ]
        # The same rule as unique_verdict's CLAIM: no live claim, or one that ended at or before this send.
        condition = "attribute_not_exists(#id) OR #expiry < :now OR #end <= :start"
        written, item = self._update(key.record_id(FlowKind.UNIQUE), sets, condition, names, values)
        if written:
            return Decision(UniqueVerdict.CLAIM, claim=Claim(copy.sent_ms, end_ms, copy))
        claim = Claim.from_item(item)
        verdict = unique_verdict(claim, copy, window_ms)
        # An item the condition refused but the rule would not (written by hand, without a window): runs unclaimed.
        return Decision(UniqueVerdict.EARLIER if verdict is UniqueVerdict.CLAIM else verdict, claim=claim)

    def register(
        self,
        key: FlowKey,
        copy: Copy,
        window_ms: int,
        keep_s: int,
        now: float,
        run_key: str | None,
        queue: str | None = None,
    ) -> Decision:
        """Register `copy` as its key's latest unless a later one is; with `run_key` (its window has ended) also
        as the copy that fired, running under that key. Decides by the state found. `queue`: the job's, under which
        a registered publish waiting out its window is listed (the `jobs-by-life` index, until its window's end:
        `jobctl job list`), unlisted when it fires; None: not listed."""
        names = {
            "#latest_sent": LATEST_SENT_MS,
            "#latest_record": LATEST_RECORD,
            "#latest_key": LATEST_KEY,
            "#latest_message": LATEST_MESSAGE,
        }
        values: dict[str, Any] = {
            ":sent": _n(copy.sent_ms),
            ":record": {"S": copy.record},
            ":key": _s(copy.key),
            ":message": _s(copy.message_id),
            ":expiry": _n(math.ceil((copy.sent_ms + window_ms) / 1000) + keep_s),
            ":now": _n(int(now)),
        }
        sets = [
            "#latest_sent = :sent",
            "#latest_record = :record",
            "#latest_key = :key",
            "#latest_message = :message",
            "#expiry = :expiry",
            *self._identity(key, names, values),
        ]
        if run_key is not None:
            names.update(
                {
                    "#fired_sent": FIRED_SENT_MS,
                    "#fired_record": FIRED_RECORD,
                    "#fired_key": FIRED_RUN_KEY,
                    "#fired_at": FIRED_AT,
                }
            )
            values.update({":fired_key": _s(run_key), ":fired_at": _n(round(now, 3))})
            sets += [
                "#fired_sent = :sent",
                "#fired_record = :record",
                "#fired_key = :fired_key",
                "#fired_at = :fired_at",
            ]
        record_id = key.record_id(FlowKind.DEBOUNCE)
        removes: tuple[str, ...] = ()
        if queue is not None:
            names.update({"#life": LIFE, "#life_at": LIFE_AT})
            if run_key is None:  # waiting out its window: listed as due at the window's end
                values.update(
                    {
                        ":life": _s(life_partition(queue, LifeState.RETRYING, record_id)),
                        ":window_end": _n(round((copy.sent_ms + window_ms) / 1000, 3)),
                    }
                )
                sets += ["#life = :life", "#life_at = :window_end"]
            else:
                removes = ("#life", "#life_at")
        # This copy is the latest or later than it (the order of Copy: first send, then record ID).
        condition = (
            "attribute_not_exists(#id) OR #expiry < :now OR #latest_sent < :sent OR "
            "(#latest_sent = :sent AND #latest_record <= :record)"
        )
        written, item = self._update(record_id, sets, condition, names, values, removes)
        live = bool(item) and _int(item, "expiration") >= int(now)  # an expired item is no state (as in the condition)
        before = DebounceState.from_item(item) if live else None
        if written:
            return Decision(DebounceVerdict.RUN if run_key is not None else DebounceVerdict.WAIT, state=before)
        verdict = debounce_verdict(before, copy, window_ms, int(now * 1000))
        # Refused, yet neither later nor fired by the state found (an item written by hand): it waits or runs.
        return Decision(verdict, state=before)


# --- the worker's part: one call before a record's run ---------------------------------------------------------


@dataclass(frozen=True)
class Admitted:
    """The record runs, under this idempotency key."""

    key: str


class Uniqueness:
    """Decides, before a record's run, whether its unique or debounced job runs now, waits or is dropped."""

    def __init__(
        self,
        queue: QueueSpec,
        store: FlowStore,
        settlement: Settlement,
        tally: BatchTally,
        logger: Logger,
        forget: Callable[[str], None],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._queue = queue
        self._store = store
        self._settlement = settlement
        self._tally = tally
        self._logger = logger
        # Deletes a key record no run holds (the run ledger's `forget`): a superseded winner's failed record.
        self._forget = forget
        self._clock = clock or time.time

    def admit(self, job: LoadedJob, envelope: Envelope, delivery: Delivery, key: str) -> Admitted | Verdict:
        """The key to run under, or the verdict on a copy that doesn't run now. Free for a job with neither
        setting."""
        spec = job.spec
        kind = flow_kind(spec)
        if kind is None:
            return Admitted(key)
        try:
            unique = flow_key(spec, job.unique_key_function, envelope)
        except UniqueKeyError as error:
            from sqs_jobs.worker.classify import classify

            return self._settlement.dead_letter_of(
                delivery, envelope, error, DeadLetterFailure.PERMANENT, classify(error).reason
            )
        self._logger.thread_safe_append_keys(unique_key=unique.text)
        now = self._clock()
        # SQS stamps every message it stores; the clock only stands in for an event that lacks it.
        sent_ms = delivery.first_sent_ms or int(now * 1000)
        copy = Copy(sent_ms, idempotency_record_id(key), key, delivery.record.message_id)
        try:
            if kind is FlowKind.UNIQUE:
                assert spec.unique_for_s is not None
                return self._unique(envelope, unique, copy, spec.unique_for_s * 1000, now, key)
            assert spec.debounce_s is not None
            return self._debounce(job, envelope, delivery, unique, copy, spec.debounce_s * 1000, now, key)
        except Exception as error:
            # The idempotency table failed the runtime, not the job: back after a backoff, no run spent.
            self._tally.runtime_fault("idempotency_store")
            self._logger.exception("the unique/debounce state could not be written; handed back")
            fault = RuntimeInfrastructureError(f"unique/debounce state: {error}")
            return self._settlement.hand_back(
                delivery,
                envelope,
                self._settlement.backoff(delivery.receives),
                DeferReason.RUNTIME_FAULT,
                fault,
                {"error": str(fault)},
            )

    def _unique(
        self, envelope: Envelope, unique: FlowKey, copy: Copy, window_ms: int, now: float, key: str
    ) -> Admitted | Verdict:
        decision = self._store.claim(unique, copy, window_ms, self._queue.retention_s, now)
        if decision.verdict.runs:
            return Admitted(key)
        claim = decision.claim
        assert claim is not None
        return self._dropped(
            envelope,
            DropReason.UNIQUE,
            "unique job: another publish of its key claimed the window it was sent in; acknowledged without running",
            {
                "sent_at": iso_ms(copy.sent_ms),
                "window_ends": iso_ms(claim.end_ms),
                "claimed_by_key": claim.claimant.key,
                "claimed_by_message": claim.claimant.message_id,
            },
        )

    def _debounce(
        self,
        job: LoadedJob,
        envelope: Envelope,
        delivery: Delivery,
        unique: FlowKey,
        copy: Copy,
        window_ms: int,
        now: float,
        key: str,
    ) -> Admitted | Verdict:
        now_ms = int(now * 1000)
        ended = now_ms >= copy.sent_ms + window_ms
        # A key the runtime derived would be the same for every burst: each firing copy runs under its own.
        run_key = debounced_run_key(key, copy) if job.derives_key(envelope) else key
        decision = self._store.register(
            unique, copy, window_ms, self._queue.retention_s, now, run_key if ended else None, self._queue.name
        )
        if decision.verdict is DebounceVerdict.WAIT:
            delay_s = min(wait_s(copy, window_ms, now_ms), self._queue.max_debounce_s)
            ends = iso_ms(copy.sent_ms + window_ms)
            return self._settlement.hand_back(
                delivery,
                envelope,
                delay_s,
                DeferReason.DEBOUNCE,
                DebounceWaitError(f"debounced until {ends}"),
                {"sent_at": iso_ms(copy.sent_ms), "window_ends": ends},
            )
        state = decision.state
        if decision.verdict is DebounceVerdict.SUPERSEDED:
            latest = state.latest if state is not None else None
            return self._dropped(
                envelope,
                DropReason.SUPERSEDED,
                "debounced job: a later publish of its key came within its window; acknowledged without running",
                {
                    "sent_at": iso_ms(copy.sent_ms),
                    "latest_sent_at": iso_ms(latest.sent_ms) if latest else None,
                    "latest_message": latest.message_id if latest else None,
                },
            )
        if state is not None and state.fired is not None and state.fired != copy and state.fired_run_key:
            self._forget_superseded_winner(state.fired_run_key, run_key)
        return Admitted(run_key)

    def _forget_superseded_winner(self, fired_run_key: str, run_key: str) -> None:
        """A newer copy fires: the previous winner's key record, if its run failed and nothing holds it, is
        deleted, so it isn't listed as retrying for ever (its next delivery is dropped as superseded)."""
        if fired_run_key == run_key:
            return
        try:
            self._forget(idempotency_record_id(fired_run_key))
        except ClientError as error:
            if condition_failed_item(error) is None:
                self._tally.runtime_fault("idempotency_store")
                self._logger.exception("could not delete a superseded winner's key record")
        except Exception:
            self._tally.runtime_fault("idempotency_store")
            self._logger.exception("could not delete a superseded winner's key record")

    def _dropped(self, envelope: Envelope, reason: DropReason, message: str, details: dict[str, Any]) -> Verdict:
        from sqs_jobs.worker.invocation import Outcome
        from sqs_jobs.worker.settlement import Done

        self._tally.add(envelope.job, DROPPED, reason=reason)
        self._logger.info(message, extra={"reason": reason.value, **details})
        return Done(Outcome.DROPPED)
