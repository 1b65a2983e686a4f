"""Counting a batch's members as they end, and publishing its callbacks (sqs_jobs.batches; docs/workflows.md).

A member that succeeded (or whose duplicate was answered from its key's record) adds its index to the batch's
`succeeded` set and takes it out of `dead`; a member dead-lettered (after the DLQ has it) adds it to `dead`, unless
it has succeeded. One UpdateItem per member end, idempotent (a set holds an index once): a redelivery after a
crash between counting and acknowledging recounts harmlessly. The update returns the item as it is after it
(ALL_NEW: a few KB, the members' list is an item of its own); the one that makes a set whole publishes its
callback with the key the batch names (`callback_key`), so a second publish (a recount, or two workers completing
at once) is answered as a duplicate, and then marks it published, once (its condition).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqs_jobs.batches import (
    BATCH_ITEM_PREFIX,
    COMPLETE,
    COMPLETED_AT,
    DEAD,
    EXPIRATION,
    LAST_ENDED_AT,
    MEMBER_DIGESTS,
    MEMBERS,
    ON_COMPLETE,
    ON_SUCCESS,
    ON_SUCCESS_ENVELOPE,
    PUBLISHED_AT,
    SIZE,
    STALLED_AFTER_S,
    SUCCEEDED,
    SUCCEEDED_AT,
    SUCCESS,
    BatchMember,
    BatchMemberError,
    batch_item_id,
    callback_key,
    listed_digest,
    member_digest,
    member_indices,
    member_name,
    members_item_id,
    open_lives,
)
from sqs_jobs.envelope import Envelope, parse_envelope
from sqs_jobs.worker.key_life import scoped_key
from sqs_jobs.worker.names import LIFE, LIFE_AT
from sqs_jobs.worker.run_ledger import is_condition_failure
from sqs_jobs.worker.settings import idempotency_record_id

if TYPE_CHECKING:
    from sqs_jobs.publisher import JobPublisher

_WHOLE_AT = {SUCCESS: SUCCEEDED_AT, COMPLETE: COMPLETED_AT}
_CALLBACK = {SUCCESS: ON_SUCCESS, COMPLETE: ON_COMPLETE}
# What the heartbeat reads of an open batch: its counts, its callbacks and whether each was published.
_WATCHED = {
    f"#{name}": name
    for name in ("id", SIZE, SUCCEEDED, DEAD, LIFE_AT, ON_SUCCESS_ENVELOPE, *PUBLISHED_AT.values(), *_CALLBACK.values())
}
# How long after a batch's last member ended a heartbeat finishes what its count left: Lambda's longest timeout,
# so the count's invocation has ended (its handed-back member would have been counted again by then).
OWED_AFTER_S = 900


@dataclass(frozen=True)
class Counted:
    """A batch as one member's count left it: its size, its sets, and whether each callback was published."""

    size: int
    succeeded: int
    dead: int
    published: dict[str, bool]
    # Each kind's callback, `<job>:<id>`, or None.
    callbacks: dict[str, str | None]
    # A chain's next step: the whole envelope on_success publishes (sqs_jobs.chains), or None.
    next_step: str | None = None

    def whole(self, kind: str) -> bool:
        ended = self.succeeded if kind == SUCCESS else self.succeeded + self.dead
        return ended >= self.size

    def due(self) -> list[str]:
        """The kinds whose sets are whole and whose callbacks are not marked published."""
        return [kind for kind in (SUCCESS, COMPLETE) if self.whole(kind) and not self.published[kind]]

    def due_jobs(self) -> set[str]:
        """The jobs the due callbacks publish (a chain's next step's, for its success)."""
        jobs = set()
        for kind in self.due():
            if kind == SUCCESS and self.next_step is not None:
                jobs.add(str(json.loads(self.next_step).get("job")))
            elif (callback := self.callbacks[kind]) is not None:
                jobs.add(callback.split(":", 1)[0])
        return jobs


@dataclass
class OpenBatches:
    """What a heartbeat's look at the open batches found: how many stall, the callbacks it published (batch ID,
    kind) for batches whose last count left them, and what failed as it tried."""

    stalled: int = 0
    finished: list[tuple[str, str]] = field(default_factory=list)
    failures: list[Exception] = field(default_factory=list)


def _counted(attributes: Mapping[str, Any]) -> Counted:
    """A batch's counting item (DynamoDB's typed JSON) as a count reads it."""
    return Counted(
        size=int(attributes[SIZE]["N"]),
        succeeded=len(member_indices(attributes, SUCCEEDED)),
        dead=len(member_indices(attributes, DEAD)),
        published={kind: attributes.get(name, {}).get("N", "0") != "0" for kind, name in PUBLISHED_AT.items()},
        callbacks={kind: attributes.get(name, {}).get("S") for kind, name in _CALLBACK.items()},
        next_step=attributes.get(ON_SUCCESS_ENVELOPE, {}).get("S"),
    )


def _envelope_of(text: str) -> Envelope:
    """A next step's envelope as its chain stored it (checked again when it is published)."""
    job = json.loads(text).get("job")
    return parse_envelope(text, [job] if isinstance(job, str) else [])


class BatchMembers:
    """The worker's count of batch members, in the idempotency table; `publisher` sends the callbacks."""

    def __init__(
        self,
        table: str,
        dynamodb: Callable[[], Any],
        publisher: Callable[[], JobPublisher],
        retention_s: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._table = table
        self._dynamodb = dynamodb
        self._publisher = publisher
        # How long after a member's end its batch may still matter: its DLQ's retention (a redrive counts).
        self._retention_s = retention_s
        self._clock = clock

    def succeeded(self, envelope: Envelope) -> list[str]:
        """Count `envelope`'s member as succeeded; returns the callbacks this count published (kinds). Raises
        BatchMemberError when the batch does not hold it (forged, copied onto another message, or expired)."""
        member = envelope.batch
        assert member is not None
        unlisted = self._unlisted(envelope, member)
        if unlisted is not None:
            raise BatchMemberError(f"{unlisted}: its `batch` field was copied or forged; nothing was counted")
        counted = self._count(member, add=SUCCEEDED, delete=DEAD)
        if counted is None:
            raise BatchMemberError(
                f"batch {member.batch_id} has no member {member.index} (no such batch, or it expired): its `batch` "
                "field was not written by JobPublisher.batch for this message; nothing was counted"
            )
        return self._publish_due(member.batch_id, counted)

    def dead_lettered(self, envelope: Envelope) -> list[str]:
        """Count `envelope`'s member as dead (after the DLQ has it), unless it succeeded; returns the callbacks
        this count published. A batch that does not hold it counts nothing (the dead letter says why it died)."""
        member = envelope.batch
        assert member is not None
        if self._unlisted(envelope, member) is not None:
            return []  # another message's place in the batch: its own dead letter says why it died
        counted = self._count(member, add=DEAD, unless_in=SUCCEEDED)
        return self._publish_due(member.batch_id, counted) if counted is not None else []

    def _unlisted(self, envelope: Envelope, member: BatchMember) -> str | None:
        """Why the batch does not list this message at its index, or None: it does, or the list is gone (expired
        before the batch's counts: a redrive weeks later), or has no such index; then the count's own condition
        decides. A batch published with digests lists the member's whole envelope (sqs_jobs.batches.member_digest):
        a message of the same job and ID under another key, tenant or fields is another run, not the member. One
        published before them lists `<job>:<id>` only, and is held to that."""
        found = self._dynamodb().get_item(
            TableName=self._table,
            Key={"id": {"S": members_item_id(member.batch_id)}},
            # The whole list: a read is billed by the item's size whatever it projects.
            ProjectionExpression="#members, #digests",
            ExpressionAttributeNames={"#members": MEMBERS, "#digests": MEMBER_DIGESTS},
            ConsistentRead=True,
        )
        item = found.get("Item", {})
        entries = item.get(MEMBERS, {}).get("L", [])
        if member.index >= len(entries):
            return None
        listed = str(entries[member.index]["S"])
        mine = member_name(envelope.job, envelope.id)
        said = f"batch {member.batch_id}'s member {member.index} is {listed!r}"
        if listed != mine:
            return f"{said}, not this message's {mine!r}"
        digest = listed_digest(item, member.index)
        if digest is not None and digest != member_digest(envelope):
            return f"{said} as it was published, not this message of it under another key, tenant or fields"
        return None

    def _count(
        self, member: BatchMember, add: str, delete: str | None = None, unless_in: str | None = None
    ) -> Counted | None:
        """Add the member's index to the set `add` (and take it out of `delete`), unless the set `unless_in` holds
        it; None when the condition refused it (no such batch or member, or `unless_in` holds it)."""
        now = int(self._clock())
        names = {
            "#id": "id",
            "#add": add,
            "#size": SIZE,
            "#last": LAST_ENDED_AT,
            "#life_at": "life_at",
            "#expiration": EXPIRATION,
        }
        expression = "ADD #add :index SET #last = :now, #life_at = :now, #expiration = :expires"
        condition = "attribute_exists(#id) AND :member < #size"
        if delete is not None:
            names["#delete"] = delete
            expression += " DELETE #delete :index"
        if unless_in is not None:
            names["#unless"] = unless_in
            condition += " AND NOT contains(#unless, :member)"
        try:
            response = self._dynamodb().update_item(
                TableName=self._table,
                Key={"id": {"S": batch_item_id(member.batch_id)}},
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={
                    ":index": {"NS": [str(member.index)]},
                    ":member": {"N": str(member.index)},
                    ":now": {"N": str(now)},
                    ":expires": {"N": str(now + self._retention_s)},
                },
                ReturnValues="ALL_NEW",
            )
        except Exception as error:
            if is_condition_failure(error):
                return None
            raise
        return _counted(response.get("Attributes", {}))

    def _publish_due(self, batch_id: str, counted: Counted, skip: Collection[str] = ()) -> list[str]:
        """Publish the callbacks of the sets a count found whole and not yet marked (but those of kinds in `skip`),
        then mark them (one write for both when both are due); the kinds marked. A mark another count made first
        means that count published too: ours was then a duplicate, answered from the callback's key."""
        due = counted.due()
        if not due:
            return []
        for kind in (kind for kind in due if kind not in skip):
            callback = counted.callbacks[kind]
            if kind == SUCCESS and counted.next_step is not None:
                # A chain's next step: its own envelope (its key, its batch), so a second publish is a duplicate.
                self._publisher().publish_many([_envelope_of(counted.next_step)])
            elif callback is not None:
                job, entity_id = callback.split(":", 1)
                self._publisher().publish(job, entity_id, key=callback_key(batch_id, kind))
        marked = self._mark(batch_id, due)
        if not marked and len(due) > 1:  # another count marked one of them: mark each alone
            marked = [kind for kind in due if self._mark(batch_id, [kind])]
        return [kind for kind in marked if counted.callbacks[kind] is not None]

    def watch_open(self, index: str, publishable: Collection[str], limit: int = 1000) -> OpenBatches:
        """The heartbeat's look at the open batches (docs/workflows.md, "Batches that stall"): a Query per shard of
        the index of things in flight, for those no member has ended in for `OWED_AFTER_S` (at most `limit` a shard).

        It finishes each of them that every member has ended in: the count that made it whole failed to publish or
        mark its callbacks, and so did the write that would have brought its member back to try again
        (sqs_jobs.worker.settlement). That count's invocation is long over, so nobody else will. It publishes only
        the callbacks of jobs in `publishable`, this worker's routes (every member's queue routes its batch's
        callbacks), by the keys the batch names, so a callback published twice runs once. Of the rest, it counts
        the stalled ones: no member ended for `STALLED_AFTER_S`."""
        now = self._clock()
        seen = OpenBatches()
        query = self._dynamodb().get_paginator("query")
        for life in open_lives():
            pages = query.paginate(
                TableName=self._table,
                IndexName=index,
                KeyConditionExpression=f"#life = :life AND #{LIFE_AT} < :before",
                ProjectionExpression=", ".join(_WATCHED),
                ExpressionAttributeNames={"#life": LIFE, **_WATCHED},
                ExpressionAttributeValues={":life": {"S": life}, ":before": {"N": str(int(now - OWED_AFTER_S))}},
                PaginationConfig={"MaxItems": limit},
            )
            for item in (item for page in pages for item in page.get("Items", [])):
                stalled = int(item.get(LIFE_AT, {}).get("N", "0")) < now - STALLED_AFTER_S
                try:  # one batch that can't be read or finished stops neither the others nor the count
                    finished = self._finish(item, publishable)
                except Exception as error:
                    seen.failures.append(error)
                else:
                    if finished is not None:  # owed, and finished now: not stalled
                        seen.finished.extend(finished)
                        stalled = False
                seen.stalled += stalled
        return seen

    def _finish(self, item: Mapping[str, Any], publishable: Collection[str]) -> list[tuple[str, str]] | None:
        """Publish and mark what the open batch `item` is owed, if every member has ended: (batch ID, kind) of
        each callback published (none: only marked); None when it is owed nothing this worker may publish. A
        callback whose run has a record already (the count published it, then failed to mark it) is marked, not
        published again: a second copy of a callback that has since been dead-lettered would run it again."""
        counted = _counted(item)
        if not counted.due() or not counted.due_jobs() <= set(publishable):
            return None
        batch_id = item["id"]["S"].removeprefix(BATCH_ITEM_PREFIX)
        ran = {kind for kind in counted.due() if self._callback_ran(batch_id, counted, kind)}
        published = self._publish_due(batch_id, counted, skip=ran)
        return [(batch_id, kind) for kind in published if kind not in ran]

    def _callback_ran(self, batch_id: str, counted: Counted, kind: str) -> bool:
        """Whether the `kind` callback has a key record: it was published and taken by a worker."""
        if kind == SUCCESS and counted.next_step is not None:
            step = _envelope_of(counted.next_step)
            key = scoped_key(step.job, step.key or step.id, step.tenant)
        elif (callback := counted.callbacks[kind]) is not None:
            key = scoped_key(callback.split(":", 1)[0], callback_key(batch_id, kind), None)
        else:
            return False
        found = self._dynamodb().get_item(
            TableName=self._table,
            Key={"id": {"S": idempotency_record_id(key)}},
            ProjectionExpression="#id",
            ExpressionAttributeNames={"#id": "id"},
            ConsistentRead=True,
        )
        return "Item" in found

    def _mark(self, batch_id: str, kinds: list[str]) -> list[str]:
        """Mark `kinds` published (and when their sets became whole), only if none of them was; the kinds marked.
        Once every member has ended the batch leaves the open batches' index."""
        now = str(int(self._clock()))
        names: dict[str, str] = {}
        assignments, conditions = [], []
        for n, kind in enumerate(kinds):
            names.update({f"#published{n}": PUBLISHED_AT[kind], f"#whole{n}": _WHOLE_AT[kind]})
            assignments.append(f"#published{n} = :now, #whole{n} = if_not_exists(#whole{n}, :now)")
            conditions.append(f"#published{n} = :zero")
        expression = "SET " + ", ".join(assignments)
        if COMPLETE in kinds:
            names["#life"] = "life"
            expression += " REMOVE #life"
        try:
            self._dynamodb().update_item(
                TableName=self._table,
                Key={"id": {"S": batch_item_id(batch_id)}},
                UpdateExpression=expression,
                ConditionExpression=" AND ".join(conditions),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":now": {"N": now}, ":zero": {"N": "0"}},
            )
        except Exception as error:
            if is_condition_failure(error):
                return []
            raise
        return kinds


def routed_publisher(routes: Mapping[str, tuple[str, str]], sqs: Any) -> JobPublisher:
    """A publisher to the queues a worker is routed to (WorkerSettings.routes: job -> its queue and URL)."""
    from sqs_jobs.contract import JobContract
    from sqs_jobs.publisher import JobPublisher

    contract = JobContract(
        routes={job: queue for job, (queue, _) in routes.items()},
        # SQS: a FIFO queue's name ends in ".fifo".
        fifo_queues=frozenset(queue for queue, url in routes.values() if url.endswith(".fifo")),
    )
    from sqs_jobs.worker.provenance import published_identity

    return JobPublisher(
        sqs,
        {queue: url for queue, url in routes.values()},
        contract=contract,
        message_attributes=lambda envelope: published_identity(envelope.to_json()),
    )
