"""LambdaDurableExecutions against botocore's own Lambda model (lib/sqs_jobs/durable/executions.py): moto has no durable
execution APIs, so botocore's Stubber checks every request the sweep makes, and every answer it reads, against the
model (a wrong parameter name or type fails here), and the parsers read the answers' wire shapes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from sqs_jobs.durable.executions import LambdaDurableExecutions, RuntimeSteps, unqualified

ALIAS = "arn:aws:lambda:us-east-1:123456789012:function:SqsJobs-import_orders-durable:live"
FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:SqsJobs-import_orders-durable"
ARN = f"{FUNCTION}:3/durable-execution/import_orders-abc-g0/0f1e2d3c"
HISTORY = {"DurableExecutionArn": ARN, "IncludeExecutionData": True, "MaxItems": 1000, "ReverseOrder": True}
STARTED = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def lambda_client() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client(
        "lambda", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def summary(name: str, status: str) -> dict[str, Any]:
    return {
        "DurableExecutionArn": f"{FUNCTION}:3/durable-execution/{name}/0f1e2d3c",
        "DurableExecutionName": name,
        "FunctionArn": FUNCTION,
        "Status": status,
        "StartTimestamp": STARTED,
        "EndTimestamp": datetime(2026, 5, 1, 13, 0, tzinfo=UTC),
    }


def step_succeeded(name: str, result: str | None, truncated: bool = False) -> dict[str, Any]:
    details: dict[str, Any] = {"Truncated": truncated}
    if result is not None:
        details["Payload"] = json.dumps(result)  # the SDK checkpoints a step's string result as JSON
    return {
        "EventType": "StepSucceeded",
        "EventId": 1,
        "Id": "op",
        "Name": name,
        "EventTimestamp": STARTED,
        "StepSucceededDetails": {"Result": details, "RetryDetails": {"CurrentAttempt": 1}},
    }


def test_the_ended_executions_of_every_version_are_listed_page_by_page(lambda_client: tuple[Any, Stubber]) -> None:
    client, stubber = lambda_client
    expected = {
        "FunctionName": FUNCTION,
        "Statuses": ["FAILED", "TIMED_OUT", "STOPPED"],
        "StartedAfter": STARTED,
        "MaxItems": 1000,
    }
    stubber.add_response(
        "list_durable_executions_by_function",
        {"DurableExecutions": [summary("a-g0", "TIMED_OUT")], "NextMarker": "page-2"},
        expected,
    )
    stubber.add_response(
        "list_durable_executions_by_function",
        {"DurableExecutions": [summary("b-g0", "STOPPED")]},
        {**expected, "Marker": "page-2"},
    )

    found = list(LambdaDurableExecutions(lambda: client, {"import_orders": ALIAS}).ended("import_orders", STARTED))

    assert [(e.name, e.status) for e in found] == [("a-g0", "TIMED_OUT"), ("b-g0", "STOPPED")]
    assert found[0].ended_at == datetime(2026, 5, 1, 13, 0, tzinfo=UTC).timestamp()


def test_how_an_execution_ended_is_read_with_its_input(lambda_client: tuple[Any, Stubber]) -> None:
    client, stubber = lambda_client
    stubber.add_response(
        "get_durable_execution",
        {
            "DurableExecutionArn": ARN,
            "DurableExecutionName": "import_orders-abc-g0",
            "FunctionArn": FUNCTION,
            "InputPayload": '{"body": "{}", "key": "import_orders:1", "generation": 0}',
            "Error": {"ErrorType": "TimeoutError", "ErrorMessage": "Execution timed out after 60 seconds."},
            "StartTimestamp": STARTED,
            "Status": "TIMED_OUT",
        },
        {"DurableExecutionArn": ARN, "IncludeExecutionData": True},
    )

    end = LambdaDurableExecutions(lambda: client, {"import_orders": ALIAS}).end_of("import_orders", ARN)

    assert (end.status, end.error_message) == ("TIMED_OUT", "Execution timed out after 60 seconds.")
    assert end.input_payload is not None and json.loads(end.input_payload)["key"] == "import_orders:1"


def test_the_runtimes_steps_are_read_from_every_page_of_the_history(lambda_client: tuple[Any, Stubber]) -> None:
    client, stubber = lambda_client
    outcome = '{"status":"FAILED","failure":{}}'
    stubber.add_response(
        "get_durable_execution_history",
        {"Events": [step_succeeded("plan", "[]"), step_succeeded("jobs.outcome", outcome)], "NextMarker": "2"},
        HISTORY,
    )
    stubber.add_response(
        "get_durable_execution_history",
        {"Events": [step_succeeded("jobs.dead_letter", "msg-1")]},
        {
            "DurableExecutionArn": ARN,
            "IncludeExecutionData": True,
            "MaxItems": 1000,
            "ReverseOrder": True,
            "Marker": "2",
        },
    )

    steps = LambdaDurableExecutions(lambda: client, {"import_orders": ALIAS}).runtime_steps("import_orders", ARN)

    assert steps == RuntimeSteps(outcome=outcome, dead_letter_id="msg-1", ended=False)


def test_an_execution_that_ended_itself_is_known_from_the_newest_page_alone(
    lambda_client: tuple[Any, Stubber],
) -> None:
    client, stubber = lambda_client
    stubber.add_response(
        "get_durable_execution_history",
        {"Events": [step_succeeded("jobs.end", None)], "NextMarker": "older"},
        HISTORY,
    )

    steps = LambdaDurableExecutions(lambda: client, {"import_orders": ALIAS}).runtime_steps("import_orders", ARN)

    assert steps.ended  # and no second page was asked for (the Stubber would refuse an unexpected call)


def test_a_result_the_history_truncated_is_not_taken_for_one(lambda_client: tuple[Any, Stubber]) -> None:
    client, stubber = lambda_client
    stubber.add_response(
        "get_durable_execution_history",
        {"Events": [step_succeeded("jobs.outcome", None, truncated=True), step_succeeded("jobs.end", None)]},
        HISTORY,
    )

    steps = LambdaDurableExecutions(lambda: client, {"import_orders": ALIAS}).runtime_steps("import_orders", ARN)

    assert steps == RuntimeSteps(outcome=None, dead_letter_id=None, ended=True, outcome_unreadable=True)


@pytest.mark.parametrize(
    ("given", "expected"),
    [(ALIAS, FUNCTION), (f"{FUNCTION}:7", FUNCTION), (FUNCTION, FUNCTION), ("SqsJobs-x-durable", "SqsJobs-x-durable")],
)
def test_a_functions_arn_is_listed_unqualified(given: str, expected: str) -> None:
    assert unqualified(given) == expected
