"""Key slots on moto's DynamoDB: a run takes a free slot, a busy key's record comes back after about as long as it
has waited (never past the holder's lease), a lease that ended frees its slot, and a release frees only its own."""

from __future__ import annotations

from typing import Any

import pytest

from sqs_jobs.flow_control import KeyConcurrency
from sqs_jobs.worker.errors import KeyBusyError
from sqs_jobs.worker.key_concurrency import MAX_BUSY_DELAY_S, MIN_BUSY_DELAY_S, KeySlots
from tests.unit.conftest import FLOW_TABLE

NOW = 10_000.0


def _slots(dynamodb: Any, now: list[float]) -> KeySlots:
    return KeySlots(lambda: dynamodb, FLOW_TABLE, clock=lambda: now[0])


@pytest.mark.parametrize("limit", [1, 3])
def test_a_key_takes_up_to_its_limit_and_the_next_waits_about_as_long_as_it_has_waited(
    dynamodb: Any, limit: int
) -> None:
    now = [NOW]
    slots = _slots(dynamodb, now)
    spec = KeyConcurrency(limit=limit, per="customer")
    leases = [slots.acquire("key:x", "c1", spec, f"run{n}", until=NOW + 1000, held_s=0) for n in range(limit)]
    assert len({lease.item_id for lease in leases}) == limit

    with pytest.raises(KeyBusyError) as fresh:
        slots.acquire("key:x", "c1", spec, "late", until=NOW + 1000, held_s=0)
    with pytest.raises(KeyBusyError) as waited:
        slots.acquire("key:x", "c1", spec, "late", until=NOW + 1000, held_s=100)
    with pytest.raises(KeyBusyError) as long_waited:
        slots.acquire("key:x", "c1", spec, "late", until=NOW + 1000, held_s=5000)

    assert fresh.value.retry_after_s == MIN_BUSY_DELAY_S
    assert waited.value.retry_after_s == 100
    assert long_waited.value.retry_after_s == MAX_BUSY_DELAY_S
    assert fresh.value.holder == "key:x" and fresh.value.max_hold_s == spec.max_hold_s
    # Another key has slots of its own.
    assert slots.acquire("key:x", "c2", spec, "other", until=NOW + 1000, held_s=0) is not None


def test_a_busy_keys_record_never_waits_past_the_holders_lease(dynamodb: Any) -> None:
    now = [NOW]
    slots = _slots(dynamodb, now)
    spec = KeyConcurrency(limit=1)
    slots.acquire("key:x", "7", spec, "first", until=NOW + 20, held_s=0)

    with pytest.raises(KeyBusyError) as busy:
        slots.acquire("key:x", "7", spec, "second", until=NOW + 1000, held_s=200)

    assert busy.value.retry_after_s == 20


def test_a_lease_that_ended_frees_its_slot_and_a_release_frees_only_its_own(dynamodb: Any) -> None:
    now = [NOW]
    slots = _slots(dynamodb, now)
    spec = KeyConcurrency(limit=1)
    crashed = slots.acquire("key:x", "7", spec, "crashed", until=NOW + 20, held_s=0)
    now[0] = NOW + 21

    taken = slots.acquire("key:x", "7", spec, "next", until=NOW + 100, held_s=0)
    slots.release(crashed)  # the crashed run's late release: not its slot any more

    with pytest.raises(KeyBusyError):
        slots.acquire("key:x", "7", spec, "third", until=NOW + 100, held_s=0)
    slots.release(taken)
    assert slots.acquire("key:x", "7", spec, "third", until=NOW + 100, held_s=0) is not None
