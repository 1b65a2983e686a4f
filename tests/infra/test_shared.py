"""What all queues share: tables, mail identity, alarm topic and key, layer, outputs and parameters."""

from __future__ import annotations

import inspect
import json
from importlib.metadata import version
from typing import Any

import pytest
from aws_cdk import Token
from aws_cdk.assertions import Match, Template
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

from functions.catalog import CATALOG
from sqs_jobs.cdk.jobs import IDEMPOTENCY_PARTITION_KEY, IDEMPOTENCY_TTL_ATTRIBUTE
from sqs_jobs.cdk.naming import (
    ALARM_TOPIC_ARN_OUTPUT,
    DLQ_URL,
    IDEMPOTENCY_TABLE_OUTPUT,
    QUEUE_ARN,
    QUEUE_ENDPOINT_KEYS,
    QUEUE_URL,
    SCHEDULER_ROLE_ARN,
    WORKER_ROLE_ID,
    output_key,
    parameter_name,
    pascal_case,
)
from sqs_jobs.contract import JobContract
from sqs_jobs.resources import Bucket, Resource, Table
from sqs_jobs.specs import QueueSpec
from sqs_jobs.stack_names import contract_parameter_name, resource_parameter_name
from sqs_jobs.worker import attribute_store
from sqs_jobs.worker.names import LIFE, LIFE_AT, LIFE_INDEX
from tests.infra.cfn import find_one, of_type, props, queue_id, render, role_id, worker_id
from tests.infra.conftest import Synth
from tests.infra.resource_grants import expected_value, made

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)
TABLE = "AWS::DynamoDB::Table"
BUCKET = "AWS::S3::Bucket"


def _table(synth: Synth, partition_key: str) -> dict[str, Any]:
    key = find_one(
        synth.resources,
        "AWS::DynamoDB::Table",
        lambda p: p["KeySchema"] == [{"AttributeName": partition_key, "KeyType": "HASH"}],
    )
    return dict(synth.resources[key])


def test_stack_is_environment_agnostic(synth: Synth) -> None:
    assert Token.is_unresolved(synth.stack.account)
    assert Token.is_unresolved(synth.stack.region)


def test_idempotency_table_uses_powertools_defaults(synth: Synth) -> None:
    defaults = inspect.signature(DynamoDBPersistenceLayer.__init__).parameters
    assert defaults["key_attr"].default == IDEMPOTENCY_PARTITION_KEY == "id"
    assert defaults["expiry_attr"].default == IDEMPOTENCY_TTL_ATTRIBUTE == "expiration"

    table = _table(synth, "id")["Properties"]

    assert table["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert {"AttributeName": "id", "AttributeType": "S"} in table["AttributeDefinitions"]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
    # The attribute store writes its chunks to the same table: same key, and the same TTL lets them expire.
    assert (attribute_store.KEY_ATTRIBUTE, attribute_store.EXPIRY_ATTRIBUTE) == ("id", "expiration")


def test_the_keys_in_flight_are_in_a_sparse_index_workers_read_only_the_open_batches_of(synth: Synth) -> None:
    table = _table(synth, "id")["Properties"]

    [index] = table["GlobalSecondaryIndexes"]
    assert index == {
        "IndexName": LIFE_INDEX,
        "KeySchema": [{"AttributeName": LIFE, "KeyType": "HASH"}, {"AttributeName": LIFE_AT, "KeyType": "RANGE"}],
        "Projection": {"ProjectionType": "ALL"},
    }
    assert {"AttributeName": LIFE, "AttributeType": "S"} in table["AttributeDefinitions"]
    assert {"AttributeName": LIFE_AT, "AttributeType": "N"} in table["AttributeDefinitions"]
    # No worker's policy names the index, but for one Query of the open batches' partitions (a heartbeat's count of
    # stalled batches, test_batch_workflows.py): they read and write records by key only.
    statements = [
        statement
        for resource in synth.resources.values()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]
    on_index = [statement for statement in statements if "/index/" in json.dumps(statement)]
    assert statements and on_index
    for statement in on_index:
        assert statement["Action"] == "dynamodb:Query"
        assert statement["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["batches#open#*"]}}


# The idempotency table, and every table the catalog declares.
TABLES = [None, *(spec for spec in CATALOG.resources if isinstance(spec, Table))]
BUCKETS = pytest.mark.parametrize(
    "spec", [spec for spec in CATALOG.resources if isinstance(spec, Bucket)], ids=lambda spec: spec.name
)


@pytest.mark.parametrize("spec", TABLES, ids=lambda spec: spec.name if spec else "idempotency")
def test_tables_are_on_demand_recoverable_and_encrypted(synth: Synth, spec: Table | None) -> None:
    table = _table(synth, "id") if spec is None else dict(synth.resources[made(synth.resources, spec, TABLE)])
    properties = table["Properties"]
    keys = [("id", "HASH", "S")] if spec is None else _keys(spec)

    assert properties["KeySchema"] == [{"AttributeName": name, "KeyType": role} for name, role, _ in keys]
    # The key's attributes, and the idempotency table's index's (see the test above).
    assert properties["AttributeDefinitions"][: len(keys)] == [
        {"AttributeName": name, "AttributeType": kind} for name, _, kind in keys
    ]
    assert len(properties["AttributeDefinitions"]) == len(keys) + (2 if spec is None else 0)
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    # AWS_MANAGED: encrypted with the aws/dynamodb KMS key, which is SSEEnabled without a key ID.
    assert properties["SSESpecification"] == {"SSEEnabled": True}
    expected_policy = "Retain" if synth.context.retain_data else "Delete"
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == expected_policy


def _keys(spec: Table) -> list[tuple[str, str, str]]:
    keys = [(spec.partition_key, "HASH", spec.partition_key_type.value)]
    if spec.sort_key:
        keys.append((spec.sort_key, "RANGE", spec.sort_key_type.value))
    return keys


@BUCKETS
def test_buckets_are_private_encrypted_versioned_and_kept(synth: Synth, spec: Bucket) -> None:
    bucket_id = made(synth.resources, spec, BUCKET)
    bucket = synth.resources[bucket_id]
    properties = bucket["Properties"]

    assert properties["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    }
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert properties["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    # Generated name (S3 names are global); kept whatever retain_data says (lib/sqs_jobs/cdk/job_bucket.py says why).
    assert "BucketName" not in properties
    assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"
    # No auto-delete custom resource, whose Lambda could empty the bucket (the only functions are the workers:
    # test_workers.py::test_one_worker_per_catalog_queue).
    assert not [key for key, value in synth.resources.items() if value["Type"].startswith("Custom::")]


@BUCKETS
def test_bucket_policies_deny_anything_but_tls_1_2(synth: Synth, spec: Bucket) -> None:
    bucket_id = made(synth.resources, spec, BUCKET)
    (policy,) = [
        key
        for key in of_type(synth.resources, "AWS::S3::BucketPolicy")
        if props(synth.resources, key)["Bucket"] == {"Ref": bucket_id}
    ]
    statements = props(synth.resources, policy)["PolicyDocument"]["Statement"]

    assert props(synth.resources, policy)["Bucket"] == {"Ref": bucket_id}
    assert {statement["Effect"] for statement in statements} == {"Deny"}
    conditions = [statement["Condition"] for statement in statements]
    assert conditions == [{"Bool": {"aws:SecureTransport": "false"}}, {"NumericLessThan": {"s3:TlsVersion": 1.2}}]
    for statement in statements:
        assert (statement["Action"], statement["Principal"]) == ("s3:*", {"AWS": "*"})
        assert [render(resource) for resource in statement["Resource"]] == [f"{bucket_id}.Arn", f"{bucket_id}.Arn/*"]


def test_by_default_the_stack_creates_no_ses_identity(template: Template, synth: Synth) -> None:
    # An identity that already exists in the account would fail the whole deploy: creating it is opt-in.
    assert synth.context.create_mail_identity is False
    template.resource_count_is("AWS::SES::EmailIdentity", 0)


def test_alarm_topic_key_rotates_and_cloudwatch_may_use_it(template: Template, synth: Synth) -> None:
    (key,) = of_type(synth.resources, "AWS::KMS::Key")
    (topic,) = of_type(synth.resources, "AWS::SNS::Topic")

    assert props(synth.resources, topic)["KmsMasterKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    assert props(synth.resources, key)["EnableKeyRotation"] is True
    template.has_resource_properties(
        "AWS::KMS::Key",
        {
            "KeyPolicy": {
                "Statement": Match.array_with(
                    [
                        {
                            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                            "Effect": "Allow",
                            "Principal": {"Service": "cloudwatch.amazonaws.com"},
                            "Resource": "*",
                            "Sid": Match.any_value(),
                        }
                    ]
                )
            }
        },
    )


def test_alarm_topic_is_tls_only_and_only_this_stacks_alarms_publish(synth: Synth) -> None:
    (topic,) = of_type(synth.resources, "AWS::SNS::Topic")
    (policy,) = of_type(synth.resources, "AWS::SNS::TopicPolicy")
    statements = {s["Effect"]: s for s in props(synth.resources, policy)["PolicyDocument"]["Statement"]}

    assert props(synth.resources, policy)["Topics"] == [{"Ref": topic}]
    deny = statements["Deny"]
    assert (deny["Condition"], deny["Principal"], deny["Resource"]) == (
        {"Bool": {"aws:SecureTransport": "false"}},
        "*",
        {"Ref": topic},
    )
    allow = statements["Allow"]
    assert (allow["Action"], allow["Principal"]) == ("sns:Publish", {"Service": "cloudwatch.amazonaws.com"})
    assert render(allow["Condition"]["StringEquals"]["aws:SourceAccount"]) == "${Account}"
    assert render(allow["Condition"]["ArnLike"]["aws:SourceArn"]) == (
        f"arn:aws:cloudwatch:${{Region}}:${{Account}}:alarm:{synth.context.stack_name}-*"
    )


def test_alarm_email_subscription_follows_the_context(template: Template, synth: Synth) -> None:
    if synth.context.alarm_email:
        template.has_resource_properties(
            "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": synth.context.alarm_email}
        )
    else:
        template.resource_count_is("AWS::SNS::Subscription", 0)


def test_dependencies_layer_matches_the_workers_and_the_tested_powertools(synth: Synth) -> None:
    (layer,) = of_type(synth.resources, "AWS::Lambda::LayerVersion")
    properties = props(synth.resources, layer)

    assert properties["CompatibleRuntimes"] == ["python3.13"]
    assert properties["CompatibleArchitectures"] == ["arm64"]
    # The layer vendors uv.lock's versions: the same Powertools these tests import.
    assert f"aws-lambda-powertools=={version('aws-lambda-powertools')}" in properties["Description"].split()


@QUEUES
def test_queue_outputs_and_parameters_for_publishers(synth: Synth, spec: QueueSpec) -> None:
    stack_name = synth.context.stack_name
    queue = queue_id(synth.resources, stack_name, spec)
    dlq = queue_id(synth.resources, stack_name, spec, dlq=True)
    worker_role = role_id(synth.resources, worker_id(synth.resources, spec))
    scheduler_role_child = synth.stack.queues[spec.name].scheduler_role.node.default_child
    scheduler_role = synth.stack.resolve(synth.stack.get_logical_id(scheduler_role_child))  # type: ignore[arg-type]
    assert synth.resources[scheduler_role]["Type"] == "AWS::IAM::Role"
    expected = {
        QUEUE_URL: {"Ref": queue},
        DLQ_URL: {"Ref": dlq},
        QUEUE_ARN: {"Fn::GetAtt": [queue, "Arn"]},
        # The worker role's unique ID: jobctl trusts evidence only on messages that role sent.
        WORKER_ROLE_ID: {"Fn::GetAtt": [worker_role, "RoleId"]},
        # The role EventBridge Scheduler sends the queue's scheduled and delayed jobs with (test_schedules.py).
        SCHEDULER_ROLE_ARN: {"Fn::GetAtt": [scheduler_role, "Arn"]},
    }
    assert set(expected) == set(QUEUE_ENDPOINT_KEYS)

    parameters = {
        props(synth.resources, key)["Name"]: props(synth.resources, key)
        for key in of_type(synth.resources, "AWS::SSM::Parameter")
    }
    for key, value in expected.items():
        assert synth.outputs[output_key(spec.name, key)]["Value"] == value
        parameter = parameters[parameter_name(stack_name, spec.name, key)]
        assert (parameter["Type"], parameter["Value"]) == ("String", value)


def test_parameter_names_follow_the_documented_pattern(synth: Synth) -> None:
    names = {props(synth.resources, key)["Name"] for key in of_type(synth.resources, "AWS::SSM::Parameter")}
    stack_name = synth.context.stack_name
    keys = ("url", "dlq-url", "arn", "worker-role-id", "scheduler-role-arn")
    schedules = {f"/{stack_name}/schedules/{key}" for key in ("group", "dlq-arn", "dlq-url")}
    resources = {f"/{stack_name}/resources/{spec.name}" for spec in CATALOG.resources if _published(spec)}
    queues = {f"/{stack_name}/queues/{spec.name}/{key}" for spec in CATALOG for key in keys}
    tables = {f"/{stack_name}/batches/table", f"/{stack_name}/results/table"}
    assert names == queues | schedules | resources | tables | {f"/{stack_name}/contract"}


def test_the_job_contract_parameter_holds_the_catalogs_contract(synth: Synth) -> None:
    [contract] = [
        props(synth.resources, key)
        for key in of_type(synth.resources, "AWS::SSM::Parameter")
        if props(synth.resources, key)["Name"] == contract_parameter_name(synth.context.stack_name)
    ]
    assert JobContract.from_json(contract["Value"]) == JobContract.from_catalog(CATALOG)
    assert contract["Tier"] == "Standard"


def _published(spec: Resource) -> bool:
    return spec.published


@pytest.mark.parametrize("spec", [spec for spec in CATALOG.resources if _published(spec)], ids=lambda spec: spec.name)
def test_each_resource_has_an_output_and_a_parameter_holding_its_value(synth: Synth, spec: Resource) -> None:
    value = expected_value(synth.resources, spec, synth.context.resource_settings)
    [output] = [key for key in synth.outputs if key.startswith(pascal_case(spec.name))]
    parameters = {
        props(synth.resources, key)["Name"]: props(synth.resources, key)
        for key in of_type(synth.resources, "AWS::SSM::Parameter")
    }
    parameter = parameters[resource_parameter_name(synth.context.stack_name, spec.name)]

    assert synth.outputs[output]["Value"] == value
    assert synth.outputs[output]["Description"] == spec.description
    assert (parameter["Type"], parameter["Value"]) == ("String", value)


def test_shared_outputs(synth: Synth) -> None:
    (topic,) = of_type(synth.resources, "AWS::SNS::Topic")
    idempotency = find_one(
        synth.resources, "AWS::DynamoDB::Table", lambda p: p["KeySchema"][0]["AttributeName"] == "id"
    )

    assert synth.outputs[ALARM_TOPIC_ARN_OUTPUT]["Value"] == {"Ref": topic}
    assert synth.outputs[IDEMPOTENCY_TABLE_OUTPUT]["Value"] == {"Ref": idempotency}
    # ...DashboardName (test_dashboard.py), each queue's and each published resource's.
    published = [spec for spec in CATALOG.resources if _published(spec)]
    assert len(synth.outputs) == 3 + len(QUEUE_ENDPOINT_KEYS) * len(CATALOG.queues) + len(published)
