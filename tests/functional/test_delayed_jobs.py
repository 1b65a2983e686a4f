"""Jobs later and on a clock, on moto: SQS delays up to 15 minutes, one-time schedules beyond (the publisher),
the catalog's recurring schedules, and the local scheduler that fires them, on a virtual clock."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.local.scheduler import LocalScheduler, LocalSchedules, provision_schedules
from sqs_jobs.publisher import (
    MAX_SCHEDULE_AHEAD,
    ConflictingDelaysError,
    InvalidDelayError,
    JobPublisher,
    QueueNotConfiguredError,
    SchedulingNotConfiguredError,
)
from sqs_jobs.stack_names import recurring_schedule_name, schedule_group_name
from tests.functional.conftest import Harness

NOW = datetime(2026, 12, 2, 4, 0, 7, 250_000, tzinfo=UTC)  # a Wednesday


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def schedules(harness: Harness) -> LocalSchedules:
    return provision_schedules(harness.clients, harness.deployment, catalog=CATALOG)


@pytest.fixture
def publisher(harness: Harness, schedules: LocalSchedules, clock: Clock) -> JobPublisher:
    c = harness.clients
    return JobPublisher.from_stack(c("ssm"), c("sqs"), c("scheduler"), stack_name="SqsJobs", clock=clock)


@pytest.fixture
def scheduler(harness: Harness, schedules: LocalSchedules, clock: Clock) -> LocalScheduler:
    return LocalScheduler(harness.clients, lambda _role: harness.clients("sqs"), schedules, clock=clock)


def _messages(harness: Harness, queue: str) -> list[dict[str, Any]]:
    url = harness.deployment.queues[queue].url
    sqs = harness.clients("sqs")
    found = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    for message in found:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    return [json.loads(message["Body"]) for message in found]


def _schedules(harness: Harness) -> dict[str, dict[str, Any]]:
    scheduler = harness.clients("scheduler")
    group = schedule_group_name("SqsJobs")
    return {
        item["Name"]: scheduler.get_schedule(Name=item["Name"], GroupName=group)
        for item in scheduler.list_schedules(GroupName=group)["Schedules"]
    }


def test_up_to_15_minutes_is_an_sqs_delay(harness: Harness, publisher: JobPublisher) -> None:
    message_id = publisher.publish("order_confirmation", "1", delay=timedelta(minutes=15))
    assert len(message_id) > 0 and not message_id.startswith("once-")
    assert (
        harness.clients("sqs").get_queue_attributes(
            QueueUrl=harness.deployment.queues["orders"].url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
        )["Attributes"]["ApproximateNumberOfMessagesDelayed"]
        == "1"
    )
    assert [name for name in _schedules(harness) if name.startswith("once-")] == []


def test_beyond_15_minutes_is_a_one_time_schedule_that_arrives_no_earlier_than_asked(
    harness: Harness, publisher: JobPublisher, scheduler: LocalScheduler, schedules: LocalSchedules, clock: Clock
) -> None:
    name = publisher.publish("order_confirmation", "2", delay=timedelta(hours=2))

    schedule = _schedules(harness)[name]
    due = (NOW + timedelta(hours=2, seconds=1)).replace(microsecond=0)  # rounded up to the second
    assert schedule["ScheduleExpression"] == f"at({due:%Y-%m-%dT%H:%M:%S})"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    target = schedule["Target"]
    assert json.loads(target["Input"]) == {"job": "order_confirmation", "id": "2"}
    assert target["Arn"] == harness.deployment.queues["orders"].arn
    assert target["RoleArn"] == schedules.role_arns["orders"]
    assert target["DeadLetterConfig"]["Arn"] == schedules.dlq_arn

    clock.now = due - timedelta(seconds=1)
    assert scheduler.tick() == [] and _messages(harness, "orders") == []
    clock.now = due
    [fired] = scheduler.tick()
    assert fired.delivered and fired.scheduled_time == due
    assert _messages(harness, "orders") == [{"job": "order_confirmation", "id": "2"}]
    assert name not in _schedules(harness)  # deleted after it fired
    clock.now = due + timedelta(hours=1)
    assert scheduler.tick() == []  # fired once


def test_a_delayed_tenants_job_carries_its_tenant_in_the_body(
    harness: Harness, publisher: JobPublisher, scheduler: LocalScheduler, clock: Clock
) -> None:
    name = publisher.publish("order_confirmation", "3", delay=timedelta(hours=1), tenant="acme-eu")

    target = _schedules(harness)[name]["Target"]
    assert json.loads(target["Input"]) == {"job": "order_confirmation", "id": "3", "tenant": "acme-eu"}
    # Scheduler documents SqsParameters' message group for FIFO targets only: none for a standard queue.
    assert "SqsParameters" not in target
    assert scheduler.tick() == []
    clock.now = NOW + timedelta(hours=1, seconds=1)
    [fired] = scheduler.tick()
    assert fired.delivered
    assert _messages(harness, "orders") == [{"job": "order_confirmation", "id": "3", "tenant": "acme-eu"}]


def test_at_a_time_and_cancel(
    harness: Harness, publisher: JobPublisher, scheduler: LocalScheduler, clock: Clock
) -> None:
    when = datetime(2026, 12, 24, 9, 0, tzinfo=UTC)
    name = publisher.publish("order_confirmation", "3", at=when)
    assert _schedules(harness)[name]["ScheduleExpression"] == "at(2026-12-24T09:00:00)"
    publisher.cancel_scheduled(name)
    clock.now = when + timedelta(minutes=1)
    assert [firing for firing in scheduler.tick() if firing.schedule == name] == []
    assert _messages(harness, "orders") == []
    assert name not in _schedules(harness)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"at": NOW - timedelta(seconds=1)}, "is in the past"),
        ({"at": datetime(2026, 12, 24, 9, 0)}, "has no time zone"),
        ({"delay": MAX_SCHEDULE_AHEAD + timedelta(seconds=1)}, "at most 365 days ahead"),
        ({"delay": -5}, "is negative"),
        ({"delay": 60, "at": NOW + timedelta(hours=1)}, "accepted is at most one of delay_s"),
    ],
)
def test_bad_times_are_refused_in_one_line(publisher: JobPublisher, kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidDelayError, match=needle) as refused:
        publisher.publish("order_confirmation", "4", **kwargs)
    assert "\n" not in str(refused.value)


IN_AN_HOUR = NOW + timedelta(hours=1)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"delay_s": 300, "delay": 0}, "delay_s=300 and delay=0"),  # the issue's: it sent with no delay
        ({"delay_s": 0, "at": IN_AN_HOUR}, "delay_s=0 and at='2026-12-02T05:00:07.250000+00:00'"),
        ({"delay_s": 0, "delay": 0.0}, "delay_s=0 and delay=0.0"),
        ({"delay": timedelta(0), "at": IN_AN_HOUR}, "delay=datetime.timedelta(0) and at="),
        ({"delay_s": 60, "delay": timedelta(minutes=1), "at": IN_AN_HOUR}, "delay_s=60 and delay=datetime.timedelta"),
        ({"delay_s": False, "delay": 120}, "delay_s=False and delay=120"),
    ],
)
def test_two_ways_of_saying_when_are_refused_even_when_one_is_zero(
    harness: Harness, publisher: JobPublisher, kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConflictingDelaysError) as refused:
        publisher.publish("order_confirmation", "6", **kwargs)

    message = str(refused.value)
    assert isinstance(refused.value, InvalidDelayError)
    assert f"publish got {named}" in message
    assert message.endswith(
        "accepted is at most one of delay_s (seconds, 0-900), delay (a timedelta or seconds) and at (a "
        "timezone-aware datetime)"
    )
    assert "\n" not in message
    assert _messages(harness, "orders") == []  # refused before anything was sent or scheduled
    assert [name for name in _schedules(harness) if name.startswith("once-")] == []


def test_none_is_not_given_and_a_lone_zero_is_no_delay(harness: Harness, publisher: JobPublisher) -> None:
    # A wrapper that passes its optional arguments on (`delay=None, at=when`) says one thing only.
    name = publisher.publish("order_confirmation", "7", delay_s=None, delay=None, at=IN_AN_HOUR)
    publisher.publish("order_confirmation", "8", delay_s=0)
    publisher.publish("order_confirmation", "9", delay=timedelta(0))

    # Named by its queue, which a publisher's grant is scoped to; 16 random hex digits make it unique.
    assert re.fullmatch(r"once-orders\.[0-9a-f]{16}", name) and name in _schedules(harness)
    assert sorted(body["id"] for body in _messages(harness, "orders")) == ["8", "9"]  # not delayed: visible now


def test_a_long_delay_without_the_scheduler_is_refused(harness: Harness, clock: Clock) -> None:
    plain = JobPublisher(
        harness.clients("sqs"), {"orders": harness.deployment.queues["orders"].url}, clock=clock, catalog=CATALOG
    )
    with pytest.raises(SchedulingNotConfiguredError, match="beyond SQS's delay"):
        plain.publish("order_confirmation", "5", delay=timedelta(minutes=16))


def test_the_catalogs_weekly_review_fires_at_its_time_with_the_scheduled_time_as_id(
    harness: Harness, schedules: LocalSchedules, scheduler: LocalScheduler, clock: Clock
) -> None:
    name = recurring_schedule_name("dlq_review", "weekly")
    schedule = _schedules(harness)[name]
    assert schedule["ScheduleExpression"] == "cron(0 9 ? * MON *)"
    assert schedule["Target"]["RoleArn"] == schedules.role_arns["maintenance"]
    monday = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    clock.now = monday - timedelta(minutes=1)
    assert scheduler.tick() == []
    clock.now = monday
    assert [firing.schedule for firing in scheduler.tick()] == [name]
    assert _messages(harness, "maintenance") == [{"job": "dlq_review", "id": "2026-12-07T09:00:00Z"}]
    assert scheduler.tick() == []  # the same time fires once
    clock.now = monday + timedelta(days=7)
    scheduler.tick()
    assert {body["id"] for body in _messages(harness, "maintenance")} == {
        "2026-12-07T09:00:00Z",
        "2026-12-14T09:00:00Z",
    }


def test_a_disabled_schedule_does_not_fire_and_a_failed_delivery_is_dead_lettered(
    harness: Harness, schedules: LocalSchedules, scheduler: LocalScheduler, clock: Clock
) -> None:
    api = harness.clients("scheduler")
    common = {
        "GroupName": schedules.group,
        "ScheduleExpression": "rate(1 minute)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
    }
    orders = harness.deployment.queues["orders"]
    input_ = '{"job":"order_confirmation","id":"<aws.scheduler.scheduled-time>"}'
    api.create_schedule(
        Name="paused", State="DISABLED", Target={"Arn": orders.arn, "RoleArn": "r", "Input": input_}, **common
    )
    missing = orders.arn.rsplit(":", 1)[0] + ":no-such-queue"
    api.create_schedule(Name="broken", Target={"Arn": missing, "RoleArn": "r", "Input": input_}, **common)
    clock.now = datetime.now(UTC) + timedelta(minutes=2)

    fired = scheduler.tick()

    assert [(firing.schedule, firing.delivered) for firing in fired] == [("broken", False)]
    dead = harness.clients("sqs").receive_message(QueueUrl=schedules.dlq_url, MessageAttributeNames=["All"])
    [letter] = dead["Messages"]
    assert letter["MessageAttributes"]["TARGET_ARN"]["StringValue"] == missing
    assert json.loads(letter["Body"])["job"] == "order_confirmation"


def test_a_publisher_for_some_queues_reads_only_their_parameters(
    harness: Harness, schedules: LocalSchedules, clock: Clock
) -> None:
    c = harness.clients
    orders_only = JobPublisher.from_stack(c("ssm"), c("sqs"), c("scheduler"), queues=["orders"], clock=clock)
    assert orders_only.publish("order_confirmation", "6", delay=timedelta(hours=1)).startswith("once-")
    with pytest.raises(QueueNotConfiguredError, match="no URL for queue 'invoices'"):
        orders_only.publish("generate_invoice", "7")


def test_publish_many_checks_a_hand_built_envelope_as_publish_does_and_sends_nothing(harness: Harness) -> None:
    from sqs_jobs.envelope import Envelope
    from sqs_jobs.errors import EnvelopeFieldError

    url = harness.deployment.queues["orders"].url
    plain = JobPublisher(harness.clients("sqs"), {"orders": url}, catalog=CATALOG)
    good = Envelope(job="order_confirmation", id="1001")
    hidden = Envelope(job="order_confirmation", id="txt\u202egpj.exe")  # built by hand, past build_envelope

    with pytest.raises(EnvelopeFieldError, match=r"field 'id' contains U\+202E \(RIGHT-TO-LEFT OVERRIDE\)"):
        plain.publish_many([good, hidden])

    attributes = harness.clients("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "0"
