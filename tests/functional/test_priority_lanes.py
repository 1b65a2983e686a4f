"""Priority lanes on moto: a publish goes to its lane's queue (a priority the queue lacks is a typed error naming the
lanes), the worker consumes each lane and hands a record back to the lane it came from, and a job published on two
lanes runs once (one key, one record). docs/priorities.md."""

from __future__ import annotations

import json

import pytest

from sqs_jobs.contract import JobContract, UnknownPriorityError
from sqs_jobs.local.provision import LocalQueue
from sqs_jobs.publisher import JobPublisher, QueueNotConfiguredError
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.testing import JobHarness
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.sample_jobs import flaky

CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="mail",
            jobs=(JobSpec(name="send_mail", handler="tests.functional.sample_jobs.flaky"),),
            priorities=("high", "normal", "bulk"),
            default_priority="normal",
        ),
        QueueSpec(name="plain", jobs=(JobSpec(name="plain_job", handler="tests.functional.sample_jobs.flaky"),)),
    )
)


def _bodies(clients: ClientFactory, url: str) -> list[dict[str, str]]:
    response = clients("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    return [json.loads(message["Body"]) for message in response.get("Messages", [])]


def _lane_url(queue: LocalQueue, lane: str) -> str:
    return next(source.url for source in queue.lanes if source.name == lane)


def test_each_lane_is_a_queue_of_its_own_and_the_default_lane_keeps_the_queues_name(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG)
    mail = harness.deployment.queues["mail"]

    assert [lane.name for lane in mail.lanes] == ["high", "normal", "bulk"]
    names = {lane.name: lane.url.rsplit("/", 1)[1] for lane in mail.lanes}
    assert names == {"high": "SqsJobs-mail-high", "normal": "SqsJobs-mail", "bulk": "SqsJobs-mail-bulk"}
    assert harness.deployment.queues["plain"].lanes == ()
    sqs = clients("sqs")
    for lane in mail.lanes:
        attributes = sqs.get_queue_attributes(QueueUrl=lane.url, AttributeNames=["All"])["Attributes"]
        # Every lane dead-letters to the queue's one DLQ, at the queue's receive limit.
        assert json.loads(attributes["RedrivePolicy"]) == {
            "deadLetterTargetArn": mail.dlq_arn,
            "maxReceiveCount": CATALOG.queue("mail").receive_limit,
        }
        assert attributes["SqsManagedSseEnabled"] == "true"
    # moto doesn't return a RedriveAllowPolicy: what provision sets is the stack's (tests/infra/test_priorities.py).
    # One event source mapping per lane, the most urgent with the whole concurrency.
    lambda_client = clients("lambda")
    concurrency = {
        lane.name: lambda_client.list_event_source_mappings(EventSourceArn=lane.arn)["EventSourceMappings"][0][
            "ScalingConfig"
        ]["MaximumConcurrency"]
        for lane in mail.lanes
    }
    assert concurrency == {"high": 5, "normal": 3, "bulk": 3}


def test_a_publish_goes_to_its_lane_and_without_a_priority_to_the_default_lane(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG)
    mail = harness.deployment.queues["mail"]
    publisher = JobPublisher.from_stack(clients("ssm"), clients("sqs"))

    publisher.publish("send_mail", "1", priority="high")
    publisher.publish("send_mail", "2")
    publisher.publish_many([("send_mail", "3"), ("send_mail", "4")], priority="bulk")
    publisher.publish("send_mail", "5", priority="normal")

    assert [body["id"] for body in _bodies(clients, _lane_url(mail, "high"))] == ["1"]
    assert sorted(body["id"] for body in _bodies(clients, mail.url)) == ["2", "5"]
    assert sorted(body["id"] for body in _bodies(clients, _lane_url(mail, "bulk"))) == ["3", "4"]


def test_a_priority_the_queue_lacks_is_a_typed_error_naming_its_lanes(clients: ClientFactory) -> None:
    mail = JobHarness.provisioned(clients, CATALOG).deployment.queues["mail"]
    publisher = JobPublisher.from_stack(clients("ssm"), clients("sqs"))

    with pytest.raises(UnknownPriorityError, match=r"unknown priority 'urgent' for queue 'mail'; its lanes are high, "):
        publisher.publish("send_mail", "1", priority="urgent")
    with pytest.raises(UnknownPriorityError, match="it has no lanes"):
        publisher.publish("plain_job", "1", priority="high")
    with pytest.raises(UnknownPriorityError, match="publish_many entry 1"):
        publisher.publish_many([("send_mail", "1"), ("plain_job", "2")], priority="high")
    # Nothing of the refused batch was sent: every entry is checked first.
    assert not _bodies(clients, _lane_url(mail, "high"))


def test_a_publisher_without_a_lanes_url_says_which_lane_it_lacks() -> None:
    publisher = JobPublisher(
        object(), queue_urls={"mail": "https://q/mail"}, contract=JobContract.from_catalog(CATALOG)
    )
    with pytest.raises(QueueNotConfiguredError, match="no URL for lane 'high' of queue 'mail'"):
        publisher.publish("send_mail", "1", priority="high")


def test_the_worker_hands_a_record_back_to_the_lane_it_came_from(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    mail = harness.deployment.queues["mail"]
    flaky.FAILURES["h1"] = 1
    harness.publish("send_mail", "h1", priority="high")
    harness.publish("send_mail", "n1")

    first = harness.deliver()
    assert first is not None
    # The urgent lane first, whatever waits on the others.
    assert [record["eventSourceARN"] for record in first.event["Records"]] == [_lane_arn(mail, "high")]
    assert first.failed_ids  # a transient failure: its backoff set on the high lane's queue, where it waits
    visible, in_flight = _counts(clients, _lane_url(mail, "high"))
    assert (visible, in_flight) == (0, 1)
    # Its backoff was set on the lane's queue, whose receipt handle it is (on another queue SQS refuses it).
    assert "could not change the message's visibility" not in harness.output.getvalue()
    harness.expire_visibility(first)

    second = harness.deliver()
    assert second is not None and [r["eventSourceARN"] for r in second.event["Records"]] == [_lane_arn(mail, "high")]
    assert not second.failed_ids
    third = harness.deliver()
    assert third is not None and [r["eventSourceARN"] for r in third.event["Records"]] == [mail.arn]
    assert flaky.SIDE_EFFECTS["h1"] == 1 and flaky.SIDE_EFFECTS["n1"] == 1


def test_a_job_published_on_two_lanes_runs_once(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG, default_queue="mail")
    harness.publish("send_mail", "twice", priority="high")
    harness.publish("send_mail", "twice", priority="bulk")

    invocations = harness.drain()

    assert len(invocations) == 2  # each lane's copy delivered...
    assert flaky.SIDE_EFFECTS["twice"] == 1  # ...one key, one record: the second is its duplicate
    assert not any(invocation.failed_ids for invocation in invocations)


def _lane_arn(queue: LocalQueue, lane: str) -> str:
    return next(source.arn for source in queue.lanes if source.name == lane)


def _counts(clients: ClientFactory, url: str) -> tuple[int, int]:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = clients("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return int(attributes[names[0]]), int(attributes[names[1]])


def test_the_harness_counts_what_waits_on_every_lane(clients: ClientFactory) -> None:
    harness = JobHarness.provisioned(clients, CATALOG)
    publisher = harness.publisher()
    publisher.publish("send_mail", "reset-1", priority="high")
    publisher.publish("send_mail", "news-1")

    assert harness.queue_counts("mail") == (2, 0)  # one on each lane's queue


def test_jobctl_locals_banner_names_each_lanes_queue(clients: ClientFactory) -> None:
    from sqs_jobs.cli.commands.local import queue_lines

    harness = JobHarness.provisioned(clients, CATALOG)
    mail, plain = harness.deployment.queues["mail"], harness.deployment.queues["plain"]
    assert queue_lines(harness.deployment) == [
        f"  queue mail: {mail.url}  (the normal lane; DLQ {mail.dlq_url})",
        f"    lane high: {_lane_url(mail, 'high')}",
        f"    lane bulk: {_lane_url(mail, 'bulk')}",
        f"  queue plain: {plain.url}  (DLQ {plain.dlq_url})",
    ]
