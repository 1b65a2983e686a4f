"""Jobs on a clock (sqs_jobs.cdk.job_schedules), on the shared synth: the stack's schedule group, one schedule per
catalog `Schedule`, a sender role per queue, the schedules' dead-letter queue, its SSM parameters and the alarm
for deliveries the scheduler could not make. Plus a FIFO queue's message group, in a small stack of its own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from functions.catalog import CATALOG
from sqs_jobs.cdk.job_schedules import JobSchedules
from sqs_jobs.cdk.naming import recurring_schedule_name, schedule_group_name
from sqs_jobs.envelope import parse_envelope
from sqs_jobs.limits import DAY
from sqs_jobs.specs import JobSpec, QueueSpec, Schedule
from tests.infra.alarm_checks import Metric, math
from tests.infra.cfn import find_one, of_type, permissions, props, queue_id, render, role_statements
from tests.infra.conftest import Synth
from tests.infra.dashboard_checks import dashboard_body, expressions, graph
from tests.infra.heartbeat_checks import SCHEDULED_TIME, is_heartbeat
from tests.infra.metric_math import evaluate

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)
CATALOG_SCHEDULES = [(spec, job, entry) for spec in CATALOG for job in spec.jobs for entry in job.schedules]
SCHEDULES = pytest.mark.parametrize(
    ("spec", "job", "entry"),
    CATALOG_SCHEDULES,
    ids=[recurring_schedule_name(job.name, entry.name) for _, job, entry in CATALOG_SCHEDULES],
)
# The publisher's one-time schedules use the same (lib/sqs_jobs/publisher.py): a day of retries, then the DLQ.
RETRY_POLICY = {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}
ALARM = "schedules-failed-deliveries"


def _group(synth: Synth) -> str:
    name = schedule_group_name(synth.context.stack_name)
    return find_one(synth.resources, "AWS::Scheduler::ScheduleGroup", lambda p: p["Name"] == name)


def _dlq(synth: Synth) -> str:
    # The one queue of the stack without a fixed name (test_queues.py names every other).
    (key,) = [
        key for key in of_type(synth.resources, "AWS::SQS::Queue") if "QueueName" not in props(synth.resources, key)
    ]
    return key


def _job_schedules(synth: Synth) -> dict[str, Mapping[str, Any]]:
    return {
        key: value["Properties"]
        for key, value in of_type(synth.resources, "AWS::Scheduler::Schedule").items()
        if not is_heartbeat(value["Properties"])
    }


def _scheduler_role(synth: Synth, spec: QueueSpec) -> str:
    role = synth.stack.queues[spec.name].scheduler_role
    return str(synth.stack.resolve(synth.stack.get_logical_id(role.node.default_child)))  # type: ignore[arg-type]


def test_the_stacks_schedule_group_is_named_for_it_and_deleted_with_it(synth: Synth) -> None:
    group = synth.resources[_group(synth)]

    assert group["Properties"]["Name"] == f"{synth.context.stack_name}-jobs"
    # Pending one-time schedules go with it: their queues are deleted with the stack too.
    assert group["DeletionPolicy"] == "Delete"


def test_one_schedule_per_catalog_schedule_and_no_other(synth: Synth) -> None:
    names = {schedule["Name"] for schedule in _job_schedules(synth).values()}

    assert names == {recurring_schedule_name(job.name, entry.name) for _, job, entry in CATALOG_SCHEDULES}
    assert "dlq_review-weekly" in names


@SCHEDULES
def test_the_schedule_sends_its_job_to_its_queue_on_time(
    synth: Synth, spec: QueueSpec, job: JobSpec, entry: Schedule
) -> None:
    name = recurring_schedule_name(job.name, entry.name)
    key = find_one(synth.resources, "AWS::Scheduler::Schedule", lambda p: p.get("Name") == name)
    schedule = props(synth.resources, key)
    queue = queue_id(synth.resources, synth.context.stack_name, spec)
    role = _scheduler_role(synth, spec)

    assert schedule["GroupName"] == schedule_group_name(synth.context.stack_name)
    assert schedule["ScheduleExpression"] == entry.expression
    assert schedule["ScheduleExpressionTimezone"] == entry.timezone
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["State"] == "ENABLED"
    target = dict(schedule["Target"])
    body = target.pop("Input")
    assert target == {
        "Arn": {"Fn::GetAtt": [queue, "Arn"]},
        "RoleArn": {"Fn::GetAtt": [role, "Arn"]},
        "RetryPolicy": RETRY_POLICY,
        "DeadLetterConfig": {"Arn": {"Fn::GetAtt": [_dlq(synth), "Arn"]}},
        **({"SqsParameters": {"MessageGroupId": job.name}} if spec.fifo else {}),
    }
    # The envelope: the job, and the scheduled time as its ID (a firing delivered twice runs once).
    assert json.loads(body) == {"job": job.name, "id": SCHEDULED_TIME}
    for sent in (body, body.replace(SCHEDULED_TIME, "2026-03-02T09:00:00Z")):
        assert parse_envelope(sent, spec.accepted_jobs).job == job.name
    # Created after its group (named, not referenced) and after its role's policy (not referenced at all).
    depends_on = set(synth.resources[key].get("DependsOn", []))
    policy = find_one(synth.resources, "AWS::IAM::Policy", lambda p: p["Roles"] == [{"Ref": role}])
    assert {_group(synth), policy} <= depends_on


def test_the_weekly_dlq_review_runs_mondays_at_9_utc(synth: Synth) -> None:
    (schedule,) = [value for value in _job_schedules(synth).values() if value["Name"] == "dlq_review-weekly"]

    assert (schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"]) == ("cron(0 9 ? * MON *)", "UTC")


@QUEUES
def test_each_queues_scheduler_role_may_send_to_that_queue_and_the_schedules_dlq_only(
    synth: Synth, spec: QueueSpec
) -> None:
    role = _scheduler_role(synth, spec)
    queue = queue_id(synth.resources, synth.context.stack_name, spec)

    # SQS-managed encryption: no KMS permission. The DLQ: Scheduler dead-letters with the execution role.
    assert permissions(role_statements(synth.resources, role)) == {
        ("sqs:SendMessage", f"{queue}.Arn"),
        ("sqs:SendMessage", f"{_dlq(synth)}.Arn"),
    }
    properties = props(synth.resources, role)
    assert not properties.get("ManagedPolicyArns")
    assert not properties.get("Policies")
    (trust,) = properties["AssumeRolePolicyDocument"]["Statement"]
    assert (trust["Principal"], trust["Action"], trust["Effect"]) == (
        {"Service": "scheduler.amazonaws.com"},
        "sts:AssumeRole",
        "Allow",
    )
    # Only schedules of this account, in the stack's group (the confused-deputy guard).
    conditions = {key: render(value) for key, value in trust["Condition"]["StringEquals"].items()}
    assert conditions == {"aws:SourceAccount": "${Account}", "aws:SourceArn": f"{_group(synth)}.Arn"}


def test_every_queue_has_its_own_scheduler_role(synth: Synth) -> None:
    assert len({_scheduler_role(synth, spec) for spec in CATALOG}) == len(CATALOG.queues)


def test_the_schedules_dlq_is_standard_encrypted_tls_only_and_kept_14_days(synth: Synth) -> None:
    dlq = _dlq(synth)
    properties = props(synth.resources, dlq)

    # EventBridge Scheduler can't dead-letter to a FIFO queue.
    assert "FifoQueue" not in properties
    assert properties["SqsManagedSseEnabled"] is True
    assert properties["MessageRetentionPeriod"] == 14 * DAY
    policies = [
        props(synth.resources, key)["PolicyDocument"]["Statement"]
        for key in of_type(synth.resources, "AWS::SQS::QueuePolicy")
        if props(synth.resources, key)["Queues"] == [{"Ref": dlq}]
    ]
    assert policies == [
        [
            {
                "Action": "sqs:*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Resource": {"Fn::GetAtt": [dlq, "Arn"]},
            }
        ]
    ]


def test_the_schedules_parameters_name_the_group_and_the_dlq(synth: Synth) -> None:
    stack_name = synth.context.stack_name
    parameters = {
        props(synth.resources, key)["Name"]: props(synth.resources, key)
        for key in of_type(synth.resources, "AWS::SSM::Parameter")
    }
    dlq = _dlq(synth)
    expected = {
        "group": f"{stack_name}-jobs",
        "dlq-arn": {"Fn::GetAtt": [dlq, "Arn"]},
        "dlq-url": {"Ref": dlq},
    }
    for key, value in expected.items():
        parameter = parameters[f"/{stack_name}/schedules/{key}"]
        assert (parameter["Type"], parameter["Value"]) == ("String", value)


def test_the_failed_deliveries_alarm(synth: Synth) -> None:
    stack_name = synth.context.stack_name
    name = f"{stack_name}-{ALARM}"
    alarm = props(
        synth.resources, find_one(synth.resources, "AWS::CloudWatch::Alarm", lambda p: p["AlarmName"] == name)
    )
    (topic,) = of_type(synth.resources, "AWS::SNS::Topic")
    group = {"ScheduleGroup": f"{stack_name}-jobs"}

    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"], alarm["TreatMissingData"]) == (1, 1, "notBreaching")
    expression, metrics = math(alarm)
    by_name = {metric.name: key for key, metric in metrics.items()}
    assert sorted(metrics.values(), key=lambda metric: metric.name) == sorted(
        [
            Metric(
                "AWS/SQS",
                "ApproximateNumberOfMessagesVisible",
                {"QueueName": f"{_dlq(synth)}.QueueName"},
                "Maximum",
                300,
            ),
            *(
                Metric("AWS/Scheduler", metric, group, "Sum", 300)
                for metric in (
                    "TargetErrorCount",
                    "InvocationsSentToDeadLetterCount",
                    "InvocationsFailedToBeSentToDeadLetterCount",
                    "InvocationDroppedCount",
                )
            ),
        ],
        key=lambda metric: metric.name,
    )
    # Any one of them alone reaches the threshold; nothing reported is no data (not breaching).
    for key in metrics:
        assert evaluate(expression, {other: 1.0 if other == key else None for other in metrics}) == 1.0
    assert evaluate(expression, dict.fromkeys(metrics, 0.0)) == 0
    assert evaluate(expression, dict.fromkeys(metrics)) is None
    assert evaluate(expression, {**dict.fromkeys(metrics), by_name["ApproximateNumberOfMessagesVisible"]: 3.0}) == 3
    # What it means, the runbook section, and the commands to look at the dead-letter events first.
    description = alarm["AlarmDescription"]
    assert len(description) <= 1024
    meaning, _, first = description.partition(" Runbook: docs/runbook.md#scheduled-deliveries-failed. First: ")
    assert first, description
    assert "EventBridge Scheduler" in meaning
    assert f"aws ssm get-parameter --name /{stack_name}/schedules/dlq-url" in first
    assert "aws sqs receive-message" in first


def test_the_dashboard_graphs_what_the_alarm_watches(synth: Synth) -> None:
    body = dashboard_body(synth.resources)
    name = f"{synth.context.stack_name}-{ALARM}"
    alarm = props(
        synth.resources, find_one(synth.resources, "AWS::CloudWatch::Alarm", lambda p: p["AlarmName"] == name)
    )
    expression, _ = math(alarm)

    failed = graph(body, "schedules: failed deliveries (the alarm's sum)")
    assert expressions(failed)["failed deliveries"]["expression"] == expression
    graph(body, "schedules: sends attempted and refused")
    graph(body, "schedules: DLQ depth")


def test_a_fifo_queues_schedules_send_in_a_message_group_named_for_the_job() -> None:
    stack = Stack(App(), "Test")
    schedules = JobSchedules(stack, "Schedules", stack_name="Test", topic=sns.Topic(stack, "Topic"))
    job = JobSpec(
        name="nightly_report",
        handler="functions.jobs.order_confirmation",  # never imported at synth
        schedules=(Schedule(name="nightly", expression="cron(30 2 * * ? *)", timezone="Europe/Berlin"),),
    )
    spec = QueueSpec(name="reports", jobs=(job,), fifo=True)
    schedules.add_queue(spec, sqs.Queue(stack, "Queue", fifo=True))

    (schedule,) = Template.from_stack(stack).find_resources("AWS::Scheduler::Schedule").values()

    assert schedule["Properties"]["Name"] == "nightly_report-nightly"
    assert schedule["Properties"]["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert schedule["Properties"]["Target"]["SqsParameters"] == {"MessageGroupId": "nightly_report"}
