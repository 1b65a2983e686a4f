"""The heartbeat canary: an EventBridge Scheduler schedule per queue that publishes a `heartbeat` job to it.

The worker records each heartbeat as a metric (Heartbeat, job `heartbeat`); the queue's heartbeat alarm fires
when none arrives for `alarms.heartbeat_missing_after_s`. So the alarm proves end to end that the queue, the
event source mapping and the worker all work, even when no real job is published.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sqs_jobs.cdk import monitoring
from sqs_jobs.cdk.naming import pascal_case
from sqs_jobs.cdk.scheduler_role import scheduler_role
from sqs_jobs.specs import HEARTBEAT_JOB, QueueSpec
from sqs_jobs.stack_names import recurring_input

# FIFO queues need a message group; the heartbeats of a queue are one group of their own.
HEARTBEAT_GROUP = HEARTBEAT_JOB
# Retries of a failed send: a few, and never older than one interval (the next heartbeat is due by then).
RETRY_ATTEMPTS = 3


def heartbeat_input() -> scheduler.ScheduleTargetInput:
    """The message body: an ID-only envelope whose id is the scheduled time, which Scheduler fills in
    (`<aws.scheduler.scheduled-time>`, e.g. 2025-01-01T12:00:00Z), as for every recurring job. Each heartbeat's
    body differs, so a FIFO queue's content-based deduplication never drops one, and the worker's log says which
    schedule run it was."""
    return scheduler.ScheduleTargetInput.from_text(recurring_input(HEARTBEAT_JOB))


class HeartbeatCanary(Construct):
    """`group` (this stack's heartbeat schedules) and, per queue, a `schedules[queue]` with its own role.

    Each role may only `sqs:SendMessage` to its queue (SQS-managed encryption: no KMS permission), and only
    EventBridge Scheduler may assume it, for a schedule in this account and in `group`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queues: Sequence[tuple[QueueSpec, sqs.IQueue]],
    ) -> None:
        super().__init__(scope, construct_id)
        monitoring.check(*(spec for spec, _ in queues))
        # Deleted with the stack: it holds nothing but these schedules.
        self.group = scheduler.ScheduleGroup(self, "Group", removal_policy=RemovalPolicy.DESTROY)
        self.schedules: dict[str, scheduler.Schedule] = {}
        self.roles: dict[str, iam.Role] = {}
        for spec, queue in queues:
            self._add(spec, queue)

    def _add(self, spec: QueueSpec, queue: sqs.IQueue) -> None:
        prefix = pascal_case(spec.name)
        interval = Duration.seconds(spec.alarms.heartbeat_interval_s)
        role = scheduler_role(
            self,
            f"{prefix}Role",
            self.group,
            f"EventBridge Scheduler sends the {spec.name} queue's heartbeat with this role",
        )
        # SqsSendMessage grants the role sqs:SendMessage on the queue, and nothing else.
        target = targets.SqsSendMessage(
            queue,
            input=heartbeat_input(),
            role=role,
            message_group_id=HEARTBEAT_GROUP if spec.fifo else None,
            retry_attempts=RETRY_ATTEMPTS,
            max_event_age=interval,
        )
        self.schedules[spec.name] = scheduler.Schedule(
            self,
            f"{prefix}Schedule",
            description=f"Heartbeat canary: a heartbeat job to the {spec.name} queue every {interval.to_minutes()} min",
            schedule=scheduler.ScheduleExpression.rate(interval),
            schedule_group=self.group,
            target=target,
            # On time, not within a flexible window: the alarm's window counts on the interval.
            time_window=scheduler.TimeWindow.off(),
            enabled=True,
        )
        self.roles[spec.name] = role
