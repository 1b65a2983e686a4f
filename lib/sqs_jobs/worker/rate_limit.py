"""Rate limits shared by every worker: a token bucket per limit (and key) in the idempotency table, leased in blocks.

The bucket is GCRA's: one number per bucket, its theoretical arrival time (`tat`). Granting k tokens at time t
moves it to max(tat, t) + k x interval, and is allowed while that stays within `store_capacity_s` of t. Each grant
is one conditional UpdateItem, with no read before it: one write serves a whole lease of `lease_tokens` tokens,
which this worker then spends for up to `lease_valid_s` (RateLimit says why the bound still holds). A refused
write returns the bucket's `tat` (ReturnValuesOnConditionCheckFailure), which says exactly when the next lease
fits: the worker waits until then without asking again.

State per worker is only those leases and that "not before" time; the store is the truth, so any number of
execution environments share one limit. The store failing is the runtime's fault (FlowControlStoreError): the
record waits, the job is never failed for it.

A key may be a producer's value (a tenant, a customer: `RateLimit.per`), so a worker keeps the state of at most
MAX_KEYS_HELD keys, the least recently used evicted first. Evicting never lets a limit be exceeded: the tokens a
view held were taken from the bucket when leased, so dropping them spends fewer, and a view made again knows
nothing and asks the store, which grants only what fits. What it costs is a write where the evicted view would
have answered from memory.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqs_jobs.flow_control import RateLimit
from sqs_jobs.limits import HOUR
from sqs_jobs.worker.errors import FlowControlStoreError, RateLimitedError
from sqs_jobs.worker.names import FLOW_LIMIT_KEY, FLOW_LIMIT_NAME, FLOW_TAT, flow_bucket_id

# The bucket's item: `id` (the table's partition key), its `tat`, and `expiration` (the table's TTL attribute).
TAT = FLOW_TAT
EXPIRATION = "expiration"
LIMIT_NAME = FLOW_LIMIT_NAME
LIMIT_KEY = FLOW_LIMIT_KEY
# The next look after a refusal is spread over this share of one lease's time.
LOOK_SPREAD = 0.2
# A bucket untouched for this long after it was last full is deleted by the table's TTL (it is full again then).
_IDLE_EXPIRY_S = HOUR
# Keys whose state a worker keeps (about 400 bytes each): more than the keys a worker serves in one lease's time in
# all but a flood of tenants, so eviction costs a write only there.
MAX_KEYS_HELD = 1024


def bucket_id(limit_name: str, key: str) -> str:
    """The idempotency table's partition key of a limit's bucket for one key (names.flow_bucket_id)."""
    return flow_bucket_id(limit_name, key)


@dataclass(frozen=True)
class Granted:
    tokens: int
    # When the bucket can grant the next lease (epoch seconds).
    next_at: float


@dataclass(frozen=True)
class Refused:
    # When the bucket can grant the next lease (epoch seconds).
    next_at: float


class TokenBucketStore:
    """The buckets in DynamoDB. `writes` counts every write made, granted or refused (both are billed)."""

    def __init__(self, dynamodb: Callable[[], Any], table: str) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._lock = threading.Lock()
        self.writes = 0
        self.reads = 0

    def lease(
        self,
        limit_name: str,
        key: str,
        limit: RateLimit,
        now: float,
        busy_hint: bool,
        look_first: bool = False,
        tokens: int | None = None,
    ) -> Granted | Refused:
        """One lease of `tokens` (at most and by default `limit.lease_tokens`) at `now`, or when the next one fits.
        At most three writes: a
        guess at the bucket's state (busy or idle), and a retry for each state the refusal shows. `look_first`
        (the bucket was busy when last seen): a consistent read first, so that workers which lost the race go back
        to waiting without a write (a read costs a fifth of a write, and it is writes the bucket's item is limited
        by)."""
        tokens = max(1, min(limit.lease_tokens, tokens or limit.lease_tokens))
        span = tokens * limit.interval_s
        # The latest `tat` at which a lease still fits now.
        latest = now + limit.store_capacity_s - span
        busy = busy_hint
        if look_first:
            tat = self._read(limit_name, key)
            if tat > latest:
                return Refused(next_at=now + (tat - latest))
            busy = tat >= now
        for _ in range(3):
            granted, old_tat = self._write(limit_name, key, limit, now, span, latest, busy)
            if granted is not None:
                return Granted(tokens, next_at=now + max(0.0, granted - latest))
            if old_tat < now:
                busy = False
            elif old_tat <= latest:
                busy = True
            else:
                return Refused(next_at=now + (old_tat - latest))
        # Others leased between each look: the bucket is contended, so it is busy for at least one more lease.
        return Refused(next_at=now + span)

    def _write(
        self, limit_name: str, key: str, limit: RateLimit, now: float, span: float, latest: float, busy: bool
    ) -> tuple[float | None, float]:
        """One conditional write: the bucket's new `tat` if it was granted, else its `tat` as it was (-inf if it
        had none)."""
        values: dict[str, Any] = {
            ":span": _number(span),
            ":now": _number(now),
            ":expires": {"N": str(math.ceil(now + limit.store_capacity_s + _IDLE_EXPIRY_S))},
            ":limit": {"S": limit_name},
            ":key": {"S": key[:256]},
        }
        names = {"#tat": TAT, "#expiration": EXPIRATION, "#limit": LIMIT_NAME, "#key": LIMIT_KEY}
        if busy:
            update = "SET #tat = #tat + :span"
            condition = "#tat BETWEEN :now AND :latest"
            values[":latest"] = _number(latest)
        else:
            update = "SET #tat = :fresh"
            condition = "attribute_not_exists(#tat) OR #tat < :now"
            values[":fresh"] = _number(now + span)
            del values[":span"]
        try:
            answer = self._dynamodb().update_item(
                TableName=self._table,
                Key={"id": {"S": bucket_id(limit_name, key)}},
                UpdateExpression=f"{update}, #expiration = :expires, #limit = :limit, #key = :key",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="UPDATED_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as error:
            from sqs_jobs.worker.run_ledger import is_condition_failure

            self._count()
            if not is_condition_failure(error):
                raise
            item = getattr(error, "response", {}).get("Item") or {}
            return None, float(item[TAT]["N"]) if TAT in item else -math.inf
        self._count()
        return float(answer["Attributes"][TAT]["N"]), 0.0

    def _read(self, limit_name: str, key: str) -> float:
        """The bucket's `tat` (-inf if it has none)."""
        item = (
            self._dynamodb()
            .get_item(
                TableName=self._table,
                Key={"id": {"S": bucket_id(limit_name, key)}},
                ProjectionExpression="#tat",
                ExpressionAttributeNames={"#tat": TAT},
                ConsistentRead=True,
            )
            .get("Item")
            or {}
        )
        with self._lock:
            self.reads += 1
        return float(item[TAT]["N"]) if TAT in item else -math.inf

    def _count(self) -> None:
        with self._lock:
            self.writes += 1


def _number(value: float) -> dict[str, str]:
    return {"N": f"{value:.6f}"}


@dataclass(slots=True)
class _Bucket:
    """This worker's view of one bucket: leased tokens not yet spent, until when they may be, and when the
    store said the next lease fits."""

    lock: threading.Lock
    tokens: int = 0
    valid_until: float = 0.0
    not_before: float = 0.0
    # Whether the bucket was busy (its tat ahead of now) when last seen: which write to try first.
    busy: bool = False
    # The last lease's size and how many of its tokens were spent: the next lease asks for what this worker
    # spent (plus one) when it left tokens unspent, so that it takes no more than it uses from other workers.
    leased: int = 0
    spent: int = 0

    def take(self) -> None:
        self.tokens -= 1
        self.spent += 1

    def next_lease(self, limit: RateLimit) -> int:
        if self.leased and self.spent < self.leased:
            return max(1, min(limit.lease_tokens, self.spent + 1))
        return limit.lease_tokens


class RateLimiter:
    """A worker's rate limits: tokens leased from the store, spent by the worker's records and calls."""

    def __init__(
        self,
        store: TokenBucketStore,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        max_keys: int = MAX_KEYS_HELD,
    ) -> None:
        self._store = store
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        # The views of at most `max_keys` keys, least recently used first.
        self._buckets: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()
        self._max_keys = max_keys

    def acquire(self, limit_name: str, key: str, limit: RateLimit, wait_until: float) -> float:
        """Take one token, waiting for it until `wait_until` (epoch seconds) at the latest; how long it waited.
        Raises RateLimitedError if the token comes later (retry_after_s says when), FlowControlStoreError if the
        store fails."""
        bucket = self._bucket(limit_name, key)
        started = self._clock()
        while True:
            with bucket.lock:
                now = self._clock()
                if bucket.tokens > 0 and now <= bucket.valid_until:
                    bucket.take()
                    return now - started
                due = bucket.not_before
                if now >= due:
                    next_look = self._lease(limit_name, key, limit, bucket, now)
                    if next_look is None:  # granted: this call spends the lease's first token
                        bucket.take()
                        return now - started
                    due = next_look
            if due > wait_until:
                raise RateLimitedError(
                    f"rate limit {limit_name!r} ({limit.per_second:g}/s, burst {limit.burst}) has no token for this "
                    f"run within the {max(0.0, wait_until - started):.1f}s it could wait; the next comes in "
                    f"{due - now:.1f}s",
                    holder=limit_name,
                    retry_after_s=max(0.0, due - now),
                    spread_s=max(1.0, limit.lease_tokens * limit.interval_s),
                    max_hold_s=limit.max_hold_s,
                    key=key,
                )
            self._sleep(max(0.0, due - now))

    def _lease(self, limit_name: str, key: str, limit: RateLimit, bucket: _Bucket, now: float) -> float | None:
        """Lease from the store (under the bucket's lock): None when tokens were granted, else when to look
        again."""
        try:
            # A bucket seen busy is read before it is written: a worker that lost the race for the next lease then
            # goes back to waiting without a refused write.
            outcome = self._store.lease(
                limit_name, key, limit, now, bucket.busy, look_first=bucket.busy, tokens=bucket.next_lease(limit)
            )
        except Exception as error:
            raise FlowControlStoreError.of(error, "the rate limits' store", limit_name, limit.max_hold_s) from error
        if isinstance(outcome, Granted):
            bucket.tokens = bucket.leased = outcome.tokens
            bucket.spent = 0
            # Counted from before the write: the store granted them as of `now`. Any lease may be spent for as long
            # as the largest stands for (the bucket's capacity keeps that back). A limit leased one token at a time
            # (lease_valid_s 0) spends it at once, by the call that leased it.
            bucket.valid_until = now + limit.lease_valid_s
            bucket.not_before = outcome.next_at
            bucket.busy = True
            return None
        bucket.busy = True
        # Other workers wait for the same moment: spread the next look over a fifth of one lease's time, so that
        # one of them leases first and the others' reads see it.
        bucket.not_before = outcome.next_at + self._rng.uniform(
            0.0, LOOK_SPREAD * limit.lease_tokens * limit.interval_s
        )
        return bucket.not_before

    def _bucket(self, limit_name: str, key: str) -> _Bucket:
        """The key's view, made if the worker holds none (a new key, or one evicted). A call that still holds an
        evicted view spends what it leased, as another worker would: the store counted it."""
        with self._lock:
            found = self._buckets.get((limit_name, key))
            if found is not None:
                self._buckets.move_to_end((limit_name, key))
                return found
            found = _Bucket(lock=threading.Lock())
            self._buckets[(limit_name, key)] = found
            if len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
            return found
