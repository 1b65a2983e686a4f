"""One chain as an operator sees it (`jobctl chain show`): each step's state, where the chain stopped and how to
resume it. Read from the chain's item and each step's batch (sqs_jobs.chains); for the step that stopped it, its
key's record too: a step an operator cancelled before it ran counts as dead in its batch, as a dead-lettered one
does, but has no dead letter to redrive."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqs_jobs.batches import BatchDefinitionError, BatchMember, check_batch_id
from sqs_jobs.chains import FIRST_STEP, STEP_BATCHES, STEPS, chain_item_id
from sqs_jobs.cli.batch_lookup import BadBatchIdError, BatchNotFoundError, look_up_batch
from sqs_jobs.envelope import Envelope, parse_envelope
from sqs_jobs.errors import EnvelopeError
from sqs_jobs.specs import Catalog

SUCCEEDED = "succeeded"
DEAD = "dead-lettered"
CANCELLED = "cancelled"  # an operator cancelled its key before it ran: acknowledged unrun, no dead letter
RUNNING = "published"  # published, not ended yet: queued, running or retrying
WAITING = "waiting"  # not published: a step before it has not succeeded
# Where the runbook says how to publish a member again.
RUNBOOK = 'runbook, "A batch does not complete"'


@dataclass(frozen=True)
class Cancel:
    """An operator's cancel of a step's key (`jobctl job cancel`), as its record keeps it."""

    at: datetime | None
    by: str | None
    # Asked while the step ran: the run stopped and was dead-lettered as JobCancelledError.
    while_running: bool

    def said(self) -> str:
        at = self.at.isoformat(timespec="seconds") if self.at else "an unknown time"
        return f"at {at} by {self.by or '(unknown)'}"


@dataclass(frozen=True)
class Step:
    index: int
    job: str
    entity_id: str
    batch_id: str
    state: str
    # The step's envelope as the chain published it; None where the chain does not keep it (the first step of a
    # chain published before it kept one, or a step whose batch expired).
    envelope: Envelope | None = None
    # The stopping step's key's cancel, if an operator cancelled it.
    cancel: Cancel | None = None
    # Why the stopping step's record could not be read (its key not derivable here), if it could not.
    unread: str | None = None
    # Its job's queue, from jobctl's catalog; None for a job it doesn't know.
    queue: str | None = None

    @property
    def name(self) -> str:
        return f"{self.job}:{self.entity_id}"


@dataclass(frozen=True)
class ChainView:
    chain_id: str
    description: str
    steps: tuple[Step, ...]

    @property
    def stopped_at(self) -> Step | None:
        return next((step for step in self.steps if step.state in (DEAD, CANCELLED)), None)

    @property
    def verdict(self) -> str:
        stopped = self.stopped_at
        if stopped is not None:
            where = f"stopped at step {stopped.index + 1} of {len(self.steps)} ({stopped.name})"
            if stopped.state == CANCELLED and stopped.cancel is not None:
                return (
                    f"{where}, cancelled before it ran ({stopped.cancel.said()}): its message was acknowledged unrun, "
                    f"so there is no dead letter to redrive; {self.resume_hint}"
                )
            if stopped.cancel is not None:
                return (
                    f"{where}, dead-lettered as JobCancelledError: cancelled while it ran ({stopped.cancel.said()}); "
                    f"{self.resume_hint}"
                )
            if stopped.unread is not None:
                return (
                    f"{where}, dead (dead-lettered, or cancelled before it ran: its key's record was not read, "
                    f"{stopped.unread}); {self.resume_hint}"
                )
            return f"{where}, dead-lettered: {self.resume_hint}"
        done = sum(1 for step in self.steps if step.state == SUCCEEDED)
        if done == len(self.steps):
            return f"done: all {len(self.steps)} steps succeeded"
        current = next(step for step in self.steps if step.state != SUCCEEDED)
        return f"at step {current.index + 1} of {len(self.steps)} ({current.name}), {current.state}"

    @property
    def resume_hint(self) -> str:
        stopped = self.stopped_at
        if stopped is None:
            return ""
        queue = stopped.queue or "<its queue>"
        # The step's batch ID: in its body (its `batch` field) and no other message's, where an ID may be a part of
        # another chain's (`--match` finds text in bodies and errors).
        redrive = f"`jobctl dlq redrive {queue} --match {stopped.batch_id}` continues the chain"
        undo = f"undo the cancel (`{_undo_command(stopped)}`)"
        publish = (
            f"publish the step again as a member ({RUNBOOK}): `{_publish_code(stopped)}`; once it succeeds the "
            "chain goes on"
        )
        if stopped.state == CANCELLED:
            return f"to run it after all, {undo}, then {publish}"
        if stopped.cancel is not None:
            return f"to run it after all, {undo}, then {redrive}"
        if stopped.unread is not None:
            return (
                f"if it is in its DLQ, fix it, then {redrive}; if an operator cancelled it before it ran, {undo}, "
                f"then {publish}"
            )
        return f"fix it, then {redrive}"

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
                    "envelope": step.envelope.to_dict() if step.envelope is not None else None,
                    "cancelled_at": step.cancel.at.isoformat(timespec="seconds")
                    if step.cancel is not None and step.cancel.at is not None
                    else None,
                    "cancelled_by": step.cancel.by if step.cancel is not None else None,
                }
                for step in self.steps
            ],
        }


def _envelope_of(step: Step) -> Envelope:
    """The step's envelope as published; for a first step the chain kept none of, its job and ID (the job's
    default key) as a member of its batch."""
    return step.envelope or Envelope(step.job, step.entity_id, batch=BatchMember(step.batch_id, 0))


def _undo_command(step: Step) -> str:
    envelope = _envelope_of(step)
    words = ["jobctl", "job", "cancel", envelope.job, envelope.id]
    if envelope.key is not None:
        words += ["--key", envelope.key]
    return " ".join(shlex.quote(word) for word in [*words, "--undo"])


def _publish_code(step: Step) -> str:
    """The runbook's re-publish of a member, for this step: its envelope as the chain published it (the batch
    counts only that envelope)."""
    envelope = _envelope_of(step)
    parts = [f"job={envelope.job!r}", f"id={envelope.id!r}"]
    if envelope.key is not None:
        parts.append(f"key={envelope.key!r}")
    if envelope.tenant is not None:
        parts.append(f"tenant={envelope.tenant!r}")
    if envelope.extra:
        parts.append(f"extra={dict(envelope.extra)!r}")
    parts.append(f"batch=parse_member_field({step.batch_id + '.0'!r})")
    return f"publisher.publish_many([Envelope({', '.join(parts)})])"


def _stored_envelope(text: str | None) -> Envelope | None:
    """An envelope as the chain stored it, or None (none stored, or not an envelope: never raised for)."""
    if text is None:
        return None
    try:
        job = json.loads(text).get("job")
        return parse_envelope(text, [job] if isinstance(job, str) else [])
    except (ValueError, AttributeError, EnvelopeError):
        return None


def _with_record(dynamodb_client: Any, table: str, step: Step, catalog: Catalog) -> Step:
    """The stopping step, told by its key's record whether an operator cancelled it: CANCELLED without a request
    to a running run is a cancel before it ran (its message acknowledged unrun, counted dead, no dead letter)."""
    from sqs_jobs.cli.job_lookup import JobKeyUnknownError, envelope_key
    from sqs_jobs.worker.names import CANCEL_REQUESTED_AT, CANCELLED_AT, CANCELLED_BY, RecordStatus
    from sqs_jobs.worker.settings import idempotency_record_id

    envelope = _envelope_of(step)
    try:
        # The publisher's key needs no catalog; the job's own key function does.
        key = envelope_key(catalog.queue_for_job(step.job), envelope) if envelope.key is None else None
    except KeyError:
        return replace(step, unread=f"job {step.job!r} is not in this jobctl's catalog")
    except JobKeyUnknownError as error:
        return replace(step, unread=str(error).split("; give the key")[0])
    record_id = idempotency_record_id(key or f"{envelope.job}:{envelope.key}")
    item = dynamodb_client.get_item(TableName=table, Key={"id": {"S": record_id}}).get("Item")
    if item is None or item.get("status", {}).get("S") != RecordStatus.CANCELLED:
        return step
    at = item.get(CANCELLED_AT, {}).get("N")
    cancel = Cancel(
        at=datetime.fromtimestamp(float(at), tz=UTC) if at is not None else None,
        by=item.get(CANCELLED_BY, {}).get("S"),
        while_running=CANCEL_REQUESTED_AT in item,
    )
    return replace(step, state=DEAD if cancel.while_running else CANCELLED, cancel=cancel)


def look_up_chain(dynamodb_client: Any, table: str, chain_id: str, catalog: Catalog) -> ChainView:
    """The chain; `catalog` derives a stopping step's key when its publisher gave none (the job's key function)."""
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
    envelope = _stored_envelope(item.get(FIRST_STEP, {}).get("S"))
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
        try:
            queue: str | None = catalog.queue_for_job(job).name
        except KeyError:
            queue = None
        step = Step(index, job, entity_id, batch_id, state, envelope=envelope, queue=queue)
        if state == DEAD and not any(earlier.state in (DEAD, CANCELLED) for earlier in steps):
            step = _with_record(dynamodb_client, table, step, catalog)
        steps.append(step)
        published = state == SUCCEEDED
        # Each step's batch keeps the next step's envelope, which its success publishes.
        envelope = _stored_envelope(batch.next_step) if batch is not None else None
    return ChainView(chain_id, item.get("description", {}).get("S", ""), tuple(steps))
