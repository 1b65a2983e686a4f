"""Priority lanes in the stack: a queue with lanes synthesizes a queue per lane (the default lane's keeps the
queue's name), each encrypted, TLS-only, redriving to the queue's one DLQ, with its own event source mapping to
the one worker (partial batch responses, the lane's MaximumConcurrency), its alarms, parameters and outputs; the
worker may hand records back to each lane; nothing of it for a queue without lanes (docs/priorities.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.priority_catalog import CATALOG, QUEUE
from sqs_jobs.cdk.naming import LANE_SIGNALS, alarm_name, lane_signal
from sqs_jobs.worker.settings import ENV_LANES
from tests.infra.cfn import find_one, of_type, permissions, props, render, role_id, role_statements, worker_id
from tests.infra.nag import unacknowledged_findings

STACK = "SqsJobs"
SPEC = CATALOG.queue(QUEUE)


@pytest.fixture(scope="module")
def laned(cdk_context: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    from sqs_jobs.cdk.stack import build_app

    app, stack = build_app(cdk_context, catalog=CATALOG)
    template = app.synth().get_stack_artifact(stack.artifact_id).template
    return template, stack


def _queue(resources: dict[str, Any], name: str) -> str:
    return find_one(resources, "AWS::SQS::Queue", lambda p: p.get("QueueName") == name)


def test_each_lane_is_an_encrypted_tls_only_queue_redriving_to_the_one_dlq(laned: tuple[dict[str, Any], Any]) -> None:
    resources = laned[0]["Resources"]
    default, high, dlq = (
        _queue(resources, name) for name in (f"{STACK}-lanes", f"{STACK}-lanes-high", f"{STACK}-lanes-dlq")
    )
    assert len(of_type(resources, "AWS::SQS::Queue")) == 4  # the two lanes, the DLQ, the schedules' DLQ
    for lane in (default, high):
        properties = props(resources, lane)
        assert properties["SqsManagedSseEnabled"] is True
        assert properties["RedrivePolicy"] == {
            "deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]},
            "maxReceiveCount": SPEC.receive_limit,
        }
        assert properties["VisibilityTimeout"] == SPEC.visibility_timeout_s
        assert properties["MaximumMessageSize"] == SPEC.max_message_bytes
        [policy] = [
            value["Properties"]["PolicyDocument"]
            for value in of_type(resources, "AWS::SQS::QueuePolicy").values()
            if {"Ref": lane} in value["Properties"]["Queues"]
        ]
        assert any(
            statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            for statement in policy["Statement"]
        )
    # The DLQ takes both lanes as its sources.
    sources = props(resources, dlq)["RedriveAllowPolicy"]["sourceQueueArns"]
    assert sorted(render(arn) for arn in sources) == [
        f"arn:aws:sqs:${{Region}}:${{Account}}:{STACK}-lanes",
        f"arn:aws:sqs:${{Region}}:${{Account}}:{STACK}-lanes-high",
    ]


def test_each_lane_has_its_event_source_to_the_one_worker_with_its_share(laned: tuple[dict[str, Any], Any]) -> None:
    resources = laned[0]["Resources"]
    worker = worker_id(resources, SPEC)
    assert len(of_type(resources, "AWS::Lambda::Function")) == 1
    mappings = {
        render(value["Properties"]["EventSourceArn"]): value["Properties"]
        for value in of_type(resources, "AWS::Lambda::EventSourceMapping").values()
    }
    high, default = _queue(resources, f"{STACK}-lanes-high"), _queue(resources, f"{STACK}-lanes")
    assert set(mappings) == {f"{high}.Arn", f"{default}.Arn"}
    for arn, lane in ((f"{high}.Arn", "high"), (f"{default}.Arn", "normal")):
        assert mappings[arn]["FunctionName"] == {"Ref": worker}
        assert mappings[arn]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert mappings[arn]["ScalingConfig"] == {"MaximumConcurrency": SPEC.lane_concurrency(lane)}
    assert [SPEC.lane_concurrency(lane) for lane in SPEC.lanes] == [5, 3]
    # The worker knows the other lane's URL, by its ARN, and may consume and hand back to both, nothing more of SQS.
    variables = props(resources, worker)["Environment"]["Variables"]
    lanes = variables[ENV_LANES]
    assert {"Fn::GetAtt": [high, "Arn"]} in lanes["Fn::Join"][1] and {"Ref": high} in lanes["Fn::Join"][1]
    granted = permissions(role_statements(resources, role_id(resources, worker)))
    sqs_grants = {(action, arn) for action, arn in granted if action.startswith("sqs:")}
    dlq = _queue(resources, f"{STACK}-lanes-dlq")
    consume = {
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueUrl",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:SendMessage",
    }
    assert sqs_grants == {
        *((action, f"{queue}.Arn") for queue in (high, default) for action in consume),
        ("sqs:SendMessage", f"{dlq}.Arn"),
    }


def test_each_other_lane_has_its_queues_alarms_and_is_found_by_its_parameters(
    laned: tuple[dict[str, Any], Any],
) -> None:
    template = laned[0]
    resources = template["Resources"]
    names = {value["Properties"]["AlarmName"] for value in of_type(resources, "AWS::CloudWatch::Alarm").values()}
    for signal in LANE_SIGNALS:
        assert alarm_name(STACK, QUEUE, signal) in names
        assert alarm_name(STACK, QUEUE, lane_signal("high", signal)) in names
    [age] = [
        value["Properties"]
        for value in of_type(resources, "AWS::CloudWatch::Alarm").values()
        if value["Properties"]["AlarmName"] == alarm_name(STACK, QUEUE, lane_signal("high", "oldest-message-age"))
    ]
    assert age["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [_queue(resources, f"{STACK}-lanes-high"), "QueueName"]}}
    ]
    assert "#a-priority-lane-is-backed-up" in age["AlarmDescription"]
    parameters = {
        value["Properties"]["Name"]: value["Properties"]["Value"]
        for value in of_type(resources, "AWS::SSM::Parameter").values()
    }
    high = _queue(resources, f"{STACK}-lanes-high")
    assert parameters[f"/{STACK}/queues/{QUEUE}/lanes/high/url"] == {"Ref": high}
    assert parameters[f"/{STACK}/queues/{QUEUE}/lanes/high/arn"] == {"Fn::GetAtt": [high, "Arn"]}
    assert f"/{STACK}/queues/{QUEUE}/lanes/normal/url" not in parameters  # the default lane is the queue's own
    contract = json.loads(parameters[f"/{STACK}/contract"])
    assert contract["queues"][QUEUE]["lanes"] == ["high", "normal"]
    assert contract["queues"][QUEUE]["default_lane"] == "normal"
    assert "LanesLaneHighQueueUrl" in template["Outputs"]


def test_lanes_raise_no_cdk_nag_finding(laned: tuple[dict[str, Any], Any]) -> None:
    assert unacknowledged_findings(laned[1]) == []


def test_the_dashboard_graphs_each_lane_side_by_side_against_its_alarms(laned: tuple[dict[str, Any], Any]) -> None:
    from tests.infra.dashboard_checks import dashboard_body, graph, horizontal_lines, plain_metrics

    resources = laned[0]["Resources"]
    body = dashboard_body(resources)
    lanes = {
        "high": f"{_queue(resources, f'{STACK}-lanes-high')}.QueueName",
        "normal": f"{_queue(resources, f'{STACK}-lanes')}.QueueName",
    }
    shown = {
        "backlog of each priority lane": "ApproximateNumberOfMessagesVisible",
        "age of the oldest job of each priority lane (s)": "ApproximateAgeOfOldestMessage",
        "in flight on each priority lane": "ApproximateNumberOfMessagesNotVisible",
        "jobs taken from each priority lane (per 5 min)": "NumberOfMessagesReceived",
    }
    for title, metric in shown.items():
        widget = graph(body, f"{QUEUE}: {title}")
        lines = [(name, dims, options["label"]) for _, name, dims, options in plain_metrics(widget)]
        # Each lane's own queue, the most urgent first, labelled by its lane.
        assert lines == [(metric, {"QueueName": lanes[lane]}, lane) for lane in ("high", "normal")], title
    assert horizontal_lines(graph(body, f"{QUEUE}: backlog of each priority lane")) == {
        "backlog alarm (each lane)": SPEC.alarms.backlog
    }
    assert horizontal_lines(graph(body, f"{QUEUE}: age of the oldest job of each priority lane (s)")) == {
        "age alarm (each lane)": SPEC.alarms.oldest_message_age_s
    }


def test_a_queue_without_lanes_has_no_lane_graphs(synth: Any) -> None:
    from tests.infra.dashboard_checks import dashboard_body

    titles = [widget["properties"].get("title", "") for widget in dashboard_body(synth.resources)["widgets"]]
    assert titles and not [title for title in titles if "priority lane" in title]
