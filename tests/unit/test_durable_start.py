"""The worker's start of a durable execution, against botocore's Lambda model (Stubber validates every request
against the API's shapes: DurableExecutionName's pattern and length, InvocationType's values). moto has no durable
functions; the documented rules are tested here: an asynchronous Invoke of a qualified ARN, named; a name already
started with another payload (DurableExecutionAlreadyStartedException, 409) is a no-op."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from sqs_jobs.durable import execution_name
from sqs_jobs.worker.durable_start import LambdaDurableStarter

ALIAS_ARN = "arn:aws:lambda:us-east-1:123456789012:function:SqsJobs-import_orders-durable:live"
EXECUTION_ARN = ALIAS_ARN.replace(":live", ":3") + "/durable-execution/n/abc"


def stubbed() -> tuple[LambdaDurableStarter, Stubber]:
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return LambdaDurableStarter(lambda: client, {"import_orders": ALIAS_ARN}), Stubber(client)


def test_the_start_is_an_asynchronous_invoke_of_the_alias_named_from_the_key() -> None:
    starter, stub = stubbed()
    name = execution_name("import_orders:2026-12-01", 0)
    stub.add_response(
        "invoke",
        {"StatusCode": 202, "DurableExecutionArn": EXECUTION_ARN},
        {"FunctionName": ALIAS_ARN, "InvocationType": "Event", "DurableExecutionName": name, "Payload": b"{}"},
    )
    with stub:
        assert starter.start("import_orders", name, "{}") == EXECUTION_ARN
    stub.assert_no_pending_responses()


def test_a_name_started_with_another_payload_is_a_no_op_and_other_errors_are_raised() -> None:
    starter, stub = stubbed()
    name = execution_name("import_orders:a", 0)
    stub.add_client_error("invoke", "DurableExecutionAlreadyStartedException", http_status_code=409)
    stub.add_client_error("invoke", "TooManyRequestsException", http_status_code=429)
    with stub:
        assert starter.start("import_orders", name, "{}") is None
        with pytest.raises(ClientError):
            starter.start("import_orders", name, "{}")
