"""The CloudWatch dashboard on the shared synth: every alarm's state, and each queue's graphs."""

from __future__ import annotations

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cdk.naming import DASHBOARD_OUTPUT
from sqs_jobs.specs import QueueSpec
from tests.infra.cfn import of_type, props, render
from tests.infra.conftest import Synth
from tests.infra.dashboard_checks import check_dashboard_queue, dashboard_body

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)


def test_one_dashboard_named_after_the_stack_and_region(synth: Synth) -> None:
    (dashboard,) = of_type(synth.resources, "AWS::CloudWatch::Dashboard")

    assert render(props(synth.resources, dashboard)["DashboardName"]) == f"{synth.context.stack_name}-${{Region}}"
    assert synth.outputs[DASHBOARD_OUTPUT]["Value"] == {"Ref": dashboard}


def test_the_dashboard_shows_the_state_of_every_alarm(synth: Synth) -> None:
    (widget,) = [widget for widget in dashboard_body(synth.resources)["widgets"] if widget["type"] == "alarm"]

    shown = set(widget["properties"]["alarms"])

    assert shown == {f"{alarm}.Arn" for alarm in of_type(synth.resources, "AWS::CloudWatch::Alarm")}


@QUEUES
def test_the_dashboard_graphs_each_queue(synth: Synth, spec: QueueSpec) -> None:
    check_dashboard_queue(synth.resources, synth.context.stack_name, spec, CATALOG)
