"""Concurrency per key, across workers: at most `limit` runs of a job at once per key (KeyConcurrency).

Each key has `limit` slots, one item each in the idempotency table. A run takes a free slot with one conditional
PutItem (free: no holder, or a holder whose lease has ended) and gives it back with one conditional DeleteItem when
it settles. A lease ends with the invocation that took it (`until` is the invocation's deadline): a worker that
dies holds no key for longer than the function timeout. With more than one slot, one consistent BatchGetItem finds
the free ones first, so a busy key costs a read, not a write per slot.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqs_jobs.flow_control import KeyConcurrency
from sqs_jobs.worker.errors import FlowControlStoreError, KeyBusyError
from sqs_jobs.worker.names import FLOW_HOLDER, FLOW_LIMIT_KEY, FLOW_LIMIT_NAME, FLOW_UNTIL, flow_slot_id

HOLDER = FLOW_HOLDER
UNTIL = FLOW_UNTIL
EXPIRATION = "expiration"
LIMIT_NAME = FLOW_LIMIT_NAME
LIMIT_KEY = FLOW_LIMIT_KEY
# A busy key's record comes back after about as long as it has been held already (so a long run is asked about
# less and less often), within these bounds.
MIN_BUSY_DELAY_S = 5.0
MAX_BUSY_DELAY_S = 300.0


def slot_id(limit_name: str, key: str, slot: int) -> str:
    """The partition key of one of a key's slots (names.flow_slot_id)."""
    return flow_slot_id(limit_name, key, slot)


@dataclass(frozen=True)
class Lease:
    item_id: str
    holder: str


class KeySlots:
    """The slots of every key in DynamoDB; `writes` counts every write, granted or refused."""

    def __init__(
        self,
        dynamodb: Callable[[], Any],
        table: str,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._clock = clock
        self._rng = rng or random.Random()
        self.writes = 0

    def acquire(
        self, limit_name: str, key: str, spec: KeyConcurrency, holder: str, until: float, held_s: float
    ) -> Lease:
        """A slot of the key until `until` (epoch seconds), or KeyBusyError (FlowControlStoreError if the store
        fails). `held_s`: how long this record has been held already, which spaces out its next try."""
        now = self._clock()
        try:
            free, ends = self._free_slots(limit_name, key, spec.limit, now)
            for slot in free:
                lease, holder_until = self._take(limit_name, key, slot, holder, until, now)
                if lease is not None:
                    return lease
                ends.append(holder_until)
        except KeyBusyError:
            raise
        except Exception as error:
            raise FlowControlStoreError.of(error, "the key leases' store", limit_name, spec.max_hold_s) from error
        soonest = min(ends) - now if ends else MIN_BUSY_DELAY_S
        delay_s = min(max(MIN_BUSY_DELAY_S, held_s, 0.0), MAX_BUSY_DELAY_S, max(MIN_BUSY_DELAY_S, soonest))
        raise KeyBusyError(
            f"key {key[:64]!r} of {limit_name!r} already has {spec.limit} run(s) at once, its limit",
            holder=limit_name,
            retry_after_s=delay_s,
            spread_s=min(delay_s, MAX_BUSY_DELAY_S) / 2,
            max_hold_s=spec.max_hold_s,
            key=key,
        )

    def release(self, lease: Lease) -> None:
        """Give the slot back, if this run still holds it (a lease that ended may have been taken since)."""
        from sqs_jobs.worker.run_ledger import is_condition_failure

        try:
            self._dynamodb().delete_item(
                TableName=self._table,
                Key={"id": {"S": lease.item_id}},
                ConditionExpression="#holder = :holder",
                ExpressionAttributeNames={"#holder": HOLDER},
                ExpressionAttributeValues={":holder": {"S": lease.holder}},
            )
        except Exception as error:
            if not is_condition_failure(error):
                raise
        finally:
            self.writes += 1

    def _free_slots(self, limit_name: str, key: str, limit: int, now: float) -> tuple[list[int], list[float]]:
        """The slots free now, in random order (so runs don't all race for the first), and when the others end.
        With one slot there is nothing to choose: it is tried without a look."""
        if limit == 1:
            return [0], []
        ids = [slot_id(limit_name, key, slot) for slot in range(limit)]
        answer = self._dynamodb().batch_get_item(
            RequestItems={
                self._table: {
                    "Keys": [{"id": {"S": item_id}} for item_id in ids],
                    "ConsistentRead": True,
                    "ProjectionExpression": "id, #until",
                    "ExpressionAttributeNames": {"#until": UNTIL},
                }
            }
        )
        if answer.get("UnprocessedKeys"):
            # Throttled reads: look no further, try every slot (a write each, still correct).
            return self._rng.sample(range(limit), limit), []
        held = {
            item["id"]["S"]: float(item[UNTIL]["N"])
            for item in answer.get("Responses", {}).get(self._table, [])
            if UNTIL in item
        }
        free = [slot for slot, item_id in enumerate(ids) if held.get(item_id, -math.inf) < now]
        self._rng.shuffle(free)
        return free, [until for until in held.values() if until >= now]

    def _take(
        self, limit_name: str, key: str, slot: int, holder: str, until: float, now: float
    ) -> tuple[Lease | None, float]:
        """The slot, or None and when its holder's lease ends (from the refused write's old item)."""
        from sqs_jobs.worker.run_ledger import is_condition_failure

        item_id = slot_id(limit_name, key, slot)
        try:
            self._dynamodb().put_item(
                TableName=self._table,
                Item={
                    "id": {"S": item_id},
                    HOLDER: {"S": holder},
                    UNTIL: {"N": f"{until:.3f}"},
                    EXPIRATION: {"N": str(math.ceil(until) + 3600)},
                    LIMIT_NAME: {"S": limit_name},
                    LIMIT_KEY: {"S": key[:256]},
                },
                ConditionExpression="attribute_not_exists(#until) OR #until < :now",
                ExpressionAttributeNames={"#until": UNTIL},
                ExpressionAttributeValues={":now": {"N": f"{now:.3f}"}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as error:
            if is_condition_failure(error):
                held = getattr(error, "response", {}).get("Item") or {}
                return None, float(held[UNTIL]["N"]) if UNTIL in held else now + MIN_BUSY_DELAY_S
            raise
        finally:
            self.writes += 1
        return Lease(item_id=item_id, holder=holder), until
