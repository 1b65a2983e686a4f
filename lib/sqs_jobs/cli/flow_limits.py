"""The catalog's flow limits as an operator sees them (`jobctl status`, `jobctl job show`, the console): each
declaration (sqs_jobs.flow_control), and what the idempotency table holds of it now, read by key (GetItem,
BatchGetItem), never by a scan.

- An unkeyed rate limit has one bucket: the tokens it could grant now follow from its GCRA `tat`: (now +
  store_capacity_s - max(tat, now)) x per_second, which is at most the burst. Tokens leased to workers and not spent
  yet count as taken, so an idle bucket whose leases are several tokens shows the burst less one lease.
- A keyed limit has one bucket, or one set of slots, per value of its envelope field: those can't be listed without
  a scan. `jobctl job show` reads the slots of one job's key (who holds each, until when).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqs_jobs.cli.errors import OperatorUnreachableError
from sqs_jobs.flow_control import DeclaredLimit, KeyConcurrency, RateLimit, key_concurrency_name, limit_key
from sqs_jobs.worker.names import FLOW_HOLDER, FLOW_TAT, FLOW_UNTIL, flow_bucket_id, flow_slot_id


class FlowLimitsUnreadError(OperatorUnreachableError):
    """The limits' state could not be read from the idempotency table."""


def tokens_free(limit: RateLimit, tat: float | None, now: float) -> float:
    """Tokens the bucket could grant at `now` (epoch seconds), given its `tat` (None: no bucket yet, it is full)."""
    ahead_s = max(tat if tat is not None else now, now) - now
    # At most the burst: store_capacity_s is at most burst / per_second.
    return max(0.0, (limit.store_capacity_s - ahead_s) * limit.per_second)


@dataclass(frozen=True)
class LimitView:
    """A limit of the catalog and, for an unkeyed rate limit, the tokens its bucket could grant when read."""

    declared: DeclaredLimit
    tokens_free: float | None = None
    # Why the live state could not be read (permissions, the worker's table not found), or None.
    unread: str | None = None

    def state(self) -> str:
        """What the store says of it now, in a few words."""
        limit = self.declared.limit
        if isinstance(limit, KeyConcurrency):
            return f"per {limit.per} value: `jobctl job show JOB ID` lists a key's slots"
        if limit.per is not None:
            return f"one bucket per {limit.per} value (not listed: that needs a scan)"
        if self.unread is not None:
            return f"not read: {self.unread}"
        if self.tokens_free is None:
            return "not read"
        return f"{self.whole_tokens} of {limit.burst} token(s) free now"

    @property
    def whole_tokens(self) -> int | None:
        """The free tokens a run could take now. The store keeps `tat` to the microsecond: a hair short of a token
        is that token."""
        return None if self.tokens_free is None else math.floor(round(self.tokens_free, 3))

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.declared.to_dict(),
            "declared": self.declared.describe(),
            "tokens_free": self.whole_tokens,
            "state": self.state(),
        }


def read_limits(dynamodb: Any, table: str, limits: Sequence[DeclaredLimit], now: float) -> list[LimitView]:
    """Each limit, with what its bucket holds now for an unkeyed rate limit: one consistent GetItem each."""
    views = []
    for declared in limits:
        limit = declared.limit
        if isinstance(limit, RateLimit) and limit.per is None:
            item = (
                dynamodb.get_item(
                    TableName=table,
                    Key={"id": {"S": flow_bucket_id(declared.name, "")}},
                    ProjectionExpression="#tat",
                    ExpressionAttributeNames={"#tat": FLOW_TAT},
                    ConsistentRead=True,
                ).get("Item")
                or {}
            )
            tat = float(item[FLOW_TAT]["N"]) if FLOW_TAT in item else None
            views.append(LimitView(declared, tokens_free=tokens_free(limit, tat, now)))
        else:
            views.append(LimitView(declared))
    return views


def unread(limits: Sequence[DeclaredLimit], why: str) -> list[LimitView]:
    """The declarations alone, saying why their state could not be read."""
    return [LimitView(declared, unread=why) for declared in limits]


@dataclass(frozen=True)
class Slot:
    """One of a key's slots: free, or held by a run (`holder`: its key's record, run and Lambda request) until its
    lease ends with the holder's invocation."""

    index: int
    holder: str | None = None
    until: datetime | None = None

    def held(self, now: datetime) -> bool:
        return self.until is not None and self.until >= now

    def to_dict(self, now: datetime) -> dict[str, Any]:
        held = self.held(now)
        return {
            "slot": self.index,
            "held": held,
            "holder": self.holder if held else None,
            "until": self.until if held else None,
        }


@dataclass(frozen=True)
class KeySlots:
    """A job's concurrency limit for one key: its slots, read by ID (or why the key could not be told)."""

    limit: str
    declared: KeyConcurrency
    key: str | None
    slots: tuple[Slot, ...] = ()

    def describe(self, now: datetime) -> list[str]:
        """One line for the key, then one per slot (indented). The key and a holder (which holds its run's
        idempotency key) may be a producer's text: the caller shows each line escaped."""
        if self.key is None:
            return [
                f"{self.limit}: keyed by the envelope field {self.declared.per!r}, which an ID doesn't give: "
                "pass its value with --limit-key to see the key's slots"
            ]
        busy = sum(slot.held(now) for slot in self.slots)
        lines = [f"{self.limit} ({self.declared.per} {self.key!r}): {busy} of {self.declared.limit} slot(s) held"]
        for slot in self.slots:
            if slot.held(now) and slot.until is not None:
                until = slot.until.isoformat(timespec="seconds")
                lines.append(f"  slot {slot.index}: held by {slot.holder} until {until}")
            else:
                lines.append(f"  slot {slot.index}: free")
        return lines

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "per": self.declared.per,
            "key": self.key,
            "capacity": self.declared.limit,
            "slots": [slot.to_dict(now) for slot in self.slots] if self.key is not None else None,
        }


def read_key_slots(dynamodb: Any, table: str, job: str, declared: KeyConcurrency, key: str | None) -> KeySlots:
    """The slots of `key` of the job's concurrency limit: one consistent BatchGetItem (at most 100 slots), no scan."""
    name = key_concurrency_name(job)
    if key is None:
        return KeySlots(name, declared, None)
    ids = {flow_slot_id(name, key, index): index for index in range(declared.limit)}
    found: dict[int, dict[str, Any]] = {}
    request: dict[str, Any] = {
        table: {
            "Keys": [{"id": {"S": item_id}} for item_id in ids],
            "ConsistentRead": True,
            "ProjectionExpression": "id, #holder, #until",
            "ExpressionAttributeNames": {"#holder": FLOW_HOLDER, "#until": FLOW_UNTIL},
        }
    }
    for _ in range(5):  # keys DynamoDB left unprocessed (throttled) are asked again
        answer = dynamodb.batch_get_item(RequestItems=request)
        for item in answer.get("Responses", {}).get(table, []):
            found[ids[item["id"]["S"]]] = item
        request = answer.get("UnprocessedKeys") or {}
        if not request:
            break
    else:
        raise FlowLimitsUnreadError(f"DynamoDB left the slots of {name} unread after 5 tries (throttled?)")
    slots = []
    for index in range(declared.limit):
        item = found.get(index, {})
        until = item.get(FLOW_UNTIL, {}).get("N")
        slots.append(
            Slot(
                index=index,
                holder=item.get(FLOW_HOLDER, {}).get("S"),
                until=datetime.fromtimestamp(float(until), tz=UTC) if until is not None else None,
            )
        )
    return KeySlots(name, declared, key, tuple(slots))


def key_of(per: str, job: str, entity_id: str, key: str | None, given: str | None) -> str | None:
    """The value a job's limit keyed by the envelope field `per` counts a job under, from what the operator knows:
    the value given, else the job, ID or publisher's key (a job without a key counts under "", as the runtime
    counts it); None for another field, whose value only the message holds."""
    if given is not None:
        return given
    fields: dict[str, object] = {"job": job, "id": entity_id, **({"key": key} if key is not None else {})}
    return limit_key(fields, per) if per in ("job", "id", "key") else None
