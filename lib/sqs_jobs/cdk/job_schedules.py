"""Jobs on a clock: the stack's EventBridge Scheduler group, its dead-letter queue, a sender role per queue, one
schedule per catalog `Schedule`, and the alarm for deliveries the scheduler could not make.

The group holds the catalog's recurring schedules (`<job>-<schedule>`) and the one-time schedules publishers
create for jobs delayed beyond SQS's 15 minutes (sqs_jobs.publisher). Both send with the queue's scheduler
role and dead-letter to the same queue, with the same retry policy. The heartbeat canary keeps its own group and
roles (sqs_jobs.cdk.heartbeat_canary): its schedules have no DLQ, their alarm is the missing heartbeat.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sqs_jobs.cdk import monitoring
from sqs_jobs.cdk.naming import (
    SCHEDULE_DELIVERIES_FAILED,
    SCHEDULE_GROUP,
    SCHEDULES_DLQ_ARN,
    SCHEDULES_DLQ_URL,
    alarm_name_prefix,
    pascal_case,
    recurring_schedule_name,
    schedule_group_name,
    schedules_parameter_name,
)
from sqs_jobs.cdk.queue_alarms import describe
from sqs_jobs.cdk.scheduler_role import SCHEDULER, scheduler_role
from sqs_jobs.limits import DAY
from sqs_jobs.publisher import SCHEDULE_RETRY_ATTEMPTS, SCHEDULE_RETRY_MAX_AGE_S
from sqs_jobs.specs import QueueSpec
from sqs_jobs.stack_names import legacy_one_time_schedule_prefix, one_time_schedule_prefix, recurring_input

# Retries of a failed send, for up to a day, then the DLQ: the publisher's one-time schedules use the same
# (sqs_jobs.publisher), so a delayed job and a recurring one fail alike. A send to SQS fails on a throttle or an
# outage, which backoff rides out, or on a broken role, key or queue policy, which the alarm reports at the first
# target error; the job's ID is its scheduled time, so a late delivery still runs once. 185 is the most the
# scheduler allows: the age bounds the retries, not the count. A weekly job delivered a day late beats one never
# delivered.
# The dead-letter events are evidence, kept as long as SQS allows (like the queues' DLQs).
DEAD_LETTER_RETENTION = Duration.seconds(14 * DAY)
RUNBOOK_ANCHOR = "scheduled-deliveries-failed"
# What publishers may do with their one-time schedules (create, cancel, look one up), and nothing else.
ONE_TIME_SCHEDULE_ACTIONS = ("scheduler:CreateSchedule", "scheduler:DeleteSchedule", "scheduler:GetSchedule")


class JobSchedules(Construct):
    """`group`, `dead_letter_queue` (standard: the scheduler can't dead-letter to FIFO), `alarm`, and, for each queue
    `add_queue` is given, its sender `roles[queue]` and the recurring `schedules[<job>-<schedule>]` of its jobs.

    Each role may only be assumed by EventBridge Scheduler for a schedule of this account in `group`, and may only
    `sqs:SendMessage` to its queue (plus the queue's KMS key, if it has one) and to `dead_letter_queue`: Scheduler
    sends dead-letter events with the schedule's execution role. One role per queue, so a schedule, or a publisher
    passing the role, can reach that queue only.
    """

    def __init__(self, scope: Construct, construct_id: str, *, stack_name: str, topic: sns.ITopic) -> None:
        super().__init__(scope, construct_id)
        self._stack_name = stack_name
        # Deleted with the stack, and with it any pending one-time schedule: their queues go with the stack too.
        self.group = scheduler.ScheduleGroup(
            self,
            "Group",
            schedule_group_name=schedule_group_name(stack_name),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DEAD_LETTER_RETENTION,
        )
        for key, value, meaning in (
            (SCHEDULE_GROUP, self.group.schedule_group_name, "EventBridge Scheduler group of the job schedules"),
            (SCHEDULES_DLQ_ARN, self.dead_letter_queue.queue_arn, "ARN of the job schedules' dead-letter queue"),
            (SCHEDULES_DLQ_URL, self.dead_letter_queue.queue_url, "URL of the job schedules' dead-letter queue"),
        ):
            ssm.StringParameter(
                self,
                f"{pascal_case(key)}Parameter",
                parameter_name=schedules_parameter_name(stack_name, key),
                string_value=value,
                description=meaning,
            )
        self.roles: dict[str, iam.Role] = {}
        self.schedules: dict[str, scheduler.CfnSchedule] = {}
        self.alarm = self._failed_deliveries_alarm(topic)

    def add_queue(self, spec: QueueSpec, queue: sqs.IQueue) -> iam.Role:
        """The queue's sender role, and a schedule for each catalog `Schedule` of its jobs."""
        prefix = pascal_case(spec.name)
        role = scheduler_role(
            self,
            f"{prefix}Role",
            self.group,
            f"EventBridge Scheduler sends scheduled and delayed jobs to the {spec.name} queue with it",
        )
        # Queue.grant adds exactly these actions (and the queue's key, were it a customer-managed one).
        queue.grant(role, "sqs:SendMessage")
        if queue.encryption_master_key is not None:
            queue.encryption_master_key.grant(role, "kms:GenerateDataKey", "kms:Decrypt")
        self.dead_letter_queue.grant(role, "sqs:SendMessage")
        self.roles[spec.name] = role
        for job in spec.jobs:
            for entry in job.schedules:
                name = recurring_schedule_name(job.name, entry.name)
                target = scheduler.CfnSchedule.TargetProperty(
                    arn=queue.queue_arn,
                    role_arn=role.role_arn,
                    input=recurring_input(job.name),
                    retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                        maximum_event_age_in_seconds=SCHEDULE_RETRY_MAX_AGE_S,
                        maximum_retry_attempts=SCHEDULE_RETRY_ATTEMPTS,
                    ),
                    dead_letter_config=scheduler.CfnSchedule.DeadLetterConfigProperty(
                        arn=self.dead_letter_queue.queue_arn
                    ),
                    # A FIFO queue needs a message group: a job's scheduled runs are one group, in order.
                    sqs_parameters=(
                        scheduler.CfnSchedule.SqsParametersProperty(message_group_id=job.name) if spec.fifo else None
                    ),
                )
                schedule = scheduler.CfnSchedule(
                    self,
                    pascal_case(name),
                    name=name,
                    group_name=self.group.schedule_group_name,
                    description=(entry.description or f"{job.name} on {entry.expression} ({entry.timezone})")[:512],
                    schedule_expression=entry.expression,
                    schedule_expression_timezone=entry.timezone,
                    # On time: the catalog's expression says when, not a window around it.
                    flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
                    state="ENABLED",
                    target=target,
                )
                # The group is named, not referenced, and the role's policy isn't referenced at all: without these
                # CloudFormation could create the schedule before its group, or fire it before it may send.
                schedule.node.add_dependency(self.group, role)
                self.schedules[name] = schedule
        return role

    def grant_one_time_schedules(self, grantee: iam.IGrantable, spec: QueueSpec) -> iam.Grant:
        """Let `grantee` delay jobs of `spec`'s queue beyond 15 minutes: create, cancel and read that queue's
        one-time schedules (`once-<queue>.*`, so never a catalog schedule nor another queue's) in the group, and
        pass the queue's role to the scheduler."""
        prefixes = [
            one_time_schedule_prefix(spec.name),
            # Wheels of job contract 1 named them by job (`once-<job>-...`): still theirs, per job of this queue.
            *sorted({legacy_one_time_schedule_prefix(job) for job in spec.job_names}),
        ]
        schedules = [
            Stack.of(self).format_arn(
                service="scheduler",
                resource="schedule",
                resource_name=f"{schedule_group_name(self._stack_name)}/{prefix}*",
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
            for prefix in prefixes
        ]
        queue_name = spec.name
        # The scheduler sends with the queue's role; the publisher never acts with it, it only names it.
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.roles[queue_name].role_arn],
                conditions={"StringEquals": {"iam:PassedToService": SCHEDULER}},
            )
        )
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=list(ONE_TIME_SCHEDULE_ACTIONS), resource_arns=schedules
        )

    def _failed_deliveries_alarm(self, topic: sns.ITopic) -> cloudwatch.Alarm:
        action = actions.SnsAction(topic)
        dlq_url = schedules_parameter_name(self._stack_name, SCHEDULES_DLQ_URL)
        alarm = cloudwatch.Alarm(
            self,
            "FailedDeliveriesAlarm",
            alarm_name=f"{alarm_name_prefix(self._stack_name)}{SCHEDULE_DELIVERIES_FAILED}",
            alarm_description=describe(
                "EventBridge Scheduler could not deliver a scheduled or delayed job to its queue in 5 min: a send "
                "failed (target error; retried for up to a day), or was given up and dead-lettered, dropped, or "
                "not even dead-lettered. The job has not run. Check the dead-letter event, the queue's scheduler "
                "role, the queue's policy and key, and whether the schedule is disabled.",
                RUNBOOK_ANCHOR,
                [
                    f"aws ssm get-parameter --name {dlq_url} --query Parameter.Value --output text",
                    "aws sqs receive-message --queue-url <that URL> --max-number-of-messages 10 "
                    "--visibility-timeout 0 --attribute-names All --message-attribute-names All",
                ],
            ),
            metric=monitoring.scheduled_delivery_failures(self.dead_letter_queue, self.group.schedule_group_name),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            # The scheduler reports nothing while every delivery succeeds, and SQS nothing for an idle empty queue.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        return alarm
