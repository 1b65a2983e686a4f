"""A team's own app in the stack: the unrelated catalog of tests/sample_app synthesizes with a resource of every
kind (one table another service owns, named by context), each with the least grant its kind needs, its output
and parameter, and nothing of the example app."""

from __future__ import annotations

from typing import Any

import pytest

from sqs_jobs.resources import Table
from tests.infra.cfn import of_type, permissions, props, role_id, role_statements, worker_id
from tests.infra.nag import unacknowledged_findings
from tests.infra.resource_grants import TABLE_READ, expected_grant, expected_value
from tests.sample_app.catalog import CATALOG

EXISTING_USERS = "AccountsService-Users"
SUBNETS = ("subnet-0a1b2c3d4e5f60718", "subnet-0f1e2d3c4b5a69788")
SECURITY_GROUP = "sg-0123456789abcdef0"
DATABASE_SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!db-1a2b3c4d-AbC123"
CONTEXT = {
    "users_table": EXISTING_USERS,
    "thumbnail_api": "https://thumbs.internal.example.com/v1/",
    # As cdk.json holds it: a list of the IDs.
    "accounts_network": [*SUBNETS, SECURITY_GROUP],
}


@pytest.fixture(scope="module")
def sample(cdk_context: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    from sqs_jobs.cdk.stack import build_app

    app, stack = build_app({**cdk_context, **CONTEXT}, catalog=CATALOG)
    template = app.synth().get_stack_artifact(stack.artifact_id).template
    return template, stack


def test_it_creates_what_it_declares_and_nothing_of_the_example(sample: tuple[dict[str, Any], Any]) -> None:
    template, _ = sample
    resources = template["Resources"]
    # Its created table and the idempotency table; the users table exists already and is only named.
    assert len(of_type(resources, "AWS::DynamoDB::Table")) == 2
    assert len(of_type(resources, "AWS::S3::Bucket")) == 1
    assert len(of_type(resources, "AWS::SecretsManager::Secret")) == 2
    assert len(of_type(resources, "AWS::Lambda::Function")) == len(CATALOG.queues)
    # The network is the account's: the stack makes none of it.
    assert not [key for key, value in resources.items() if value["Type"].startswith("AWS::EC2::")]
    assert not of_type(resources, "AWS::SES::EmailIdentity")
    text = str(template)
    assert not [word for word in ("orders", "invoic", "order_confirmation", "dlq_review") if word in text]


def test_the_worker_gets_each_resource_with_exactly_its_kinds_grant(sample: tuple[dict[str, Any], Any]) -> None:
    template, stack = sample
    resources = template["Resources"]
    spec = CATALOG.queue("images")
    function = worker_id(resources, spec)
    granted = permissions(role_statements(resources, role_id(resources, function)))
    settings = {"users_table": EXISTING_USERS, "thumbnail_api": "https://thumbs.internal.example.com/v1"}
    expected: set[tuple[str, str]] = set()
    variables = props(resources, function)["Environment"]["Variables"]
    for name in spec.resources:
        resource = CATALOG.resource(name)
        if name == "users_table":
            # The existing table, by the name the context gave: read only, that table only.
            assert isinstance(resource, Table)
            arn = f"arn:aws:dynamodb:${{Region}}:${{Account}}:table/{EXISTING_USERS}"
            expected |= {(action, arn) for action in TABLE_READ}
            assert variables[f"JOBS_RESOURCE_{name.upper()}"] == EXISTING_USERS
            continue
        expected |= expected_grant(resources, resource, catalog=CATALOG, stack_name=stack.stack_name, settings=settings)
        assert variables[f"JOBS_RESOURCE_{name.upper()}"] == expected_value(resources, resource, settings)

    resource_grants = {
        (action, arn) for action, arn in granted if not action.startswith(("sqs:", "logs:", "xray:"))
    } - {(action, arn) for action, arn in granted if arn.startswith("IdempotencyTable")}
    assert resource_grants == expected
    # The mail sender is declared but no job of the queue names it: no SES grant.
    assert not [action for action, _ in granted if action.startswith("ses:")]


def test_each_published_resource_has_its_output(sample: tuple[dict[str, Any], Any]) -> None:
    template, _ = sample
    outputs = template["Outputs"]
    assert outputs["UsersTableName"]["Value"] == EXISTING_USERS
    assert outputs["ThumbnailApiUrl"]["Value"] == "https://thumbs.internal.example.com/v1"
    assert outputs["ImagesSenderAddress"]["Value"] == "img@example.org"
    for name in ("ImagesTableName", "MediaBucketName", "ThumbnailApiKeyArn"):
        assert name in outputs


def test_a_bad_existing_name_fails_synth_in_one_line(cdk_context: dict[str, Any]) -> None:
    from sqs_jobs.cdk.context import ContextError
    from sqs_jobs.cdk.stack import build_app

    with pytest.raises(ContextError) as raised:
        build_app({**cdk_context, "media_bucket": "Not_A_Bucket"}, catalog=CATALOG)

    message = str(raised.value)
    assert "\n" not in message
    assert "media_bucket 'Not_A_Bucket' is not accepted for the Bucket 'media_bucket'" in message


def test_cdk_nag_finds_nothing_unacknowledged_in_it(sample: tuple[dict[str, Any], Any]) -> None:
    # The kinds' acknowledgements (a created secret without rotation, a bucket without access logs, an object
    # wildcard under a prefix) are the providers': a new app brings none of its own.
    _, stack = sample
    assert unacknowledged_findings(stack) == []


def test_with_an_existing_bucket_and_secret_the_grants_name_them_and_nag_finds_nothing_new(
    cdk_context: dict[str, Any],
) -> None:
    from sqs_jobs.cdk.stack import build_app

    existing = {
        **CONTEXT,
        "media_bucket": "media-service-uploads",
        "thumbnail_api_key": "thumbnails/api-key",
        # RDS keeps a database's credentials in a secret of its own: named by its complete ARN.
        "accounts_db": DATABASE_SECRET_ARN,
    }
    app, stack = build_app({**cdk_context, **existing}, catalog=CATALOG)
    template = app.synth().get_stack_artifact(stack.artifact_id).template
    resources = template["Resources"]
    assert not of_type(resources, "AWS::S3::Bucket") and not of_type(resources, "AWS::SecretsManager::Secret")
    function = worker_id(resources, CATALOG.queue("images"))
    granted = permissions(role_statements(resources, role_id(resources, function)))
    secret = "arn:aws:secretsmanager:${Region}:${Account}:secret:thumbnails/api-key-??????"
    assert {(action, arn) for action, arn in granted if arn.startswith(("arn:aws:s3", "arn:aws:secretsmanager"))} == {
        ("s3:GetObject", "arn:aws:s3:::media-service-uploads/thumbnails/*"),
        ("s3:PutObject", "arn:aws:s3:::media-service-uploads/thumbnails/*"),
        (
            "s3:ListBucket",
            'arn:aws:s3:::media-service-uploads if {"StringLike": {"s3:prefix": "thumbnails/*"}}',
        ),
        ("secretsmanager:GetSecretValue", secret),
    }
    assert unacknowledged_findings(stack) == []
    accounts = worker_id(resources, CATALOG.queue("accounts"))
    granted = permissions(role_statements(resources, role_id(resources, accounts)))
    assert {(action, arn) for action, arn in granted if action.startswith("secretsmanager:")} == {
        ("secretsmanager:GetSecretValue", DATABASE_SECRET_ARN)
    }


def test_the_queue_whose_job_names_a_network_runs_its_worker_there_with_only_the_interface_grants(
    sample: tuple[dict[str, Any], Any],
) -> None:
    template, stack = sample
    resources = template["Resources"]
    spec = CATALOG.queue("accounts")
    function = worker_id(resources, spec)
    assert props(resources, function)["VpcConfig"] == {
        "SubnetIds": list(SUBNETS),
        "SecurityGroupIds": [SECURITY_GROUP],
    }
    # Lambda checks the role's network grants when it creates the function: the function waits for its policy.
    role = role_id(resources, function)
    (policy,) = [
        key
        for key, value in of_type(resources, "AWS::IAM::Policy").items()
        if {"Ref": role} in value["Properties"]["Roles"]
    ]
    assert policy in resources[function]["DependsOn"]
    granted = permissions(role_statements(resources, role))
    settings = {"accounts_network": ",".join((*SUBNETS, SECURITY_GROUP))}
    expected: set[tuple[str, str]] = set()
    for name in spec.resources:
        expected |= expected_grant(
            resources, CATALOG.resource(name), catalog=CATALOG, stack_name=stack.stack_name, settings=settings
        )
    resource_grants = {
        (action, arn) for action, arn in granted if not action.startswith(("sqs:", "logs:", "xray:"))
    } - {(action, arn) for action, arn in granted if arn.startswith("IdempotencyTable")}
    assert resource_grants == expected
    # Nothing managed, nothing else on "*" than X-Ray's and EC2's Describe actions.
    assert not props(resources, role).get("ManagedPolicyArns")
    assert {action for action, arn in granted if arn == "*"} == {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSubnets",
    }
    # The other queue's worker stays out of the VPC.
    images = worker_id(resources, CATALOG.queue("images"))
    assert "VpcConfig" not in props(resources, images)
    assert not [
        action
        for action, _ in permissions(role_statements(resources, role_id(resources, images)))
        if action.startswith("ec2:")
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "context key 'accounts_network' is not set: the Network 'accounts_network' needs the subnet"),
        ("subnet-0a1b2c3d4e5f60718", "accounts_network: needs 1-16 subnet IDs and 1-5 security group IDs, not 1 and 0"),
        ("subnet-0a1b2c3d4e5f60718,vpc-0123456789abcdef0,sg-0123456789abcdef0", "'vpc-0123456789abcdef0' is neither"),
        ({"subnets": []}, "accounts_network must be a list of IDs or a comma-separated string"),
    ],
)
def test_a_network_without_its_ids_fails_synth_in_one_line(
    cdk_context: dict[str, Any], value: object, expected: str
) -> None:
    from sqs_jobs.cdk.context import ContextError
    from sqs_jobs.cdk.stack import build_app

    context = {**cdk_context, **CONTEXT, "accounts_network": value}
    with pytest.raises(ContextError) as raised:
        build_app(context, catalog=CATALOG)
    message = str(raised.value)
    assert "\n" not in message
    assert expected in message


def test_a_queue_with_a_key_concurrency_above_one_may_read_only_its_slots_in_one_batch(
    sample: tuple[dict[str, Any], Any],
) -> None:
    template, _ = sample
    resources = template["Resources"]
    batch_reads = {}
    for spec in CATALOG.queues:
        statements = role_statements(resources, role_id(resources, worker_id(resources, spec)))
        batch_reads[spec.name] = [
            statement
            for statement in statements
            if "dynamodb:BatchGetItem" in str(statement["Action"]) and "IdempotencyTable" in str(statement["Resource"])
        ]
    # make_thumbnail allows two runs per user: its worker reads a user's slots at once, and nothing else that way.
    [statement] = batch_reads["images"]
    assert statement["Action"] == "dynamodb:BatchGetItem"
    assert statement["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["flow#key#*"]}}
    assert batch_reads["accounts"] == []
