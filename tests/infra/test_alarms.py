"""Each catalog queue's alarms: the oldest job's age and the DLQ's depth, both to the alarm topic."""

from __future__ import annotations

from typing import Any

import pytest

from functions.catalog import CATALOG, MINUTE, QueueSpec
from infra.naming import DLQ_DEPTH, OLDEST_MESSAGE_AGE, alarm_name
from tests.infra.cfn import find_one, of_type, props, queue_id
from tests.infra.conftest import Synth

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)


def _alarm(synth: Synth, spec: QueueSpec, signal: str) -> dict[str, Any]:
    name = alarm_name(synth.context.stack_name, spec.name, signal)
    return dict(
        props(
            synth.resources,
            find_one(synth.resources, "AWS::CloudWatch::Alarm", lambda p: p["AlarmName"] == name),
        )
    )


def _topic(synth: Synth) -> str:
    (topic,) = of_type(synth.resources, "AWS::SNS::Topic")
    return topic


def test_two_alarms_per_catalog_queue(synth: Synth) -> None:
    assert len(of_type(synth.resources, "AWS::CloudWatch::Alarm")) == 2 * len(CATALOG.queues)


@QUEUES
def test_oldest_message_age_alarm(synth: Synth, spec: QueueSpec) -> None:
    queue = queue_id(synth.resources, synth.context.stack_name, spec)

    alarm = _alarm(synth, spec, OLDEST_MESSAGE_AGE)

    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Maximum", 60, 1)
    assert alarm["Threshold"] == spec.alarms.oldest_message_age_s == 15 * MINUTE
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": _topic(synth)}]
    assert "15 min" in alarm["AlarmDescription"]
    assert "jobctl status" in alarm["AlarmDescription"]


@QUEUES
def test_dlq_depth_alarm_fires_on_the_first_message(synth: Synth, spec: QueueSpec) -> None:
    dlq = queue_id(synth.resources, synth.context.stack_name, spec, dlq=True)

    alarm = _alarm(synth, spec, DLQ_DEPTH)

    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq, "QueueName"]}}]
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Maximum", 60, 1)
    assert alarm["Threshold"] == spec.alarms.dlq_depth == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": _topic(synth)}]
    assert "jobctl dlq list" in alarm["AlarmDescription"]
    assert "redrive" in alarm["AlarmDescription"]
