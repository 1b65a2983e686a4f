"""A role EventBridge Scheduler sends with, assumable only by the schedules of one group in this account."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

SCHEDULER = "scheduler.amazonaws.com"


def scheduler_role(scope: Construct, construct_id: str, group: scheduler.ScheduleGroup, description: str) -> iam.Role:
    """A role with no permissions yet, whose trust is the confused-deputy guard: only schedules of this account,
    in `group`."""
    return iam.Role(
        scope,
        construct_id,
        description=description,
        assumed_by=iam.ServicePrincipal(
            SCHEDULER,
            conditions={
                "StringEquals": {
                    "aws:SourceAccount": Stack.of(scope).account,
                    "aws:SourceArn": group.schedule_group_arn,
                }
            },
        ),
    )
