"""Chains: a pipeline of ordinary jobs, each published when the one before it succeeded (docs/workflows.md).

A chain of N steps is N batches of one member each (sqs_jobs.batches), written by the publisher at once: step i's
batch has step i+1 as its `on_success`, stored as that step's whole envelope, which carries its own `batch` field
(`<batch i+1>.0`). So each step is an ordinary job (its key, retries, DLQ), its success is counted and the next step
published exactly once by the batch machinery, and a dead-lettered step stops the chain where it is: its batch is
complete and not succeeded. Redriving the step and its success publishes the next one, and the chain goes on.

The chain's own item, `batch#chain#<chain ID>`, lists its steps' batches for `jobctl chain show`, which says where a
chain stopped and how to resume it; each step's batch names its chain and step (`chain` = `<chain ID>.<step>`).
The chain's item keeps its first step's envelope too, as each step's batch keeps the next one's: so every step's
envelope is known (its key, for the record of a step an operator cancelled; what to publish to run it after all).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqs_jobs.batches import EXPIRATION, OPEN_BATCH_TTL_S, BatchDefinitionError

# Under `batch#`, so what may define batches (the publisher's grant, by leading key) may define chains.
CHAIN_ITEM_PREFIX = "batch#chain#"
# Steps of one chain: each is a batch of its own (two items), all written when the chain is published.
MAX_CHAIN_STEPS = 100
STEPS = "steps"
STEP_BATCHES = "step_batches"
# The first step's whole envelope (JSON, its `batch` field included); absent from chains published before it.
FIRST_STEP = "first_step"


def chain_item_id(chain_id: str) -> str:
    return f"{CHAIN_ITEM_PREFIX}{chain_id}"


def chain_item(
    chain_id: str,
    steps: Sequence[tuple[str, str]],
    batch_ids: Sequence[str],
    description: str,
    now_s: int,
    first_step: str | None = None,
) -> dict[str, Any]:
    if not steps:
        raise BatchDefinitionError("a chain needs at least one step")
    if len(steps) > MAX_CHAIN_STEPS:
        raise BatchDefinitionError(f"a chain of {len(steps)} steps; at most {MAX_CHAIN_STEPS} are accepted")
    item: dict[str, Any] = {
        "id": {"S": chain_item_id(chain_id)},
        STEPS: {"L": [{"S": f"{job}:{entity_id}"} for job, entity_id in steps]},
        STEP_BATCHES: {"L": [{"S": batch_id} for batch_id in batch_ids]},
        "created_at": {"N": str(now_s)},
        EXPIRATION: {"N": str(now_s + OPEN_BATCH_TTL_S * len(steps))},
    }
    if description:
        item["description"] = {"S": description}
    if first_step is not None:
        item[FIRST_STEP] = {"S": first_step}
    return item
