"""What each queue's heartbeat canary must be: a schedule at the catalog's interval sending a valid heartbeat
envelope to the queue, with a role that may do exactly that. Used on the shared synth and the overrides synth."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqs_jobs.envelope import parse_envelope
from sqs_jobs.limits import MINUTE
from sqs_jobs.specs import HEARTBEAT_JOB, QueueSpec
from tests.infra.cfn import Resources, find_one, of_type, permissions, props, queue_id, render, role_statements

# What EventBridge Scheduler replaces with the time the schedule fired (ISO 8601, UTC).
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


def rate(seconds: int) -> str:
    minutes = seconds // MINUTE
    return f"rate({minutes} minute{'' if minutes == 1 else 's'})"


def is_heartbeat(schedule_props: Mapping[str, Any]) -> bool:
    """A heartbeat schedule, not one of the catalog's recurring job schedules (test_schedules.py)."""
    body = schedule_props["Target"].get("Input")
    return isinstance(body, str) and json.loads(body).get("job") == HEARTBEAT_JOB


def heartbeat_schedules(resources: Resources) -> dict[str, Mapping[str, Any]]:
    return {
        key: value
        for key, value in of_type(resources, "AWS::Scheduler::Schedule").items()
        if is_heartbeat(value["Properties"])
    }


def schedule(resources: Resources, stack_name: str, spec: QueueSpec) -> Mapping[str, Any]:
    queue = queue_id(resources, stack_name, spec)
    key = find_one(
        resources,
        "AWS::Scheduler::Schedule",
        lambda p: p["Target"]["Arn"] == {"Fn::GetAtt": [queue, "Arn"]} and is_heartbeat(p),
    )
    return props(resources, key)


def check_heartbeat_canary(resources: Resources, stack_name: str, spec: QueueSpec) -> None:
    queue = queue_id(resources, stack_name, spec)
    found = schedule(resources, stack_name, spec)
    target = found["Target"]

    assert found["ScheduleExpression"] == rate(spec.alarms.heartbeat_interval_s)
    assert found["State"] == "ENABLED"
    assert found["FlexibleTimeWindow"] == {"Mode": "OFF"}
    # A failed send is retried, but never past the next heartbeat.
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == spec.alarms.heartbeat_interval_s
    # The body is a heartbeat envelope the queue's worker accepts, before and after Scheduler fills in the time.
    body = target["Input"]
    assert SCHEDULED_TIME in body
    for sent in (body, body.replace(SCHEDULED_TIME, "2025-06-01T12:05:00Z")):
        envelope = parse_envelope(sent, spec.accepted_jobs)
        assert envelope.job == HEARTBEAT_JOB
    assert parse_envelope(body, spec.accepted_jobs).id == SCHEDULED_TIME
    # A FIFO queue takes a message group (content-based deduplication needs the varying id).
    if spec.fifo:
        assert target["SqsParameters"] == {"MessageGroupId": HEARTBEAT_JOB}
    else:
        assert "MessageGroupId" not in target.get("SqsParameters", {})

    # The role: only SendMessage to this queue, only for EventBridge Scheduler, this account, this stack's group.
    assert set(target["RoleArn"]) == {"Fn::GetAtt"} and target["RoleArn"]["Fn::GetAtt"][1] == "Arn"
    role = target["RoleArn"]["Fn::GetAtt"][0]
    assert permissions(role_statements(resources, role)) == {("sqs:SendMessage", f"{queue}.Arn")}
    role_props = props(resources, role)
    assert not role_props.get("ManagedPolicyArns")
    assert not role_props.get("Policies")
    (trust,) = role_props["AssumeRolePolicyDocument"]["Statement"]
    (group,) = [
        key for key in of_type(resources, "AWS::Scheduler::ScheduleGroup") if is_heartbeat_group(resources, key)
    ]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Action"] == "sts:AssumeRole"
    conditions = {key: render(value) for key, value in trust["Condition"]["StringEquals"].items()}
    assert conditions == {"aws:SourceAccount": "${Account}", "aws:SourceArn": f"{group}.Arn"}
    assert found["GroupName"] == props(resources, group)["Name"]


def is_heartbeat_group(resources: Resources, group: str) -> bool:
    """The schedule group the heartbeat schedules are in (the catalog's schedules have a group of their own)."""
    name = props(resources, group)["Name"]
    return any(schedule["Properties"]["GroupName"] == name for schedule in heartbeat_schedules(resources).values())
