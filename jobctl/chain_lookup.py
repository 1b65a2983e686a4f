"""One chain as an operator sees it (`jobctl chain show`): each step's state, where the chain stopped and how to
resume it. Read from the chain's item and each step's batch (sqs_jobs.chains)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobctl.batch_lookup import BadBatchIdError, BatchNotFoundError, look_up_batch
from sqs_jobs.batches import BatchDefinitionError, check_batch_id
from sqs_jobs.catalog import CATALOG
from sqs_jobs.chains import STEP_BATCHES, STEPS, chain_item_id

SUCCEEDED = "succeeded"
DEAD = "dead-lettered"
RUNNING = "published"  # published, not ended yet: queued, running or retrying
WAITING = "waiting"  # not published: a step before it has not succeeded


@dataclass(frozen=True)
class Step:
    index: int
    job: str
    entity_id: str
    batch_id: str
    state: str


@dataclass(frozen=True)
class ChainView:
    chain_id: str
    description: str
    steps: tuple[Step, ...]

    @property
    def stopped_at(self) -> Step | None:
        return next((step for step in self.steps if step.state == DEAD), None)

    @property
    def verdict(self) -> str:
        stopped = self.stopped_at
        if stopped is not None:
            return (
                f"stopped at step {stopped.index + 1} of {len(self.steps)} ({stopped.job}:{stopped.entity_id}), "
                f"dead-lettered: {self.resume_hint}"
            )
        done = sum(1 for step in self.steps if step.state == SUCCEEDED)
        if done == len(self.steps):
            return f"done: all {len(self.steps)} steps succeeded"
        current = next(step for step in self.steps if step.state != SUCCEEDED)
        return f"at step {current.index + 1} of {len(self.steps)} ({current.job}:{current.entity_id}), {current.state}"

    @property
    def resume_hint(self) -> str:
        stopped = self.stopped_at
        if stopped is None:
            return ""
        try:
            queue = CATALOG.queue_for_job(stopped.job).name
        except KeyError:
            queue = "<its queue>"
        # The step's batch ID: in its body (its `batch` field) and no other message's, where an ID may be a part of
        # another chain's (`--match` finds text in bodies and errors).
        return f"fix it, then `jobctl dlq redrive {queue} --match {stopped.batch_id}` continues the chain"

    def to_dict(self) -> dict[str, Any]:
        stopped = self.stopped_at
        return {
            "chain_id": self.chain_id,
            "description": self.description,
            "verdict": self.verdict,
            "stopped_at_step": stopped.index + 1 if stopped else None,
            "resume": self.resume_hint or None,
            "steps": [
                {
                    "step": step.index + 1,
                    "job": step.job,
                    "id": step.entity_id,
                    "state": step.state,
                    "batch_id": step.batch_id,
                }
                for step in self.steps
            ],
        }


def look_up_chain(dynamodb_client: Any, table: str, chain_id: str) -> ChainView:
    try:
        check_batch_id(chain_id)
    except BatchDefinitionError as error:
        raise BadBatchIdError(str(error).replace("batch ID", "chain ID")) from None
    item = dynamodb_client.get_item(TableName=table, Key={"id": {"S": chain_item_id(chain_id)}}).get("Item")
    if item is None:
        raise BatchNotFoundError(f"no chain {chain_id} in {table}: never published, or expired")
    names = [entry["S"] for entry in item[STEPS]["L"]]
    batch_ids = [entry["S"] for entry in item[STEP_BATCHES]["L"]]
    steps: list[Step] = []
    published = True  # the first step is published with the chain
    for index, (name, batch_id) in enumerate(zip(names, batch_ids, strict=True)):
        job, entity_id = name.split(":", 1)
        try:
            batch = look_up_batch(dynamodb_client, table, batch_id)
        except BatchNotFoundError:
            batch = None
        if batch is not None and batch.count("succeeded"):
            state = SUCCEEDED
        elif batch is not None and batch.count("dead"):
            state = DEAD
        else:
            state = RUNNING if published else WAITING
        steps.append(Step(index, job, entity_id, batch_id, state))
        published = state == SUCCEEDED
    return ChainView(chain_id, item.get("description", {}).get("S", ""), tuple(steps))
