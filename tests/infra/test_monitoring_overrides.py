"""Monitoring follows the catalog and the context, not the defaults: one extra synth of a small stack, built as
app.py builds it, from a one-queue catalog whose thresholds all differ from the defaults (a FIFO queue with two
jobs), with `alarm_topic_arn` set. Plus the errors that stop synth before anything is built."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.cdk.alarm_topic import AlarmTopic, NewAlarmTopic
from sqs_jobs.cdk.context import ContextError
from sqs_jobs.cdk.heartbeat_canary import HeartbeatCanary
from sqs_jobs.cdk.monitoring import MonitoringError
from sqs_jobs.cdk.naming import ALARM_TOPIC_ARN_OUTPUT
from sqs_jobs.cdk.stack import build_app
from sqs_jobs.flow_control import KeyConcurrency, RateLimit
from sqs_jobs.limits import MINUTE
from sqs_jobs.specs import AlarmThresholds, Catalog, CircuitBreakerSpec, JobSpec, QueueSpec
from tests.infra.alarm_checks import QueueUnderTest, check_signal, signals
from tests.infra.cfn import of_type, props
from tests.infra.dashboard_checks import check_dashboard_queue
from tests.infra.heartbeat_checks import check_heartbeat_canary, schedule

TOPIC_ARN = "arn:aws:sns:eu-west-1:123456789012:oncall-alarms"
HANDLER = "functions.jobs.order_confirmation"  # never imported at synth
OVERRIDES = AlarmThresholds(
    oldest_message_age_s=30 * MINUTE,
    dlq_depth=3,
    backlog=50,
    dlq_arrivals=4,
    failure_rate=0.25,
    failure_rate_min_runs=4,
    stalled_after_s=20 * MINUTE,
    duration_ratio=0.5,
    heartbeat_interval_s=2 * MINUTE,
    heartbeat_missing_after_s=10 * MINUTE,
    circuit_opened=3,
    retry_attempts=5,
    hold_share=0.6,
)
REPORTS = QueueSpec(
    name="reports",
    description="A test queue: FIFO, two jobs, every threshold overridden.",
    fifo=True,
    function_timeout_s=5 * MINUTE,
    alarms=OVERRIDES,
    # Not the defaults (5 failures, 15 min), so the circuit-open alarm's description must follow them.
    circuit_breaker=CircuitBreakerSpec(failure_threshold=3, max_hold_s=10 * MINUTE),
    jobs=(
        # Flow control on both jobs (a rate limit, a key's concurrency): the dashboard's flow row is drawn.
        JobSpec(name="render_report", handler=HANDLER, time_limit_s=200, rate_limit=RateLimit(per_second=2, burst=4)),
        JobSpec(name="send_report", handler=HANDLER, concurrency=KeyConcurrency(per="customer")),
    ),
)
# A queue that never retries: no retrying alarm (it could never fire), every other alarm as usual.
RECEIPTS = QueueSpec(
    name="receipts",
    description="A test queue: one attempt per job.",
    max_attempts=1,
    jobs=(JobSpec(name="print_receipt", handler=HANDLER),),
)
CUSTOM = Catalog(resources=APP_RESOURCES, queues=(REPORTS, RECEIPTS))


@dataclass(frozen=True)
class Custom:
    resources: dict[str, Any]
    outputs: dict[str, Any]
    stack_name: str


@pytest.fixture(scope="module")
def custom(cdk_context: dict[str, Any]) -> Custom:
    _, stack = build_app({**cdk_context, "alarm_topic_arn": TOPIC_ARN}, catalog=CUSTOM)
    as_json = Template.from_stack(stack).to_json()
    return Custom(as_json["Resources"], as_json.get("Outputs", {}), stack.stack_name)


def test_every_override_differs_from_the_default() -> None:
    # Otherwise a test below could pass on the defaults.
    for field in fields(AlarmThresholds):
        assert getattr(OVERRIDES, field.name) != getattr(AlarmThresholds(), field.name), field.name


@pytest.mark.parametrize(
    ("spec", "signal"),
    [(spec, signal) for spec in CUSTOM for signal in signals(spec)],
    ids=[f"{spec.name}-{signal}" for spec in CUSTOM for signal in signals(spec)],
)
def test_each_alarm_follows_the_catalog(custom: Custom, spec: QueueSpec, signal: str) -> None:
    check_signal(QueueUnderTest(custom.resources, custom.stack_name, spec, TOPIC_ARN), signal)


def test_a_queue_that_never_retries_has_no_retrying_alarm(custom: Custom) -> None:
    names = {props(custom.resources, key)["AlarmName"] for key in of_type(custom.resources, "AWS::CloudWatch::Alarm")}

    assert f"{custom.stack_name}-reports-retrying" in names
    assert f"{custom.stack_name}-receipts-retrying" not in names
    assert "retrying" not in signals(RECEIPTS)


def test_the_thresholds_are_the_overrides(custom: Custom) -> None:
    under_test = QueueUnderTest(custom.resources, custom.stack_name, REPORTS, TOPIC_ARN)

    assert under_test.alarm("oldest-message-age")["Threshold"] == 1800
    assert under_test.alarm("backlog")["Threshold"] == 50
    assert under_test.alarm("dlq-depth")["Threshold"] == 3
    assert under_test.alarm("dlq-arrivals")["Threshold"] == 4
    assert under_test.alarm("failure-rate")["Threshold"] == 0.25
    stalled = under_test.alarm("stalled")
    assert (stalled["DatapointsToAlarm"], stalled["EvaluationPeriods"]) == (20, 22)
    assert under_test.alarm("heartbeat-missing")["EvaluationPeriods"] == 10
    assert under_test.alarm("circuit-open")["Threshold"] == 3
    assert under_test.alarm("retrying")["Threshold"] == 5
    assert under_test.alarm("held-near-bound")["Threshold"] == 0.6
    # 50% of an explicit 200 s limit, and of the queue's default (half the 300 s function timeout).
    assert under_test.alarm("duration-render_report")["Threshold"] == 100_000
    assert under_test.alarm("duration-send_report")["Threshold"] == 75_000
    assert schedule(custom.resources, custom.stack_name, REPORTS)["ScheduleExpression"] == "rate(2 minutes)"


def test_the_fifo_queue_gets_its_heartbeat_in_a_message_group(custom: Custom) -> None:
    check_heartbeat_canary(custom.resources, custom.stack_name, REPORTS)


@pytest.mark.parametrize("spec", CUSTOM.queues, ids=lambda spec: spec.name)
def test_the_dashboard_follows_the_catalog(custom: Custom, spec: QueueSpec) -> None:
    check_dashboard_queue(custom.resources, custom.stack_name, spec, CUSTOM)


def test_an_existing_topic_replaces_the_stacks_own(custom: Custom) -> None:
    # No topic, key or topic policy of our own; every alarm notifies the given topic; the output says which.
    for kind in ("AWS::SNS::Topic", "AWS::SNS::TopicPolicy", "AWS::SNS::Subscription", "AWS::KMS::Key"):
        assert not of_type(custom.resources, kind), kind
    alarms = of_type(custom.resources, "AWS::CloudWatch::Alarm")
    # The queues', and the stack-wide ones: the job schedules' failed deliveries and the stalled batches.
    assert len(alarms) == sum(len(signals(spec)) for spec in CUSTOM) + 2
    for key in alarms:
        assert props(custom.resources, key)["AlarmActions"] == [TOPIC_ARN]
    assert custom.outputs[ALARM_TOPIC_ARN_OUTPUT]["Value"] == TOPIC_ARN


def test_an_existing_topic_and_an_email_are_refused_together(cdk_context: dict[str, Any]) -> None:
    both = {**cdk_context, "alarm_topic_arn": TOPIC_ARN, "alarm_email": "oncall@example.com"}

    with pytest.raises(ContextError, match="alarm_topic_arn and alarm_email are both set"):
        build_app(both, catalog=CUSTOM)


@pytest.mark.parametrize(
    "settings",
    [
        {"existing_topic_arn": TOPIC_ARN, "new": NewAlarmTopic(alarm_name_prefix="T-", email=None, retain=False)},
        {},
    ],
    ids=["both", "neither"],
)
def test_the_alarm_topic_takes_an_existing_topic_or_settings_for_a_new_one(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"either existing_topic_arn .* or new .*, exactly one"):
        AlarmTopic(Stack(App(), "Test"), "Topic", **settings)


@pytest.mark.parametrize(
    ("thresholds", "problem"),
    [
        (AlarmThresholds(heartbeat_interval_s=90), "alarms.heartbeat_interval_s 90 must be a whole number of minutes"),
        (AlarmThresholds(stalled_after_s=330), "alarms.stalled_after_s 330 must be a whole number of minutes"),
        (
            AlarmThresholds(heartbeat_missing_after_s=2 * 24 * 60 * MINUTE),
            "alarms.heartbeat_missing_after_s 172800 is over CloudWatch's one-day alarm range",
        ),
    ],
)
def test_thresholds_cloudwatch_or_scheduler_cannot_take_stop_synth(
    cdk_context: dict[str, Any], thresholds: AlarmThresholds, problem: str
) -> None:
    spec = replace(REPORTS, alarms=thresholds)

    with pytest.raises(MonitoringError, match=re.escape(problem)):
        build_app(cdk_context, catalog=Catalog(resources=APP_RESOURCES, queues=(spec,)))


def test_a_queue_with_too_many_jobs_for_one_alarm_stops_synth(cdk_context: dict[str, Any]) -> None:
    # failure rate: one JobSucceeded per job + one JobFailed per job + (unparseable): 2 x 5 + 1 = 11 > 10.
    jobs = tuple(JobSpec(name=f"job_{index}", handler=HANDLER) for index in range(5))
    spec = QueueSpec(name="crowded", jobs=jobs)

    with pytest.raises(MonitoringError, match="its 5 jobs need 11 metrics in the failure-rate alarm"):
        build_app(cdk_context, catalog=Catalog(resources=APP_RESOURCES, queues=(spec,)))


def test_the_constructs_check_their_queues_too() -> None:
    spec = replace(REPORTS, alarms=AlarmThresholds(heartbeat_interval_s=90))

    stack = Stack(App(), "Test")

    with pytest.raises(MonitoringError, match="heartbeat_interval_s 90"):
        HeartbeatCanary(stack, "Heartbeat", queues=[(spec, sqs.Queue(stack, "Queue"))])
