"""The heartbeat canary on the shared synth: one schedule per catalog queue, in one group this stack owns."""

from __future__ import annotations

import pytest

from functions.catalog import CATALOG
from sqs_jobs.specs import QueueSpec
from tests.infra.cfn import of_type
from tests.infra.conftest import Synth
from tests.infra.heartbeat_checks import check_heartbeat_canary, heartbeat_schedules, is_heartbeat_group

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)


def test_one_schedule_per_queue_in_one_group_deleted_with_the_stack(synth: Synth) -> None:
    schedules = heartbeat_schedules(synth.resources)
    assert len(schedules) == len(CATALOG.queues)
    assert len({schedule["Properties"]["GroupName"] for schedule in schedules.values()}) == 1
    (group,) = [
        key
        for key in of_type(synth.resources, "AWS::Scheduler::ScheduleGroup")
        if is_heartbeat_group(synth.resources, key)
    ]
    assert synth.resources[group]["DeletionPolicy"] == "Delete"


@QUEUES
def test_heartbeat_canary(synth: Synth, spec: QueueSpec) -> None:
    check_heartbeat_canary(synth.resources, synth.context.stack_name, spec)


def test_the_default_heartbeat_runs_every_5_minutes(synth: Synth) -> None:
    expressions = {
        schedule["Properties"]["ScheduleExpression"] for schedule in heartbeat_schedules(synth.resources).values()
    }
    assert expressions == {"rate(5 minutes)"}
