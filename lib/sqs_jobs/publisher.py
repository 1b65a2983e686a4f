"""JobPublisher: how other Python services enqueue jobs, checked by the same rules the worker applies.

    publisher = JobPublisher(sqs_client, queue_urls={"mail": url})
    publisher.publish("send_receipt", "123")                      # -> SQS message ID
    publisher.publish_many([("send_receipt", "124"), ...])        # SendMessageBatch, chunks of 10
    publisher.publish("send_receipt", "127", tenant="acme-eu")    # a tenant's: body and MessageGroupId
    publisher.publish("send_receipt", "128", priority="high")     # a queue's priority lane (docs/priorities.md)

    publisher = JobPublisher.from_stack(ssm, sqs, scheduler)            # the stack's queues and its scheduler
    publisher.publish("send_receipt", "125", delay=timedelta(hours=2))   # -> one-time schedule's name
    publisher.publish("send_receipt", "126", at=datetime(2026, 12, 24, 9, tzinfo=UTC))

    publisher = JobPublisher.from_stack(ssm, sqs, dynamodb_client=dynamodb)    # and the stack's batch table
    batch_id = publisher.batch([("import_rows", "f1-0"), ...], on_complete=("import_done", "f1"))

A delay up to 15 minutes is SQS's DelaySeconds; beyond, an EventBridge Scheduler one-time schedule in the
stack's group sends the job at its time and deletes itself. `delay_s`, `delay` and `at` are three ways to say
when: give at most one (None means not given). Two together, even a zero (`delay_s=0, at=...`), contradict each
other and raise ConflictingDelaysError.

A queue with priority lanes (QueueSpec.priorities) is one SQS queue per lane: `priority` picks the lane, and a
publish without one goes to the queue's default lane (its own queue). The job, its key and its idempotency record
are the same on every lane, so a job published on two lanes still runs once.

A tenant goes in the body (the envelope's `tenant`) and, on a standard queue, is the message's MessageGroupId:
SQS's fair queues deliver a noisy tenant's backlog after the other tenants' messages. On a FIFO queue the
message group is the order (the entity ID by default, or `group`), so the tenant rides in the body alone.

Works against AWS or the local engine alike: pass a client built with the engine's endpoint_url.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqs_jobs.batches import (
    CHAIN,
    COMPLETE,
    CREATED_AT,
    EXPIRATION,
    MAX_BATCH_MEMBERS,
    MAX_DESCRIPTION_CHARS,
    ON_SUCCESS_ENVELOPE,
    OPEN_BATCH_TTL_S,
    SUCCESS,
    BatchDefinitionError,
    BatchesNotConfiguredError,
    BatchMember,
    CallbackNotPublishableError,
    callback_of,
    callback_pointers,
    definition_items,
    member_digest,
    new_batch_id,
)
from sqs_jobs.contract import JobContract, UnknownPriorityError
from sqs_jobs.envelope import BATCH_FIELD, MAX_EXTRA_FIELDS, Envelope, Scalar, build_envelope
from sqs_jobs.errors import EnvelopeError, EnvelopeFieldError
from sqs_jobs.limits import SQS_BATCH_MAX, SQS_MAX_DELAY_S, SQS_MAX_MESSAGE_ATTRIBUTES
from sqs_jobs.specs import Catalog, UnknownQueueError
from sqs_jobs.stack_names import (
    DEFAULT_STACK_NAME,
    LANE_ENDPOINT_KEYS,
    ONE_TIME_PREFIX,
    QUEUE_ARN,
    QUEUE_URL,
    SCHEDULE_GROUP,
    SCHEDULER_ROLE_ARN,
    SCHEDULES_DLQ_ARN,
    batches_parameter_name,
    contract_parameter_name,
    lane_parameter_name,
    one_time_schedule_prefix,
    parameter_name,
    results_parameter_name,
    schedules_parameter_name,
)
from sqs_jobs.tracing import TRACEPARENT, current_traceparent, traceparent_attribute

if TYPE_CHECKING:
    from sqs_jobs.events import JobEvents
    from sqs_jobs.results import JobResult, JobResults

MAX_DELAY_S = SQS_MAX_DELAY_S
# How far ahead a job may be scheduled: our limit, not the scheduler's (it has none documented). A job due in
# over a year is a calendar entry, not a background job.
MAX_SCHEDULE_AHEAD = timedelta(days=365)
# The scheduler retries a failed delivery with backoff for up to a day, then dead-letters it (the same policy as
# the catalog's recurring schedules: sqs_jobs.cdk.job_schedules).
SCHEDULE_RETRY_MAX_AGE_S = 24 * 3600
SCHEDULE_RETRY_ATTEMPTS = 185


class PublishError(Exception):
    """Base of publisher errors (envelope errors are raised as they are: EnvelopeError subclasses)."""


class QueueNotConfiguredError(PublishError):
    """The job's queue has no URL in this publisher."""


class ContractNotGivenError(PublishError):
    """A publisher given neither the stack's job contract nor a catalog: it can't tell which queue a job is on."""


class InvalidDelayError(PublishError):
    """A delay or time the job can't be published for: negative, in the past, too far ahead, or more than one
    of delay_s, delay and at (ConflictingDelaysError)."""


class ConflictingDelaysError(InvalidDelayError):
    """More than one of delay_s, delay and at was given, zeros included: which one was meant is unknowable."""


class SchedulingNotConfiguredError(PublishError):
    """A delay beyond SQS's 15 minutes, on a publisher without the stack's scheduler."""


@dataclass(frozen=True)
class ScheduleTarget:
    """Where a queue's one-time schedules send, and the role they send with; `lane_arns`: its priority lanes' queues
    other than the default lane's (the role may send to each)."""

    queue_arn: str
    role_arn: str
    lane_arns: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Scheduling:
    """The stack's scheduler, for delays beyond 15 minutes: a boto3 `scheduler` client, the schedule group, its
    dead-letter queue, and per catalog queue the target."""

    client: Any
    group: str
    dead_letter_arn: str
    targets: Mapping[str, ScheduleTarget]


@dataclass(frozen=True)
class FailedEntry:
    envelope: Envelope
    code: str
    message: str
    sender_fault: bool


@dataclass(frozen=True)
class BatchTable:
    """Where batches are defined: a boto3 `dynamodb` client and the stack's idempotency table (the publisher may
    write its `batch#` items only)."""

    client: Any
    table: str


class PartialPublishError(PublishError):
    """Some messages of a batch were not accepted by SQS; `sent` has the IDs of those that were, in order. From
    JobPublisher.batch, `batch_id` names the batch: its failed members' envelopes carry their `batch` field, so
    publishing them again (publish_many) completes it."""

    batch_id: str | None = None

    def __init__(self, sent: list[str | None], failed: list[FailedEntry]) -> None:
        first = failed[0]
        super().__init__(
            f"{len(failed)} of {len(sent)} jobs were not enqueued (first: {first.envelope.job}:{first.envelope.id}"
            f" {first.code}: {first.message})"
        )
        self.sent = sent
        self.failed = failed


JobRequest = tuple[str, str] | Envelope


def _published_contract(ssm_client: Any, stack_name: str) -> JobContract | None:
    """The stack's job contract, or None: a stack from before contracts has none, and a role granted by hand
    before them may not read it (SSM refuses the call); the catalog given, if any, routes then."""
    try:
        found = ssm_client.get_parameters(Names=[contract_parameter_name(stack_name)]).get("Parameters", [])
    except Exception as error:
        # botocore's ClientError, by its shape: importing botocore here would make `import sqs_jobs` load it, and
        # the wheel's build (which reads its version from this package) runs without it.
        response = getattr(error, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") == "AccessDeniedException":
            return None
        raise
    return JobContract.from_json(found[0]["Value"]) if found else None


def _other_lanes(contract: JobContract, queue: str) -> tuple[str, ...]:
    """A queue's priority lanes other than its default lane (whose queue is the queue's own)."""
    default = contract.default_lanes.get(queue)
    return tuple(lane for lane in contract.lanes.get(queue, ()) if lane != default)


def _results_reader(dynamodb_client: Any, table: str) -> JobResults:
    from sqs_jobs.results import JobResults  # the key record's codec, loaded by services that read results only

    return JobResults(dynamodb_client, table)


def _events_sender(dynamodb_client: Any, lambda_client: Any, table: str) -> JobEvents:
    from sqs_jobs.events import JobEvents

    return JobEvents(dynamodb_client, lambda_client, table)


class JobPublisher:
    def __init__(
        self,
        sqs_client: Any,
        queue_urls: Mapping[str, str],
        catalog: Catalog | None = None,
        scheduling: Scheduling | None = None,
        clock: Callable[[], datetime] | None = None,
        contract: JobContract | None = None,
        batches: BatchTable | None = None,
        message_attributes: Callable[[Envelope], Mapping[str, Any]] | None = None,
        results: JobResults | None = None,
        events: JobEvents | None = None,
        lane_urls: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """`queue_urls`: each queue's URL (of a queue with priority lanes, its default lane's). `lane_urls`: per queue
        with lanes, the URL of each other lane (from_stack reads them).
        `contract`: the deployed stack's job contract (what from_stack reads); None: the one of `catalog`, the
        project's catalog where the service has it (one of the two is required: ContractNotGivenError).
        `batches`: where `batch` defines its batches (from_stack with a dynamodb_client finds the stack's).
        `message_attributes`: SQS message attributes sent with each envelope (the worker runtime stamps what it
        sends with its identity; a service needs none).
        `results`: where `result` reads how a job stands (from_stack with a results_client finds the stack's).
        `events`: what `send_event` sends with (from_stack with a results_client and a lambda_client)."""
        self._batches = batches
        self._results = results
        self._events = events
        self._message_attributes = message_attributes
        if contract is None and catalog is None:
            raise ContractNotGivenError(
                "a JobPublisher routes by the stack's job contract: use JobPublisher.from_stack(ssm, sqs), or pass "
                "contract= (JobContract) or catalog= (the project's Catalog)"
            )
        self._catalog = catalog
        self._sqs = sqs_client
        self._queue_urls = dict(queue_urls)
        self._lane_urls = {queue: dict(urls) for queue, urls in (lane_urls or {}).items()}
        self._contract = contract or JobContract.from_catalog(catalog)  # type: ignore[arg-type]  # one is given
        self._scheduling = scheduling
        self._clock = clock or (lambda: datetime.now(UTC))

    @classmethod
    def from_stack(
        cls,
        ssm_client: Any,
        sqs_client: Any,
        scheduler_client: Any = None,
        stack_name: str = DEFAULT_STACK_NAME,
        catalog: Catalog | None = None,
        clock: Callable[[], datetime] | None = None,
        queues: Iterable[str] | None = None,
        dynamodb_client: Any = None,
        results_client: Any = None,
        lambda_client: Any = None,
    ) -> JobPublisher:
        """A publisher for a deployed stack, from its SSM parameters: its job contract (which jobs exist, on which
        queue: so a job added to the stack after this service was built is published too; a stack without one,
        the given `catalog`), the URL of each of `queues` (default: every queue) and, with a `scheduler_client`,
        what delays beyond 15 minutes need. Name only the queues the service was granted
        (`JobQueue.grant_publish`): SSM refuses a whole GetParameters call that names one parameter it may not
        read. Raises QueueNotConfiguredError when a parameter is missing (the stack is not deployed here, or has
        another name). With a `dynamodb_client`, `batch` defines batches in the stack's table; with a
        `results_client` (a DynamoDB client; `JobsStack.grant_read_results`), `result` reads jobs' results; with it
        and a `lambda_client` (`JobsStack.grant_send_events`), `send_event` sends events to waiting durable jobs."""
        if lambda_client is not None and results_client is None:
            from sqs_jobs.events import EventsNotConfiguredError

            raise EventsNotConfiguredError(
                "lambda_client sends events to the durable jobs a DynamoDB client finds waiting: pass results_client= "
                "too (a DynamoDB client; the service granted JobsStack.grant_send_events)"
            )
        contract = _published_contract(ssm_client, stack_name)
        if contract is None:
            if catalog is None:
                raise ContractNotGivenError(
                    f"stack {stack_name!r} has no job contract parameter ({contract_parameter_name(stack_name)}) this "
                    "role may read: grant it (JobQueue.grant_publish), or pass catalog= (the project's Catalog)"
                )
            contract = JobContract.from_catalog(catalog)
        chosen = list(queues) if queues is not None else list(contract.queue_names)
        for queue in chosen:
            if queue not in contract.queue_names:
                raise UnknownQueueError(f"unknown queue {queue!r}; the stack has: {', '.join(contract.queue_names)}")
        keys = [QUEUE_URL, QUEUE_ARN, SCHEDULER_ROLE_ARN]
        names = [parameter_name(stack_name, queue, key) for queue in chosen for key in keys]
        # The priority lanes' own queues (the default lane's is the queue's): only a queue that has lanes costs more.
        other_lanes = {queue: _other_lanes(contract, queue) for queue in chosen}
        names += [
            lane_parameter_name(stack_name, queue, lane, key)
            for queue in chosen
            for lane in other_lanes[queue]
            for key in LANE_ENDPOINT_KEYS
        ]
        if scheduler_client is not None:
            names += [schedules_parameter_name(stack_name, key) for key in (SCHEDULE_GROUP, SCHEDULES_DLQ_ARN)]
        if dynamodb_client is not None:
            names.append(batches_parameter_name(stack_name))
        if results_client is not None:
            names.append(results_parameter_name(stack_name))
        values: dict[str, str] = {}
        for start in range(0, len(names), 10):  # GetParameters takes 10 names at most
            response = ssm_client.get_parameters(Names=names[start : start + 10])
            values.update({item["Name"]: item["Value"] for item in response.get("Parameters", [])})
        required = [
            name
            for name in names
            if name.endswith(f"/{QUEUE_URL}")
            or scheduler_client is not None
            or name.startswith((f"/{stack_name}/batch", f"/{stack_name}/results"))
        ]
        missing = [name for name in required if name not in values]
        if missing:
            raise QueueNotConfiguredError(
                f"stack {stack_name!r} has no SSM parameter {missing[0]}: is it deployed to this account and region?"
            )
        urls = {queue: values[parameter_name(stack_name, queue, QUEUE_URL)] for queue in chosen}
        lane_urls = {
            queue: {lane: values[lane_parameter_name(stack_name, queue, lane, QUEUE_URL)] for lane in lanes}
            for queue, lanes in other_lanes.items()
            if lanes
        }
        scheduling = None
        if scheduler_client is not None:
            scheduling = Scheduling(
                client=scheduler_client,
                group=values[schedules_parameter_name(stack_name, SCHEDULE_GROUP)],
                dead_letter_arn=values[schedules_parameter_name(stack_name, SCHEDULES_DLQ_ARN)],
                targets={
                    queue: ScheduleTarget(
                        queue_arn=values[parameter_name(stack_name, queue, QUEUE_ARN)],
                        role_arn=values[parameter_name(stack_name, queue, SCHEDULER_ROLE_ARN)],
                        lane_arns={
                            lane: values[lane_parameter_name(stack_name, queue, lane, QUEUE_ARN)]
                            for lane in other_lanes[queue]
                        },
                    )
                    for queue in chosen
                },
            )
        batches = (
            BatchTable(dynamodb_client, values[batches_parameter_name(stack_name)])
            if dynamodb_client is not None
            else None
        )
        results = (
            _results_reader(results_client, values[results_parameter_name(stack_name)])
            if results_client is not None
            else None
        )
        events = (
            _events_sender(results_client, lambda_client, values[results_parameter_name(stack_name)])
            if lambda_client is not None
            else None
        )
        return cls(
            sqs_client,
            urls,
            catalog=catalog,
            scheduling=scheduling,
            clock=clock,
            contract=contract,
            batches=batches,
            results=results,
            events=events,
            lane_urls=lane_urls,
        )

    def envelope(
        self,
        job: str,
        entity_id: str,
        key: str | None = None,
        extra: Mapping[str, Scalar] | None = None,
        tenant: str | None = None,
        batch: BatchMember | None = None,
    ) -> Envelope:
        """Build and check an envelope; raises the EnvelopeError subclass a worker would dead-letter it for."""
        envelope = build_envelope(
            job, entity_id, self._contract.job_names, key=key, extra=extra, tenant=tenant, batch=batch
        )
        if envelope.tenant is not None and not self._contract.knows_tenants and len(envelope.extra) >= MAX_EXTRA_FIELDS:
            raise EnvelopeFieldError(
                f"{len(envelope.extra)} extra fields and a tenant; this stack's workers predate the tenant field and "
                f"count it as an extra field: at most {MAX_EXTRA_FIELDS - 1} beside a tenant until it is deployed again"
            )
        return envelope

    def _send_fields(self, envelope: Envelope, delay_s: int, group: str | None) -> dict[str, Any]:
        fields = self._delivery_fields(envelope, delay_s, group)
        attributes = dict(self._message_attributes(envelope)) if self._message_attributes is not None else {}
        # The caller's trace, if OpenTelemetry is installed and a span is active (sqs_jobs.tracing); within SQS's
        # 10 attributes, a message with all of them otherwise goes untraced.
        traceparent = current_traceparent()
        if traceparent is not None and len(attributes) < SQS_MAX_MESSAGE_ATTRIBUTES:
            attributes[TRACEPARENT] = traceparent_attribute(traceparent)
        if attributes:
            fields["MessageAttributes"] = attributes
        return fields

    def _delivery_fields(self, envelope: Envelope, delay_s: int, group: str | None) -> dict[str, Any]:
        """A FIFO queue needs a message group (default: the entity ID, so one entity's jobs keep their order) and
        takes no per-message delay. On a standard queue the message group is the tenant's, if there is one: SQS's
        fair queues go by it (the SQS Developer Guide, "Amazon SQS fair queues")."""
        if not self._contract.is_fifo(self._contract.queue_for_job(envelope.job)):
            if group is not None:
                raise PublishError(
                    f"job {envelope.job!r} is on a standard queue; `group` is a FIFO queue's order: for fair queues "
                    "pass tenant= (sent as the message group)"
                )
            fields: dict[str, Any] = {"DelaySeconds": delay_s} if delay_s else {}
            if envelope.tenant is not None:
                fields["MessageGroupId"] = envelope.tenant
            return fields
        if delay_s:
            raise InvalidDelayError(f"job {envelope.job!r} is on a FIFO queue, which takes no per-message delay")
        return {"MessageGroupId": group or envelope.id}

    def _queue_url(self, job: str, priority: str | None = None) -> str:
        queue = self._contract.queue_for_job(job)
        lane = self._contract.lane(queue, priority)
        if lane is not None and lane != self._contract.default_lanes.get(queue):
            try:
                return self._lane_urls[queue][lane]
            except KeyError:
                configured = ", ".join(sorted(self._lane_urls.get(queue, {}))) or "none"
                raise QueueNotConfiguredError(
                    f"no URL for lane {lane!r} of queue {queue!r} (job {job!r}); configured lanes: {configured}"
                ) from None
        try:
            return self._queue_urls[queue]
        except KeyError:
            raise QueueNotConfiguredError(
                f"no URL for queue {queue!r} (job {job!r}); configured: {', '.join(sorted(self._queue_urls)) or 'none'}"
            ) from None

    @staticmethod
    def _check_delay(delay_s: int) -> None:
        if not 0 <= delay_s <= MAX_DELAY_S:
            raise InvalidDelayError(f"delay {delay_s}s is outside SQS's 0..{MAX_DELAY_S} seconds")

    def publish(
        self,
        job: str,
        entity_id: str,
        key: str | None = None,
        delay_s: int | None = None,
        extra: Mapping[str, Scalar] | None = None,
        group: str | None = None,
        *,
        delay: timedelta | float | None = None,
        at: datetime | None = None,
        tenant: str | None = None,
        priority: str | None = None,
    ) -> str:
        """Enqueue one job; returns the SQS message ID, or for a job due more than 15 minutes ahead the name of
        the one-time schedule that will send it (`once-...`; `cancel_scheduled` cancels it). At most one of
        `delay_s` (seconds, 0-900), `delay` (a timedelta or seconds) and `at` (a timezone-aware time) chooses
        when (None: not given; two given, zeros included, raise ConflictingDelaysError); `group` is the FIFO
        message group (default: the ID); `tenant` whose job it is (in the body, and on a standard queue the
        message group); `priority` the lane of a queue with priority lanes (None: its default lane; one it doesn't
        have raises UnknownPriorityError, naming those it has)."""
        wait_s = self._wait_s(delay_s, delay, at)
        envelope = self.envelope(job, entity_id, key=key, extra=extra, tenant=tenant)
        if wait_s > MAX_DELAY_S:
            return self._schedule(envelope, self._clock() + timedelta(seconds=wait_s), group, priority)
        # Rounded up: a job never arrives earlier than asked.
        seconds = math.ceil(wait_s)
        request: dict[str, Any] = {"QueueUrl": self._queue_url(job, priority), "MessageBody": envelope.to_json()}
        request.update(self._send_fields(envelope, seconds, group))
        return str(self._sqs.send_message(**request)["MessageId"])

    def _wait_s(self, delay_s: int | None, delay: timedelta | float | None, at: datetime | None) -> float:
        """Seconds from now until the job is due, checked."""
        # Given is `not None`, never truthiness: `delay_s=300, delay=0` is a contradiction, not "no delay".
        chosen = {"delay_s": delay_s, "delay": delay, "at": at.isoformat() if at is not None else None}
        given = [f"{name}={value!r}" for name, value in chosen.items() if value is not None]
        if len(given) > 1:
            raise ConflictingDelaysError(
                f"publish got {' and '.join(given)}; accepted is at most one of delay_s (seconds, 0-{MAX_DELAY_S}), "
                "delay (a timedelta or seconds) and at (a timezone-aware datetime)"
            )
        if at is not None:
            if at.tzinfo is None:
                raise InvalidDelayError(f"at={at.isoformat()} has no time zone; give an aware time, e.g. UTC")
            wait_s = (at - self._clock()).total_seconds()
            if wait_s < 0:
                raise InvalidDelayError(f"at={at.isoformat()} is in the past; a job can only be scheduled ahead")
        elif delay is not None:
            wait_s = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
            if not math.isfinite(wait_s) or wait_s < 0:
                raise InvalidDelayError(f"delay {delay} is negative; give 0 or more")
        else:
            self._check_delay(delay_s or 0)
            wait_s = float(delay_s or 0)
        if wait_s > MAX_SCHEDULE_AHEAD.total_seconds():
            raise InvalidDelayError(
                f"the job would be due in {timedelta(seconds=round(wait_s))}; at most {MAX_SCHEDULE_AHEAD.days} days "
                "ahead are accepted"
            )
        return wait_s

    def _schedule(self, envelope: Envelope, due: datetime, group: str | None, priority: str | None = None) -> str:
        if self._scheduling is None:
            raise SchedulingNotConfiguredError(
                f"job {envelope.job!r} is due in over {MAX_DELAY_S // 60} minutes, beyond SQS's delay: build the "
                "publisher with the stack's scheduler (JobPublisher.from_stack(ssm, sqs, scheduler_client))"
            )
        queue = self._contract.queue_for_job(envelope.job)
        target = self._scheduling.targets.get(queue)
        if target is None:
            raise QueueNotConfiguredError(f"no scheduler target for queue {queue!r} (job {envelope.job!r})")
        lane = self._contract.lane(queue, priority)
        target_arn = target.queue_arn
        if lane is not None and lane != self._contract.default_lanes.get(queue):
            if lane not in target.lane_arns:
                raise QueueNotConfiguredError(f"no scheduler target for lane {lane!r} of queue {queue!r}")
            target_arn = target.lane_arns[lane]
        # Whole seconds, rounded up: never earlier than asked.
        due = (due + timedelta(microseconds=999_999)).replace(microsecond=0).astimezone(UTC)
        name = f"{one_time_schedule_prefix(queue)}{uuid.uuid4().hex[:16]}"
        schedule_target: dict[str, Any] = {
            "Arn": target_arn,
            "RoleArn": target.role_arn,
            "Input": envelope.to_json(),
            "RetryPolicy": {
                "MaximumEventAgeInSeconds": SCHEDULE_RETRY_MAX_AGE_S,
                "MaximumRetryAttempts": SCHEDULE_RETRY_ATTEMPTS,
            },
            "DeadLetterConfig": {"Arn": self._scheduling.dead_letter_arn},
        }
        if self._contract.is_fifo(queue):
            schedule_target["SqsParameters"] = {"MessageGroupId": group or envelope.id}
        # On a standard queue a tenant rides in the body alone: EventBridge Scheduler documents SqsParameters'
        # MessageGroupId for FIFO targets only (its API Reference, SqsParameters), so the job arrives without a
        # group and SQS's fair queues count it as a tenant of its own.
        self._scheduling.client.create_schedule(
            Name=name,
            GroupName=self._scheduling.group,
            ScheduleExpression=f"at({due:%Y-%m-%dT%H:%M:%S})",
            ScheduleExpressionTimezone="UTC",
            FlexibleTimeWindow={"Mode": "OFF"},
            ActionAfterCompletion="DELETE",
            Description=f"{envelope.job}:{envelope.id[:80]} due {due.isoformat()}",
            Target=schedule_target,
        )
        return name

    def cancel_scheduled(self, name: str) -> None:
        """Cancel a pending one-time schedule this publisher (or any) made; the job is never sent."""
        if self._scheduling is None:
            raise SchedulingNotConfiguredError("cancelling needs the stack's scheduler: JobPublisher.from_stack(...)")
        if not name.startswith(ONE_TIME_PREFIX):
            raise InvalidDelayError(
                f"{name!r} is not a one-time schedule of a delayed job (they start {ONE_TIME_PREFIX!r})"
            )
        self._scheduling.client.delete_schedule(Name=name, GroupName=self._scheduling.group)

    def publish_many(self, jobs: Iterable[JobRequest], delay_s: int = 0, *, priority: str | None = None) -> list[str]:
        """Enqueue many jobs with SendMessageBatch (chunks of 10 per queue); returns message IDs in input order.
        `jobs` are (job, id) pairs or Envelopes (an Envelope carries a key, a tenant or extra fields). `priority`:
        the lane of every entry whose queue has priority lanes (as `publish`'s).

        Every entry is checked, its queue, message group and delay included, before anything is sent; an entry that
        fails raises the error `publish` would, its message naming the entry's index, job and ID. Entries SQS
        rejects raise PartialPublishError, which carries the IDs of those that were sent, so the caller can retry
        only the failures.
        """
        self._check_delay(delay_s)
        checked = [self._checked_entry(index, job, delay_s, priority) for index, job in enumerate(jobs)]
        by_queue: dict[str, list[int]] = {}
        for index, (_, url, _) in enumerate(checked):
            by_queue.setdefault(url, []).append(index)
        sent: list[str | None] = [None] * len(checked)
        failed: list[FailedEntry] = []
        for url, indexes in by_queue.items():
            for start in range(0, len(indexes), SQS_BATCH_MAX):
                failed += self._send_chunk(url, indexes[start : start + SQS_BATCH_MAX], checked, sent)
        if failed:
            raise PartialPublishError(sent, failed)
        return [message_id for message_id in sent if message_id is not None]

    def result(
        self,
        job: str,
        entity_id: str,
        key: str | None = None,
        *,
        tenant: str | None = None,
        wait: float | None = None,
        published_at: datetime | None = None,
    ) -> JobResult:
        """How the job published as (`job`, `entity_id`, `key`, `tenant`) stands, and once it succeeded what it
        returned (docs/results.md). `wait`: seconds to poll until it is done (succeeded, dead, cancelled,
        expired); past them the state as it is comes back (check `done`). `published_at`: when it was published,
        so that a job whose record has expired and been deleted says EXPIRED, not PENDING. Raises
        UnknownContractJobError for a job the stack doesn't have, ResultsNotConfiguredError without a reader."""
        if self._results is None:
            from sqs_jobs.results import ResultsNotConfiguredError

            raise ResultsNotConfiguredError(
                "this publisher reads no results: build it with JobPublisher.from_stack(..., results_client=dynamodb) "
                "(the service granted JobsStack.grant_read_results), or pass results=JobResults(dynamodb, table)"
            )
        queue = self._contract.queue_for_job(job)
        return self._results.read(
            job,
            entity_id,
            key=key,
            tenant=tenant,
            wait_s=wait,
            published_at=published_at,
            expiry_s=self._contract.expiry_s.get(queue),
            durable=job in self._contract.durable_jobs,
        )

    def send_event(
        self,
        job: str,
        entity_id: str,
        name: str,
        payload: Any = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
    ) -> None:
        """Send the event `name` with `payload` (JSON, at most 256 KB) to the durable job published as (`job`,
        `entity_id`, `key`, `tenant`), which is waiting for it (`context.wait_for_event`; docs/workflows.md). Raises
        EventNotAwaitedError when it isn't waiting for it (not yet, no longer, or for another event): an event is
        never kept for later. UnknownContractJobError for a job the stack doesn't have, NotADurableJobError for one
        that isn't durable, EventsNotConfiguredError without a sender."""
        from sqs_jobs.events import EventsNotConfiguredError, NotADurableJobError

        self._contract.queue_for_job(job)
        if job not in self._contract.durable_jobs:
            durable = ", ".join(sorted(self._contract.durable_jobs)) or "none"
            raise NotADurableJobError(
                f"job {job!r} is not a durable job: only durable jobs wait for events (the stack's: {durable})"
            )
        if self._events is None:
            raise EventsNotConfiguredError(
                "this publisher sends no events: build it with JobPublisher.from_stack(..., results_client=dynamodb, "
                "lambda_client=lambda) (the service granted JobsStack.grant_send_events), or pass "
                "events=JobEvents(dynamodb, lambda, table)"
            )
        self._events.send(job, entity_id, name, payload, key=key, tenant=tenant)

    def batch(
        self,
        jobs: Iterable[JobRequest],
        on_success: tuple[str, str] | None = None,
        on_complete: tuple[str, str] | None = None,
        description: str = "",
        *,
        priority: str | None = None,
    ) -> str:
        """Publish `jobs` as one batch and return its ID. Each member is an ordinary job (its own key, retries,
        DLQ). Once every member has succeeded, `on_success` (a (job, id) pair) is published; once every member has
        ended, succeeded or dead-lettered, `on_complete` is; each exactly once (docs/workflows.md). A member that is
        redriven and then succeeds moves from dead to succeeded, and may complete `on_success` then. `priority`: the
        lane of every member whose queue has priority lanes (as `publish`'s); the callbacks go to their queues'
        default lanes.

        The batch is written first (one PutItem), then its members are sent (SendMessageBatch, chunks of 10):
        PartialPublishError names the batch and carries the members SQS refused, to send again."""
        table = self._batch_table()
        callbacks = {SUCCESS: callback_of(on_success, "on_success"), COMPLETE: callback_of(on_complete, "on_complete")}
        for callback in callbacks.values():
            if callback is not None:
                # Checked as the member's worker will publish it.
                self.envelope(*callback)
        if not isinstance(description, str):
            raise BatchDefinitionError(f"description must be a string, got {type(description).__name__}")
        batch_id = new_batch_id()
        requested = list(jobs)
        if not 1 <= len(requested) <= MAX_BATCH_MEMBERS:
            raise BatchDefinitionError(
                f"a batch of {len(requested)} members; 1 to {MAX_BATCH_MEMBERS} are accepted: split the work into "
                "batches, each with its own callback"
            )
        members: list[Envelope] = []
        for index, request in enumerate(requested):
            plain = request if isinstance(request, Envelope) else None
            if plain is not None and plain.batch is not None:
                raise BatchDefinitionError(
                    f"batch entry {index} ({plain.job}:{plain.id[:64]}) is a member of batch {plain.batch.batch_id} "
                    "already; a job is a member of one batch"
                )
            member = self._member(index, request, BatchMember(batch_id, index))
            try:
                # Checked as its worker will check it, and its lane as its publish will, before anything is written.
                members.append(
                    self.envelope(member.job, member.id, member.key, member.extra, member.tenant, member.batch)
                )
                self._queue_url(member.job, priority)
            except (EnvelopeError, UnknownPriorityError) as error:
                error.args = (f"batch entry {index} (job {_excerpt(member.job)}, id {_excerpt(member.id)}): {error}",)
                raise
        self._check_publishable(members, callbacks)
        counting, listed = definition_items(
            batch_id,
            [(member.job, member.id) for member in members],
            callbacks,
            description,
            int(self._clock().timestamp()),
            # What the worker compares before counting: a member is its envelope, not only its job and ID.
            digests=[member_digest(member) for member in members],
        )
        # Where `jobctl job show` finds each callback's run by its job and ID: this batch, the latest to name it.
        # Written first: one that fails leaves no batch behind (a pointer to none reads as no batch).
        for pointer in callback_pointers(batch_id, callbacks, int(counting[CREATED_AT]["N"])):
            table.client.put_item(TableName=table.table, Item=pointer)
        # The members' list next: a batch exists for the workers once its counting item does.
        for item in (listed, counting):
            table.client.put_item(
                TableName=table.table,
                Item=item,
                ConditionExpression="attribute_not_exists(#id)",
                ExpressionAttributeNames={"#id": "id"},
            )
        try:
            self.publish_many(members, priority=priority)
        except PartialPublishError as partial:
            partial.batch_id = batch_id
            raise
        return batch_id

    def chain(self, steps: Iterable[JobRequest], description: str = "") -> str:
        """Publish a chain: the first step now, each next one once the step before it succeeded, exactly once
        (docs/workflows.md). Each step is an ordinary job (its key, retries, DLQ); a step dead-lettered stops the
        chain there (`jobctl chain show ID` says where), and redriving it continues the chain. Each step's job must
        list the next step's job in its `publishes`. Returns the chain's ID."""
        from sqs_jobs.chains import MAX_CHAIN_STEPS, chain_item

        table = self._batch_table()
        requested = list(steps)
        if not 1 <= len(requested) <= MAX_CHAIN_STEPS:
            raise BatchDefinitionError(f"a chain of {len(requested)} steps; 1 to {MAX_CHAIN_STEPS} are accepted")
        if not isinstance(description, str):
            raise BatchDefinitionError(f"description must be a string, got {type(description).__name__}")
        chain_id = new_batch_id()
        batch_ids = [new_batch_id() for _ in requested]
        # Checked as their workers will check them, and each step may publish the next.
        envelopes = [
            self.envelope(e.job, e.id, e.key, e.extra, e.tenant, e.batch)
            for e in (
                self._member(n + 1, step, BatchMember(batch_ids[n], 0), entry="chain step")
                for n, step in enumerate(requested)
            )
        ]
        for number, (current, after) in enumerate(itertools.pairwise(envelopes), start=1):
            words = (f"step {number}'s job", f"step {number + 1}'s job")
            self._check_publishable([current], {SUCCESS: (after.job, after.id)}, words)
        now_s = int(self._clock().timestamp())
        items: list[dict[str, Any]] = []
        for index, envelope in enumerate(envelopes):
            following = envelopes[index + 1] if index + 1 < len(envelopes) else None
            extra: dict[str, Any] = {
                CHAIN: {"S": f"{chain_id}.{index}"},
                # A later step may start long after the chain was published: each step is given its own window.
                EXPIRATION: {"N": str(now_s + OPEN_BATCH_TTL_S * (index + 1))},
            }
            if following is not None:
                extra[ON_SUCCESS_ENVELOPE] = {"S": following.to_json()}
            said = f"step {index + 1} of {len(envelopes)} of chain {chain_id}" + (
                f": {description}" if description else ""
            )
            counting, listed = definition_items(
                batch_ids[index],
                [(envelope.job, envelope.id)],
                {SUCCESS: (following.job, following.id) if following else None},
                said[:MAX_DESCRIPTION_CHARS],
                now_s,
                extra=extra,
                digests=[member_digest(envelope)],
            )
            items += [listed, counting]
        items.append(
            chain_item(
                chain_id,
                [(e.job, e.id) for e in envelopes],
                batch_ids,
                description,
                now_s,
                first_step=envelopes[0].to_json(),
            )
        )
        for item in items:
            table.client.put_item(
                TableName=table.table,
                Item=item,
                ConditionExpression="attribute_not_exists(#id)",
                ExpressionAttributeNames={"#id": "id"},
            )
        self.publish_many([envelopes[0]])
        return chain_id

    def _batch_table(self) -> BatchTable:
        if self._batches is None:
            raise BatchesNotConfiguredError(
                "a batch needs the stack's batch table: JobPublisher.from_stack(ssm, sqs, dynamodb_client=dynamodb), "
                "or batches=BatchTable(client, table)"
            )
        if BATCH_FIELD not in self._contract.reserved_fields:
            raise BatchesNotConfiguredError(
                "this stack's workers predate batches (its job contract does not reserve 'batch'): deploy it again"
            )
        return self._batches

    def _check_publishable(
        self,
        members: Sequence[Envelope],
        callbacks: Mapping[str, tuple[str, str] | None],
        said: tuple[str, str] = ("member job", "callback job"),
    ) -> None:
        """Whichever member ends last publishes the callbacks, from its worker: every member's job must list them in
        its `publishes` (the catalog's, when the publisher has one; a job it doesn't know is left to its worker).
        `said` names
        the member and the callback in the refusal."""
        targets = {callback[0] for callback in callbacks.values() if callback is not None}
        known = {job.name: job for queue in self._catalog or () for job in queue.jobs}
        for name in sorted({member.job for member in members}):
            spec = known.get(name)
            missing = sorted(targets - set(spec.publishes)) if spec is not None else []
            if spec is not None and missing:
                raise CallbackNotPublishableError(
                    f"{said[0]} {name!r} may not publish {said[1]} {missing[0]!r}: add it to the job's "
                    f"`publishes` in the catalog (it lists: {', '.join(spec.publishes) or 'none'})"
                )

    def _member(self, index: int, request: object, member: BatchMember, entry: str = "batch entry") -> Envelope:
        """One entry of a batch (or a chain's step) as its member's envelope; an error names the entry."""
        if isinstance(request, Envelope):
            return Envelope(
                job=request.job,
                id=request.id,
                key=request.key,
                extra=request.extra,
                tenant=request.tenant,
                batch=member,
            )
        if isinstance(request, tuple | list) and len(request) == 2 and all(isinstance(p, str) for p in request):
            return Envelope(job=request[0], id=request[1], batch=member)
        raise TypeError(f"{entry} {index} is {_excerpt(request)}; accepted: a (job, id) pair or an Envelope")

    def _checked_entry(
        self, index: int, job: object, delay_s: int, priority: str | None = None
    ) -> tuple[Envelope, str, dict[str, Any]]:
        """One entry of publish_many as an envelope, its queue's URL and its group and delay; an error names the
        entry."""
        if isinstance(job, Envelope):
            name: object = job.job
            entity_id: object = job.id
            key, extra, tenant, batch = job.key, job.extra, job.tenant, job.batch
        elif isinstance(job, tuple | list) and len(job) == 2:
            name, entity_id = job
            key, extra, tenant, batch = None, None, None, None
        else:
            raise TypeError(f"publish_many entry {index} is {_excerpt(job)}; accepted: a (job, id) pair or an Envelope")
        try:
            # An Envelope built by hand is checked again: every path to the queue applies the worker's rules.
            envelope = self.envelope(name, entity_id, key, extra, tenant, batch)  # type: ignore[arg-type]
            return envelope, self._queue_url(envelope.job, priority), self._send_fields(envelope, delay_s, None)
        except (EnvelopeError, PublishError, UnknownPriorityError) as error:
            # The same error, its message prefixed with the entry (code acts on the type, never on the text).
            error.args = (f"publish_many entry {index} (job {_excerpt(name)}, id {_excerpt(entity_id)}): {error}",)
            raise

    def _send_chunk(
        self,
        url: str,
        indexes: Sequence[int],
        checked: Sequence[tuple[Envelope, str, dict[str, Any]]],
        sent: list[str | None],
    ) -> list[FailedEntry]:
        entries = [
            {"Id": str(index), "MessageBody": checked[index][0].to_json(), **checked[index][2]} for index in indexes
        ]
        response = self._sqs.send_message_batch(QueueUrl=url, Entries=entries)
        for success in response.get("Successful", []):
            sent[int(success["Id"])] = success["MessageId"]
        return [
            FailedEntry(
                envelope=checked[int(failure["Id"])][0],
                code=failure.get("Code", ""),
                message=failure.get("Message", ""),
                sender_fault=bool(failure.get("SenderFault")),
            )
            for failure in response.get("Failed", [])
        ]


def _excerpt(value: object, limit: int = 64) -> str:
    """A value as its repr (hidden characters escaped, quotes showing where a string ends), cut to `limit`."""
    text = repr(value[:limit] if isinstance(value, str) else value)
    return text if len(text) <= limit + 8 else text[: limit + 8] + "..."
