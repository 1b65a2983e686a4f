"""SQS's own redrive (StartMessageMoveTask), as jobctl drives it: always to a named destination, followed to its
end, a failure reported with SQS's reason, cancellable. The API is checked against botocore's service model (the
Stubber); the same calls run against LocalStack's SQS in the deploy rehearsal (tests/rehearsal)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from sqs_jobs.cli.dlq import BadRateError, MoveTaskFailedError, MoveTasks, MoveTaskStatus, NoMoveTaskError

DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:SqsJobs-orders-dlq"
SOURCE_ARN = "arn:aws:sqs:us-east-1:123456789012:SqsJobs-orders"


@pytest.fixture
def sqs() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def listing(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"Results": [{"SourceArn": DLQ_ARN, "DestinationArn": SOURCE_ARN, **entry} for entry in entries]}


LIST_REQUEST = {"SourceArn": DLQ_ARN, "MaxResults": 1}


def test_a_move_names_its_destination_and_its_rate(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    stubber.add_response(
        "start_message_move_task",
        {"TaskHandle": "handle-1"},
        {"SourceArn": DLQ_ARN, "DestinationArn": SOURCE_ARN, "MaxNumberOfMessagesPerSecond": 50},
    )
    assert MoveTasks(client, DLQ_ARN, SOURCE_ARN).start(50) == "handle-1"


def test_without_a_rate_sqs_chooses_one(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    stubber.add_response(
        "start_message_move_task", {"TaskHandle": "h"}, {"SourceArn": DLQ_ARN, "DestinationArn": SOURCE_ARN}
    )
    MoveTasks(client, DLQ_ARN, SOURCE_ARN).start()


@pytest.mark.parametrize("rate", [0.5, 1.5, 0, 501])
def test_a_rate_sqs_cannot_take_is_refused_with_the_accepted_range(rate: float) -> None:
    with pytest.raises(BadRateError, match="whole number of messages a second from 1 to 500"):
        MoveTasks.check_rate(rate)


@pytest.mark.parametrize(("rate", "expected"), [(None, None), (1, 1), (500.0, 500)])
def test_rates_sqs_takes(rate: float | None, expected: int | None) -> None:
    assert MoveTasks.check_rate(rate) == expected


def test_follow_reports_progress_until_the_task_completes(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    stubber.add_response(
        "list_message_move_tasks",
        listing(
            {
                "Status": "RUNNING",
                "TaskHandle": "h",
                "ApproximateNumberOfMessagesMoved": 3,
                "ApproximateNumberOfMessagesToMove": 10,
            }
        ),
        LIST_REQUEST,
    )
    stubber.add_response(
        "list_message_move_tasks",
        listing(
            {"Status": "COMPLETED", "ApproximateNumberOfMessagesMoved": 10, "ApproximateNumberOfMessagesToMove": 10}
        ),
        LIST_REQUEST,
    )
    seen: list[MoveTaskStatus] = []
    done = MoveTasks(client, DLQ_ARN, SOURCE_ARN).follow(seen.append, sleep=lambda _: None)
    assert (done.status, done.moved) == ("COMPLETED", 10)
    assert [(task.status, task.moved, task.to_move) for task in seen] == [("RUNNING", 3, 10), ("COMPLETED", 10, 10)]


def test_a_failed_task_is_reported_with_sqs_reason(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    stubber.add_response(
        "list_message_move_tasks",
        listing(
            {
                "Status": "FAILED",
                "ApproximateNumberOfMessagesMoved": 0,
                "FailureReason": "AWS.SimpleQueueService.NonExistentQueue",
            }
        ),
        LIST_REQUEST,
    )
    with pytest.raises(MoveTaskFailedError, match=r"AWS\.SimpleQueueService\.NonExistentQueue"):
        MoveTasks(client, DLQ_ARN, SOURCE_ARN).follow(sleep=lambda _: None)


def test_cancel_stops_the_running_task(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    stubber.add_response(
        "list_message_move_tasks",
        listing({"Status": "RUNNING", "TaskHandle": "handle-7", "ApproximateNumberOfMessagesMoved": 4}),
        LIST_REQUEST,
    )
    stubber.add_response(
        "cancel_message_move_task", {"ApproximateNumberOfMessagesMoved": 4}, {"TaskHandle": "handle-7"}
    )
    assert MoveTasks(client, DLQ_ARN, SOURCE_ARN).cancel().moved == 4


@pytest.mark.parametrize("entries", [(), ({"Status": "COMPLETED", "ApproximateNumberOfMessagesMoved": 2},)])
def test_cancel_without_a_running_task_says_so(sqs: tuple[Any, Stubber], entries: tuple[dict[str, Any], ...]) -> None:
    client, stubber = sqs
    stubber.add_response("list_message_move_tasks", listing(*entries), LIST_REQUEST)
    with pytest.raises(NoMoveTaskError, match="no move task is running"):
        MoveTasks(client, DLQ_ARN, SOURCE_ARN).cancel()
