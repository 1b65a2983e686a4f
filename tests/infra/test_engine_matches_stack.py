"""The local engine (`sqs_jobs.local.provision`, on moto) creates what the synthesized stack creates.

Both read the catalog; this proves they turn it into the same names and settings, so what works on the local
engine meets the same queues, redrive policy, tables and parameters once deployed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.catalog import CATALOG
from sqs_jobs.local.provision import LocalDeployment, dlq_attributes, provision
from sqs_jobs.local.resource_providers import UNUSED_ENDPOINT_URL
from sqs_jobs.local.scheduler import provision_schedules
from sqs_jobs.resources import Bucket, Endpoint, MailSender, Table
from sqs_jobs.specs import QueueSpec
from sqs_jobs.stack_names import DEFAULT_STACK_NAME, resource_parameter_name, schedule_group_name
from tests.infra.cfn import of_type, props, queue_id, worker_id
from tests.infra.conftest import Synth
from tests.infra.resource_grants import made

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)


def _client(service: str) -> Any:
    return boto3.client(service, region_name="us-east-1")  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def local(synth: Synth) -> Iterator[LocalDeployment]:
    # moto stays active for this module's tests only.
    with mock_aws():
        deployment = provision(
            _client, stack_name=synth.context.stack_name, settings=synth.context.resource_settings, catalog=CATALOG
        )
        # The engine provisions the scheduler's part beside the rest (lib/sqs_jobs/local/scheduler.py).
        provision_schedules(_client, deployment, catalog=CATALOG)
        yield deployment


def _queue_attributes(url: str) -> dict[str, str]:
    response = _client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    attributes: dict[str, str] = response["Attributes"]
    return attributes


def test_engine_defaults_are_cdk_json_defaults(synth: Synth) -> None:
    assert synth.context.stack_name == DEFAULT_STACK_NAME


@QUEUES
def test_source_queue_matches(synth: Synth, local: LocalDeployment, spec: QueueSpec) -> None:
    stack = props(synth.resources, queue_id(synth.resources, synth.context.stack_name, spec))
    engine = _queue_attributes(local.queues[spec.name].url)

    assert local.queues[spec.name].arn.endswith(":" + stack["QueueName"])
    assert int(engine["VisibilityTimeout"]) == stack["VisibilityTimeout"]
    assert int(engine["MessageRetentionPeriod"]) == stack["MessageRetentionPeriod"]
    assert int(engine["MaximumMessageSize"]) == stack["MaximumMessageSize"] == spec.max_message_bytes
    redrive = json.loads(engine["RedrivePolicy"])
    assert int(redrive["maxReceiveCount"]) == stack["RedrivePolicy"]["maxReceiveCount"]
    assert redrive["deadLetterTargetArn"] == local.queues[spec.name].dlq_arn


@QUEUES
def test_dead_letter_queue_matches(synth: Synth, local: LocalDeployment, spec: QueueSpec) -> None:
    stack = props(synth.resources, queue_id(synth.resources, synth.context.stack_name, spec, dlq=True))
    engine = _queue_attributes(local.queues[spec.name].dlq_url)

    assert local.queues[spec.name].dlq_arn.endswith(":" + stack["QueueName"])
    assert int(engine["MessageRetentionPeriod"]) == stack["MessageRetentionPeriod"]
    assert int(engine["MaximumMessageSize"]) == stack["MaximumMessageSize"] == spec.dlq_max_message_bytes
    # moto doesn't return RedriveAllowPolicy; compare what the engine sets.
    source_arn = local.queues[spec.name].arn
    allow = json.loads(dlq_attributes(spec, source_arn)["RedriveAllowPolicy"])
    assert allow == {"redrivePermission": "byQueue", "sourceQueueArns": [source_arn]}
    assert stack["RedriveAllowPolicy"]["redrivePermission"] == allow["redrivePermission"]


def test_ssm_parameters_match(synth: Synth, local: LocalDeployment) -> None:
    stack = {props(synth.resources, key)["Name"] for key in of_type(synth.resources, "AWS::SSM::Parameter")}
    pages = _client("ssm").get_paginator("get_parameters_by_path").paginate(Path="/", Recursive=True)
    engine = {parameter["Name"] for page in pages for parameter in page["Parameters"]}

    assert engine == stack


@pytest.mark.parametrize("partition_key", ["id", "order_id", "invoice_id"])
def test_tables_have_the_same_keys_and_ttl(synth: Synth, local: LocalDeployment, partition_key: str) -> None:
    # Every stack table of that key (the orders and the imported orders tables share theirs) against the engine's.
    stacks = [
        props(synth.resources, key)
        for key, resource in of_type(synth.resources, "AWS::DynamoDB::Table").items()
        if resource["Properties"]["KeySchema"][0]["AttributeName"] == partition_key
    ]
    assert stacks
    names = {"id": local.idempotency_table, "order_id": local.resources["orders_table"]}
    name = names.get(partition_key) or local.resources["invoices_table"]
    dynamodb = _client("dynamodb")

    table = dynamodb.describe_table(TableName=name)["Table"]
    ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]

    for stack in stacks:
        assert table["KeySchema"] == stack["KeySchema"]
        assert table["AttributeDefinitions"] == stack["AttributeDefinitions"]
        if "TimeToLiveSpecification" in stack:
            assert ttl.get("AttributeName") == stack["TimeToLiveSpecification"]["AttributeName"]
        else:
            assert "AttributeName" not in ttl


def test_mail_sender_identity_matches(synth: Synth, local: LocalDeployment) -> None:
    # The stack hands the worker its sender (and creates the identity only on request); the engine verifies it.
    mailing = [spec for spec in CATALOG if "mail_sender" in spec.resources]
    assert mailing
    for spec in mailing:
        function = props(synth.resources, worker_id(synth.resources, spec))
        assert local.resources["mail_sender"] == function["Environment"]["Variables"]["JOBS_RESOURCE_MAIL_SENDER"]
    assert local.resources["mail_sender"] in _client("ses").list_identities()["Identities"]


@pytest.mark.parametrize(
    "spec", [spec for spec in CATALOG.resources if isinstance(spec, Bucket)], ids=lambda spec: spec.name
)
def test_buckets_have_the_same_settings(synth: Synth, local: LocalDeployment, spec: Bucket) -> None:
    stack = props(synth.resources, made(synth.resources, spec, "AWS::S3::Bucket"))
    s3 = _client("s3")
    name = local.resources[spec.name]

    encryption = s3.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]["Rules"]
    assert [rule["ApplyServerSideEncryptionByDefault"] for rule in encryption] == [
        rule["ServerSideEncryptionByDefault"] for rule in stack["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    ]
    assert s3.get_bucket_versioning(Bucket=name)["Status"] == stack["VersioningConfiguration"]["Status"]
    public = s3.get_public_access_block(Bucket=name)["PublicAccessBlockConfiguration"]
    assert public == stack["PublicAccessBlockConfiguration"]


@pytest.mark.parametrize(
    "spec", [spec for spec in CATALOG.resources if isinstance(spec, Table)], ids=lambda spec: spec.name
)
def test_tables_have_the_same_keys(synth: Synth, local: LocalDeployment, spec: Table) -> None:
    stack = props(synth.resources, made(synth.resources, spec, "AWS::DynamoDB::Table"))
    table = _client("dynamodb").describe_table(TableName=local.resources[spec.name])["Table"]

    assert table["KeySchema"] == stack["KeySchema"]
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(stack["AttributeDefinitions"], key=str)
    assert table["BillingModeSummary"]["BillingMode"] == stack["BillingMode"]


def test_every_declared_resource_is_provisioned_with_its_parameter(synth: Synth, local: LocalDeployment) -> None:
    assert set(local.resources) == set(CATALOG.resource_names)
    for spec in CATALOG.resources:
        if isinstance(spec, Endpoint):
            # The URL the caller sets (here the context's), else a placeholder that refuses connections, so a job
            # that calls it fails transiently.
            assert local.resources[spec.name] == synth.context.resource_settings.get(spec.name, UNUSED_ENDPOINT_URL)
        if isinstance(spec, MailSender):
            assert local.resources[spec.name] == synth.context.resource_settings.get(spec.name, spec.default_address)
        if spec.published:
            parameter = _client("ssm").get_parameter(Name=resource_parameter_name(local.stack_name, spec.name))
            assert parameter["Parameter"]["Value"] == local.resources[spec.name]


def test_recurring_schedules_match(synth: Synth, local: LocalDeployment) -> None:
    def shape(expression: str, timezone: str, target: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
        retry = target["RetryPolicy"]
        return (expression, timezone, target["Input"], dict(retry))

    stack = {}
    for key in of_type(synth.resources, "AWS::Scheduler::Schedule"):
        schedule = props(synth.resources, key)
        if schedule.get("GroupName") != schedule_group_name(local.stack_name):
            continue  # the heartbeat canary's schedules are the engine's HeartbeatCanary, compared elsewhere
        stack[schedule["Name"]] = shape(
            schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"], schedule["Target"]
        )
    api = _client("scheduler")
    group = schedule_group_name(local.stack_name)
    engine = {}
    for item in api.list_schedules(GroupName=group)["Schedules"]:
        schedule = api.get_schedule(Name=item["Name"], GroupName=group)
        engine[schedule["Name"]] = shape(
            schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"], schedule["Target"]
        )
    assert stack and engine == stack
