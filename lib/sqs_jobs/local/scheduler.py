"""EventBridge Scheduler on the local engine: the stack's schedule group, per-queue scheduler roles and the
catalog's recurring schedules, provisioned in moto's Scheduler API (which stores schedules but never fires
them), and a firing loop that does what the scheduler does.

The loop reads the group's schedules through the API every tick (so one-time schedules a publisher creates,
and schedules disabled or deleted with the aws CLI, behave as on AWS), and when one is due sends its target
input to its queue on the credentials of its role, with the context attributes filled in; a one-time schedule
with ActionAfterCompletion=DELETE is deleted after it fired. A delivery that fails goes to the schedules DLQ
at once (AWS retries with backoff for up to the retry policy's age first: a local failure is a bug to see).

Its clock may run faster than real time (`FastClock`), so a job due in 20 minutes can be watched arrive.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqs_jobs.cli.schedule_times import next_fire
from sqs_jobs.local.provision import LocalDeployment
from sqs_jobs.local.ticker import Ticker
from sqs_jobs.publisher import SCHEDULE_RETRY_ATTEMPTS, SCHEDULE_RETRY_MAX_AGE_S
from sqs_jobs.specs import Catalog
from sqs_jobs.stack_names import (
    SCHEDULE_GROUP,
    SCHEDULER_ROLE_ARN,
    SCHEDULES_DLQ_ARN,
    SCHEDULES_DLQ_URL,
    parameter_name,
    recurring_input,
    recurring_schedule_name,
    schedule_group_name,
    schedules_parameter_name,
)

log = logging.getLogger("sqs_jobs.local")

TICK_S = 0.5
_SCHEDULER_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "scheduler.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
)


class FastClock:
    """Time from `start` (default: now) on, `speed` times faster than real time: a local engine's scheduler on
    it reaches a time `d` ahead after `d / speed` of real time."""

    def __init__(self, speed: float, start: datetime | None = None) -> None:
        self.speed = speed
        self._start_real = time.monotonic()
        self._start = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self._start + timedelta(seconds=(time.monotonic() - self._start_real) * self.speed)


@dataclass(frozen=True)
class LocalSchedules:
    group: str
    dlq_url: str
    dlq_arn: str
    # Per catalog queue, the role its schedules send with.
    role_arns: dict[str, str]


def provision_schedules(client: Callable[[str], Any], deployment: LocalDeployment, catalog: Catalog) -> LocalSchedules:
    """Create (or find) what the stack's schedules construct creates. Idempotent."""
    stack = deployment.stack_name
    sqs, iam, ssm, scheduler = client("sqs"), client("iam"), client("ssm"), client("scheduler")
    dlq_url = sqs.create_queue(QueueName=f"{stack}-schedules-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    group = schedule_group_name(stack)
    with contextlib.suppress(scheduler.exceptions.ConflictException):  # made by an earlier provision
        scheduler.create_schedule_group(Name=group)
    role_arns: dict[str, str] = {}
    for name in deployment.queues:
        role_name = f"{stack}-{name}-scheduler"[:64]
        try:
            role_arns[name] = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=_SCHEDULER_TRUST)["Role"][
                "Arn"
            ]
        except iam.exceptions.EntityAlreadyExistsException:
            role_arns[name] = iam.get_role(RoleName=role_name)["Role"]["Arn"]
        ssm.put_parameter(
            Name=parameter_name(stack, name, SCHEDULER_ROLE_ARN), Value=role_arns[name], Type="String", Overwrite=True
        )
    for key, value in ((SCHEDULE_GROUP, group), (SCHEDULES_DLQ_ARN, dlq_arn), (SCHEDULES_DLQ_URL, dlq_url)):
        ssm.put_parameter(Name=schedules_parameter_name(stack, key), Value=value, Type="String", Overwrite=True)
    existing = {item["Name"] for item in scheduler.list_schedules(GroupName=group).get("Schedules", [])}
    for spec in catalog:
        for job in spec.jobs:
            for schedule in job.schedules:
                name = recurring_schedule_name(job.name, schedule.name)
                if name in existing:
                    continue
                target: dict[str, Any] = {
                    "Arn": deployment.queues[spec.name].arn,
                    "RoleArn": role_arns[spec.name],
                    "Input": recurring_input(job.name),
                    "RetryPolicy": {
                        "MaximumEventAgeInSeconds": SCHEDULE_RETRY_MAX_AGE_S,
                        "MaximumRetryAttempts": SCHEDULE_RETRY_ATTEMPTS,
                    },
                    "DeadLetterConfig": {"Arn": dlq_arn},
                }
                if spec.fifo:
                    target["SqsParameters"] = {"MessageGroupId": job.name}
                scheduler.create_schedule(
                    Name=name,
                    GroupName=group,
                    ScheduleExpression=schedule.expression,
                    ScheduleExpressionTimezone=schedule.timezone,
                    FlexibleTimeWindow={"Mode": "OFF"},
                    State="ENABLED",
                    Description=schedule.description or f"{job.name} ({schedule.name})",
                    Target=target,
                )
    return LocalSchedules(group=group, dlq_url=dlq_url, dlq_arn=dlq_arn, role_arns=role_arns)


@dataclass(frozen=True)
class Firing:
    schedule: str
    scheduled_time: datetime
    delivered: bool
    # The scheduler's clock when it fired: never before scheduled_time.
    fired_at: datetime


def scheduler_role_session(sts: Any, role_arn: str, region: str) -> Any:
    """A session on the credentials of `role_arn` (a queue's scheduler role), as the scheduler sends with."""
    from sqs_jobs.worker.clients import new_session

    credentials = sts.assume_role(RoleArn=role_arn, RoleSessionName="scheduler")["Credentials"]
    return new_session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=region,
    )


def fill_context(template: str, schedule_arn: str, scheduled_time: datetime) -> str:
    """The target input with EventBridge Scheduler's context attributes replaced, as AWS does at each firing."""
    values = {
        "<aws.scheduler.schedule-arn>": schedule_arn,
        "<aws.scheduler.scheduled-time>": scheduled_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "<aws.scheduler.execution-id>": secrets.token_hex(8),
        "<aws.scheduler.attempt-number>": "1",
    }
    for keyword, value in values.items():
        template = template.replace(keyword, value)
    return template


class LocalScheduler:
    """Fires the schedules of one group when they are due, on `clock`."""

    def __init__(
        self,
        client: Callable[[str], Any],
        role_session: Callable[[str], Any],
        schedules: LocalSchedules,
        clock: Callable[[], datetime] | None = None,
        tick_s: float = TICK_S,
    ) -> None:
        self._scheduler = client("scheduler")
        self._sqs = client("sqs")
        # An SQS client on the credentials of a role ARN: what the scheduler sends with.
        self._role_session = role_session
        self.schedules = schedules
        self.clock = clock or (lambda: datetime.now(UTC))
        # Per schedule name: when it fires next, computed from when it was first seen or last fired.
        self._next: dict[str, datetime | None] = {}
        # Per schedule name: its LastModificationDate and GetSchedule's answer then.
        self._details: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._ticker = Ticker("local-scheduler", self.tick, tick_s)
        self.fired: list[Firing] = []

    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()

    def tick(self) -> list[Firing]:
        """Fire every schedule due by now (each due time once); returns what fired."""
        now = self.clock()
        fired: list[Firing] = []
        listed = self._scheduler.list_schedules(GroupName=self.schedules.group).get("Schedules", [])
        present = {item["Name"] for item in listed}
        for name in list(self._details):
            if name not in present:
                del self._details[name]  # deleted (cancelled, or fired and deleted)
                self._next.pop(name, None)
        for item in listed:
            name = item["Name"]
            schedule = self._schedule(item, now)
            due = self._next.get(name)
            # The summary's state is current: a schedule disabled since it was read is skipped.
            if due is None or due > now or item.get("State") == "DISABLED":
                continue
            delivered = self._deliver(schedule, due)
            fired.append(Firing(schedule=name, scheduled_time=due, delivered=delivered, fired_at=now))
            expression, zone, created = _timing(schedule, now)
            self._next[name] = next_fire(expression, after=due, timezone=zone, start=created)
            if self._next[name] is None and schedule.get("ActionAfterCompletion") == "DELETE":
                self._scheduler.delete_schedule(Name=name, GroupName=self.schedules.group)
                del self._next[name], self._details[name]
        self.fired.extend(fired)
        return fired

    def _schedule(self, summary: dict[str, Any], now: datetime) -> dict[str, Any]:
        """The schedule's full description, read again only when it is new or was modified since (ListSchedules
        names no expression or input); a new or modified schedule's next run is computed afresh."""
        name, modified = summary["Name"], summary.get("LastModificationDate")
        cached = self._details.get(name)
        if cached is not None and cached[0] == modified:
            return cached[1]
        schedule: dict[str, Any] = self._scheduler.get_schedule(Name=name, GroupName=self.schedules.group)
        self._details[name] = (modified, schedule)
        expression, zone, created = _timing(schedule, now)
        self._next[name] = next_fire(
            expression, after=min(now, created) - timedelta(microseconds=1), timezone=zone, start=created
        )
        return schedule

    def _deliver(self, schedule: dict[str, Any], due: datetime) -> bool:
        target = schedule["Target"]
        body = fill_context(target.get("Input", ""), schedule["Arn"], due)
        request: dict[str, Any] = {"MessageBody": body}
        group = (target.get("SqsParameters") or {}).get("MessageGroupId")
        if group:
            request["MessageGroupId"] = group
        try:
            sqs = self._role_session(target["RoleArn"])
            url = sqs.get_queue_url(QueueName=target["Arn"].rsplit(":", 1)[-1])["QueueUrl"]
            sqs.send_message(QueueUrl=url, **request)
            return True
        except Exception as error:
            log.warning("local scheduler: %s could not deliver: %s", schedule["Name"], error)
            self._sqs.send_message(
                QueueUrl=self.schedules.dlq_url,
                MessageBody=body,
                MessageAttributes={
                    "ERROR_CODE": {"DataType": "String", "StringValue": type(error).__name__},
                    "ERROR_MESSAGE": {"DataType": "String", "StringValue": str(error)[:1000] or "(none)"},
                    "SCHEDULE_ARN": {"DataType": "String", "StringValue": schedule["Arn"]},
                    "TARGET_ARN": {"DataType": "String", "StringValue": target["Arn"]},
                },
            )
            return False


def _timing(schedule: dict[str, Any], now: datetime) -> tuple[str, str, datetime]:
    """Expression, time zone and start (creation) of a schedule, as next_fire takes them."""
    zone = schedule.get("ScheduleExpressionTimezone") or "UTC"
    return schedule["ScheduleExpression"], zone, _aware(schedule.get("CreationDate")) or now


def _aware(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return None
