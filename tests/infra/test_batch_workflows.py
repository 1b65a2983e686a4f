"""Batches in the stack: the parameter publishers find the batch table by, the publishers' grant to define batches
(its `batch#` items only), and each worker's routes to the queues of the jobs its jobs publish (and no others); and
beside them in the same table, a service's grant to read its jobs' results (key records, result attributes only).
One extra synth of a small two-queue catalog, built as app.py builds it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.cdk.job_results import NotDurableJobsError
from sqs_jobs.cdk.stack import JobsStack, build_app
from sqs_jobs.durable import Durable
from sqs_jobs.events import EVENT_ATTRIBUTES
from sqs_jobs.results import RESULT_ATTRIBUTES
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.stack_names import batches_parameter_name, results_parameter_name
from sqs_jobs.worker.settings import ENV_ROUTES
from tests.infra.cfn import of_type, props

HANDLER = "functions.jobs.order_confirmation"  # never imported at synth
CATALOG = Catalog(
    resources=APP_RESOURCES,
    queues=(
        QueueSpec(name="rows", jobs=(JobSpec(name="import_row", handler=HANDLER, publishes=("import_done",)),)),
        QueueSpec(name="finish", jobs=(JobSpec(name="import_done", handler=HANDLER),)),
        QueueSpec(
            name="other",
            jobs=(
                JobSpec(name="unrelated", handler=HANDLER),
                JobSpec(name="approve", handler=HANDLER, durable=Durable()),
                JobSpec(name="approve_too", handler=HANDLER, durable=Durable()),
            ),
        ),
    ),
)


@pytest.fixture(scope="module")
def built(cdk_context: dict[str, Any]) -> tuple[JobsStack, dict[str, Any]]:
    _, stack = build_app(cdk_context, catalog=CATALOG)
    publisher = iam.Role(stack, "TestPublisher", assumed_by=iam.AccountRootPrincipal())
    stack.batches.grant_define(publisher)
    reader = iam.Role(stack, "TestResultsReader", assumed_by=iam.AccountRootPrincipal())
    stack.grant_read_results(reader)
    sender = iam.Role(stack, "TestEventSender", assumed_by=iam.AccountRootPrincipal())
    stack.grant_send_events(sender, ["approve"])
    return stack, Template.from_stack(stack).to_json()["Resources"]


def _logical_id(stack: JobsStack, construct: Any) -> str:
    return str(stack.resolve(construct.node.default_child.logical_id))


def _statements_of(resources: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for key in of_type(resources, "AWS::IAM::Policy")
        if {"Ref": role_id} in props(resources, key)["Roles"]
        for statement in props(resources, key)["PolicyDocument"]["Statement"]
    ]


def _sends_to(statements: list[dict[str, Any]], queue_id: str) -> bool:
    target = {"Fn::GetAtt": [queue_id, "Arn"]}
    return any(
        "sqs:SendMessage" in statement["Action"]
        and target in (statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]])
        for statement in statements
    )


def test_a_worker_may_send_to_the_queues_of_the_jobs_its_jobs_publish_and_no_others(
    built: tuple[JobsStack, dict[str, Any]],
) -> None:
    stack, resources = built
    rows, finish, other = (stack.queues[name] for name in ("rows", "finish", "other"))
    rows_role = _logical_id(stack, rows.role)
    statements = _statements_of(resources, rows_role)
    assert _sends_to(statements, _logical_id(stack, finish.queue))
    assert not _sends_to(statements, _logical_id(stack, other.queue))
    assert not _sends_to(_statements_of(resources, _logical_id(stack, finish.role)), _logical_id(stack, rows.queue))
    environment = props(resources, _logical_id(stack, rows.function))["Environment"]["Variables"]
    # {"import_done": ["finish", <its URL>]}: the URL is the queue's Ref, joined into the JSON at deploy.
    routes = json.dumps(environment[ENV_ROUTES])
    assert '{\\"import_done\\":[\\"finish\\",\\"' in routes
    assert json.dumps({"Ref": _logical_id(stack, finish.queue)}) in routes
    assert json.dumps({"Ref": _logical_id(stack, other.queue)}) not in routes
    assert "unrelated" not in routes and "import_row" not in routes
    assert ENV_ROUTES not in props(resources, _logical_id(stack, finish.function))["Environment"]["Variables"]


def test_publishers_find_the_batch_table_and_may_write_its_batch_items_only(
    built: tuple[JobsStack, dict[str, Any]],
) -> None:
    stack, resources = built
    [parameter] = [
        props(resources, key)
        for key in of_type(resources, "AWS::SSM::Parameter")
        if props(resources, key)["Name"] == batches_parameter_name(stack.stack_name)
    ]
    assert parameter["Value"] == {"Ref": _logical_id(stack, stack.idempotency_table)}
    publisher = next(key for key in of_type(resources, "AWS::IAM::Role") if key.startswith("TestPublisher"))
    statements = _statements_of(resources, publisher)
    [writing] = [statement for statement in statements if "dynamodb" in json.dumps(statement["Action"])]
    assert writing["Action"] == "dynamodb:PutItem"
    assert writing["Resource"] == {"Fn::GetAtt": [_logical_id(stack, stack.idempotency_table), "Arn"]}
    assert writing["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["batch#*"]}}
    # The parameter's ARN as IAM matches it: its name once, not a token that resolves to "/<name>" after "parameter/".
    [ssm] = [statement for statement in statements if statement["Action"] == "ssm:GetParameters"]
    assert f":parameter{batches_parameter_name(stack.stack_name)}" in json.dumps(ssm["Resource"])
    assert all("*" != statement["Resource"] for statement in statements)


def test_each_worker_may_count_the_open_batches_only_and_one_alarm_pages_on_a_stalled_one(
    built: tuple[JobsStack, dict[str, Any]],
) -> None:
    stack, resources = built
    table = _logical_id(stack, stack.idempotency_table)
    for job_queue in stack.queues.values():
        [query] = [
            statement
            for statement in _statements_of(resources, _logical_id(stack, job_queue.role))
            if statement["Action"] == "dynamodb:Query"
        ]
        assert query["Resource"] == {"Fn::Join": ["", [{"Fn::GetAtt": [table, "Arn"]}, "/index/jobs-by-life"]]}
        assert query["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["batches#open#*"]}}
    [alarm] = [
        props(resources, key)
        for key in of_type(resources, "AWS::CloudWatch::Alarm")
        if props(resources, key)["AlarmName"] == f"{stack.stack_name}-batches-stalled"
    ]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"
    [expression] = [metric for metric in alarm["Metrics"] if "Expression" in metric]
    watched = [metric["MetricStat"]["Metric"] for metric in alarm["Metrics"] if "MetricStat" in metric]
    assert expression["Expression"] == f"MAX([{', '.join(f'stalled{n}' for n in range(len(watched)))}])"
    assert sorted(dims["Value"] for metric in watched for dims in metric["Dimensions"] if dims["Name"] == "queue") == (
        sorted(stack.queues)
    )
    assert all(metric["MetricName"] == "StalledBatches" for metric in watched)
    assert "a-batch-does-not-complete" in alarm["AlarmDescription"]


def test_a_service_finds_the_results_table_and_may_read_only_a_results_attributes_of_key_records(
    built: tuple[JobsStack, dict[str, Any]],
) -> None:
    stack, resources = built
    table = _logical_id(stack, stack.idempotency_table)
    [parameter] = [
        props(resources, key)
        for key in of_type(resources, "AWS::SSM::Parameter")
        if props(resources, key)["Name"] == results_parameter_name(stack.stack_name)
    ]
    assert parameter["Value"] == {"Ref": table}
    reader = next(key for key in of_type(resources, "AWS::IAM::Role") if key.startswith("TestResultsReader"))
    statements = _statements_of(resources, reader)
    [reading] = [statement for statement in statements if "dynamodb" in json.dumps(statement["Action"])]
    assert reading["Action"] == "dynamodb:GetItem"
    assert reading["Resource"] == {"Fn::GetAtt": [table, "Arn"]}
    # AWS's own example of attribute-level access (IAM User Guide, "Allows access to specific attributes"), on
    # key records only: never a traceback, a dead letter's body or who ran it.
    assert reading["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["jobs#*", "durable#*"]},
        "ForAllValues:StringEquals": {"dynamodb:Attributes": list(RESULT_ATTRIBUTES)},
        "StringEqualsIfExists": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
    }
    assert not {"last_traceback", "ending_body", "run_by"} & set(RESULT_ATTRIBUTES)
    [ssm] = [statement for statement in statements if statement["Action"] == "ssm:GetParameters"]
    assert f":parameter{results_parameter_name(stack.stack_name)}" in json.dumps(ssm["Resource"])
    assert all("*" != statement["Resource"] for statement in statements)


def test_an_event_sender_may_read_only_whether_its_durable_jobs_wait_and_complete_only_their_waits(
    built: tuple[JobsStack, dict[str, Any]],
) -> None:
    stack, resources = built
    table = _logical_id(stack, stack.idempotency_table)
    sender = next(key for key in of_type(resources, "AWS::IAM::Role") if key.startswith("TestEventSender"))
    statements = _statements_of(resources, sender)
    [reading] = [statement for statement in statements if "dynamodb" in json.dumps(statement["Action"])]
    assert reading["Action"] == "dynamodb:GetItem"
    assert reading["Resource"] == {"Fn::GetAtt": [table, "Arn"]}
    # Durable records only (their IDs hash the key, so not one job's), and of them only whether and for what they
    # wait; completing a wait is the granted job's alone (below).
    assert reading["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["durable#*"]},
        "ForAllValues:StringEquals": {"dynamodb:Attributes": list(EVENT_ATTRIBUTES)},
        "StringEqualsIfExists": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
    }
    [sending] = [statement for statement in statements if "lambda:" in json.dumps(statement["Action"])]
    assert sending["Action"] == "lambda:SendDurableExecutionCallbackSuccess"
    approve = _logical_id(stack, stack.durable_functions["approve"].function)
    other = _logical_id(stack, stack.durable_functions["approve_too"].function)
    assert sending["Resource"] == {"Fn::Join": ["", [{"Fn::GetAtt": [approve, "Arn"]}, ":*"]]}
    assert other not in json.dumps(statements)
    [ssm] = [statement for statement in statements if statement["Action"] == "ssm:GetParameters"]
    assert f":parameter{results_parameter_name(stack.stack_name)}" in json.dumps(ssm["Resource"])
    assert all("*" != statement["Resource"] for statement in statements)


def test_a_grant_to_send_events_to_a_job_that_waits_for_none_is_refused_at_synth(
    built: tuple[JobsStack, dict[str, Any]],
) -> None:
    stack, _ = built
    role = iam.Role(stack, "TestRefusedSender", assumed_by=iam.AccountRootPrincipal())
    with pytest.raises(
        NotDurableJobsError,
        match=re.escape("unrelated is not a durable job of this stack (its durable jobs: approve, approve_too)"),
    ):
        stack.grant_send_events(role, ["unrelated"])
