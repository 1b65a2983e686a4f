"""Construct behaviour the default stack doesn't show: each built in a small stack of its own (fast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from functions.catalog import CATALOG
from sqs_jobs.cdk.alarm_topic import AlarmTopic, NewAlarmTopic
from sqs_jobs.cdk.context import ContextError
from sqs_jobs.cdk.dependencies_layer import DependenciesLayer, LayerMissingError
from sqs_jobs.cdk.job_queue import JobQueue
from sqs_jobs.cdk.job_resources import JobResources, UnsupportedResourceError
from sqs_jobs.cdk.job_schedules import JobSchedules
from sqs_jobs.cdk.naming import pascal_case
from sqs_jobs.cdk.secure_table import SecureTable
from sqs_jobs.cdk.stack import build_app
from sqs_jobs.resources import Resource, Secret, SecretStore
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from tests.infra.cfn import of_type, permissions, render, role_statements
from tests.infra.conftest import REPO_ROOT

API_URL = "https://invoicing.example.com"


def _stack() -> Stack:
    return Stack(App(), "Test")


def _resources(stack: Stack, *, retain: bool = False, catalog: Catalog = CATALOG, **settings: Any) -> JobResources:
    """JobResources as the stack builds it, with a topic of its own (and its key) for the runtime's alarm_topic."""
    topic = AlarmTopic(stack, "Alarms", new=NewAlarmTopic(alarm_name_prefix="Test-", email=None, retain=False))
    return JobResources(
        stack,
        "Resources",
        catalog=catalog,
        settings={},
        retain=retain,
        stack_name="Test",
        alarm_topic=topic.topic,
        alarm_topic_key=topic.key,
        **settings,
    )


@pytest.mark.parametrize(("retain", "policy"), [(True, "Retain"), (False, "Delete")])
def test_retain_data_decides_whether_a_table_outlives_the_stack(retain: bool, policy: str) -> None:
    stack = _stack()
    SecureTable(stack, "Table", partition_key="id", retain=retain)

    (table,) = Template.from_stack(stack).find_resources("AWS::DynamoDB::Table").values()

    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == policy


@pytest.mark.parametrize("retain", [True, False])
def test_the_invoices_bucket_outlives_the_stack_whatever_retain_data_says(retain: bool) -> None:
    stack = _stack()
    _resources(stack, retain=retain)
    template = Template.from_stack(stack)

    buckets = template.find_resources("AWS::S3::Bucket").values()

    # Every created bucket (the invoices' and the imports'): a versioned bucket is never empty once used.
    assert buckets
    for bucket in buckets:
        assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"
    # ...while the invoices table follows retain_data like every table.
    tables = template.find_resources("AWS::DynamoDB::Table").values()
    assert {table["DeletionPolicy"] for table in tables} == {"Retain" if retain else "Delete"}


def test_the_mail_identity_is_created_only_when_asked() -> None:
    stack = _stack()
    _resources(stack, create_mail_identity=True)

    Template.from_stack(stack).has_resource_properties("AWS::SES::EmailIdentity", {"EmailIdentity": "jobs@example.com"})


def test_in_the_ses_sandbox_the_grant_names_the_verified_recipients_too() -> None:
    # There SES authorizes SendEmail against each recipient's identity as well as the sender's.
    stack = _stack()
    role = iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    resources = _resources(stack, mail_sandbox_recipients=("qa@example.org", "example.net"))
    resources.provided["mail_sender"].grant(role)
    template = Template.from_stack(stack)

    [policy] = template.find_resources("AWS::IAM::Policy").values()
    [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
    named = {json.dumps(resource).split("identity/")[1].rstrip('"]}') for resource in statement["Resource"]}
    assert named == {"jobs@example.com", "example.com", "qa@example.org", "example.net"}
    # SendEmail only (nothing sends raw mail), and only from the sender's address.
    assert statement["Action"] == "ses:SendEmail"
    assert statement["Condition"] == {"StringEquals": {"ses:FromAddress": "jobs@example.com"}}


def test_alarm_email_gets_an_email_subscription() -> None:
    stack = _stack()
    AlarmTopic(stack, "Alarms", new=NewAlarmTopic(alarm_name_prefix="Test-", email="ops@example.com", retain=False))

    Template.from_stack(stack).has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )


def test_a_missing_layer_says_to_run_jobctl_bundle(tmp_path: Path) -> None:
    with pytest.raises(LayerMissingError) as raised:
        DependenciesLayer(_stack(), "Deps", directory=tmp_path / "layer", display_name="build/layer")

    assert str(raised.value) == "build/layer is missing: run `jobctl bundle` (make bundle runs it)"


def test_a_catalog_reference_that_cant_be_loaded_fails_synth_in_one_line(cdk_context: dict[str, Any]) -> None:
    with pytest.raises(ContextError) as raised:
        build_app({**cdk_context, "catalog": "no_such_package.catalog:CATALOG"})

    message = str(raised.value)
    assert message.startswith("-c catalog: catalog reference 'no_such_package.catalog:CATALOG': module")
    assert "accepted: 'package.module:NAME'" in message and "\n" not in message


def test_a_projects_pyproject_names_the_catalog_the_app_builds(
    cdk_context: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.sqs-jobs]\ncatalog = "no_such_package.catalog:CATALOG"\n')
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ContextError) as raised:
        build_app(cdk_context)

    assert str(raised.value).startswith("[tool.sqs-jobs] catalog in pyproject.toml: catalog reference")


def test_build_app_checks_the_layer_first(cdk_context: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(LayerMissingError, match="is missing: run `jobctl bundle`"):
        build_app(cdk_context, layer_dir=tmp_path / "layer")


@dataclass(frozen=True, kw_only=True)
class Queue(Resource):
    """A kind of resource no provider knows."""


def test_a_resource_of_a_kind_the_stack_has_no_provider_for_fails_synth_in_one_line() -> None:
    catalog = replace(CATALOG, resources=(*CATALOG.resources, Queue(name="payments_queue", description="a queue")))

    with pytest.raises(UnsupportedResourceError) as raised:
        _resources(_stack(), catalog=catalog)

    assert str(raised.value) == "resource 'payments_queue' is a Queue, which the stack has no provider for"


def test_grant_publish_allows_sending_and_delaying_jobs_to_that_queue_only() -> None:
    stack = _stack()
    resources = _resources(stack)
    schedules = JobSchedules(stack, "Schedules", stack_name="Test", topic=sns.Topic(stack, "Topic"))
    table = SecureTable(stack, "Idempotency", partition_key="id", retain=False).table
    orders, invoices = (
        JobQueue(
            stack,
            pascal_case(spec.name),
            spec=spec,
            stack_name="Test",
            code=lambda_.Code.from_inline("def handler(event, context): pass"),
            layers=[],
            idempotency_table=table,
            resources=resources.provided,
            schedules=schedules,
            retain_logs=False,
            catalog_ref="functions.catalog:CATALOG",
        )
        for spec in (CATALOG.queue("orders"), CATALOG.queue("invoices"))
    )
    publisher = iam.Role(stack, "Publisher", assumed_by=iam.AccountRootPrincipal())

    orders.grant_publish(publisher)

    as_json = Template.from_stack(stack).to_json()["Resources"]
    (role,) = [key for key in of_type(as_json, "AWS::IAM::Role") if key.startswith("Publisher")]
    queue = stack.get_logical_id(orders.queue.node.default_child)  # type: ignore[arg-type]
    statements = role_statements(as_json, role)
    conditional = [statement for statement in statements if "Condition" in statement]
    region_account = "${Region}:${Account}"
    assert permissions(statement for statement in statements if "Condition" not in statement) == {
        *{(f"sqs:{action}", f"{queue}.Arn") for action in ("SendMessage", "GetQueueAttributes", "GetQueueUrl")},
        # This queue's one-time schedules (`once-orders.*`) in the stack's group: never a recurring schedule of the
        # catalog, nor another queue's; and, for wheels of contract 1, those named by its jobs (`once-<job>-*`).
        *{
            (f"scheduler:{action}", f"arn:aws:scheduler:{region_account}:schedule/Test-jobs/{prefix}*")
            for action in ("CreateSchedule", "DeleteSchedule", "GetSchedule")
            for prefix in ("once-orders.", *(f"once-{job}-" for job in orders.spec.job_names))
        },
        # What JobPublisher.from_stack reads: this queue's, the stack's schedule group and schedules DLQ, and
        # the stack's job contract.
        *{
            ("ssm:GetParameters", f"arn:aws:ssm:{region_account}:parameter/Test/{name}")
            for name in (
                "queues/orders/url",
                "queues/orders/arn",
                "queues/orders/scheduler-role-arn",
                "schedules/group",
                "schedules/dlq-arn",
                "contract",
            )
        },
    }
    # Only this queue's scheduler role may be passed, and only to EventBridge Scheduler.
    scheduler_role = stack.get_logical_id(orders.scheduler_role.node.default_child)  # type: ignore[arg-type]
    assert scheduler_role != stack.get_logical_id(invoices.scheduler_role.node.default_child)  # type: ignore[arg-type]
    assert conditional == [
        {
            "Action": "iam:PassRole",
            "Condition": {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [scheduler_role, "Arn"]},
        }
    ]


@pytest.mark.parametrize(
    ("context", "error"),
    [
        ({"stack_name": "1-bad"}, "error: bad CDK context: stack_name '1-bad' must start with a letter"),
        (
            {"alarm_topic_arn": "arn:aws:sns:eu-west-1:123456789012:oncall", "alarm_email": "oncall@example.com"},
            "error: bad CDK context: alarm_topic_arn and alarm_email are both set, set only one",
        ),
    ],
    ids=["stack_name", "topic-and-email"],
)
def test_app_py_reports_a_bad_context_in_one_line(
    cdk_context: dict[str, Any], context: dict[str, str], error: str
) -> None:
    # The CDK CLI hands context to the app through CDK_CONTEXT_JSON; this is what `cdk synth -c ...` does.
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO_ROOT,
        env={**os.environ, "CDK_CONTEXT_JSON": json.dumps({**cdk_context, **context})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stderr.startswith(error)


def test_an_existing_alarm_topic_is_published_to_by_arn_without_a_key_grant() -> None:
    # Its key (if any) can't be known at synth: the topic owner's key policy must allow the worker (docs).
    stack = _stack()
    topic_arn = "arn:aws:sns:eu-west-1:123456789012:oncall"
    resources = JobResources(
        stack,
        "Resources",
        catalog=CATALOG,
        settings={},
        retain=False,
        stack_name="Test",
        alarm_topic=sns.Topic.from_topic_arn(stack, "Existing", topic_arn),
        alarm_topic_key=None,
    )
    role = iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))

    resources.provided["alarm_topic"].grant(role)

    assert resources.provided["alarm_topic"].value == topic_arn
    as_json = Template.from_stack(stack).to_json()["Resources"]
    (role_key,) = [key for key in of_type(as_json, "AWS::IAM::Role") if key.startswith("Worker")]
    assert permissions(role_statements(as_json, role_key)) == {("sns:Publish", topic_arn)}


def test_a_dlq_index_missing_a_queue_fails_synth_once_a_worker_needs_it() -> None:
    stack = _stack()
    resources = _resources(stack)
    role = iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    resources.dead_letter_queues.add("orders", sqs.Queue(stack, "OrdersDlq"), role)

    resources.provided["dead_letter_queues"].grant(role)

    with pytest.raises(RuntimeError, match="the dead-letter queue index has no DLQ of queue 'invoices'"):
        Template.from_stack(stack)


PARAMETER_SECRET = Secret(name="api_key", description="the API's key", store=SecretStore.PARAMETER_STORE)
PARAMETER_CATALOG = Catalog(
    queues=(QueueSpec(name="calls", jobs=(JobSpec(name="call", handler="jobs.call", resources=("api_key",)),)),),
    resources=(PARAMETER_SECRET,),
)


@pytest.mark.parametrize(
    ("setting", "arn"),
    [
        ("/images/api-key", "arn:aws:ssm:${Region}:${Account}:parameter/images/api-key"),
        ("images.api-key", "arn:aws:ssm:${Region}:${Account}:parameter/images.api-key"),
        (
            "arn:aws:ssm:eu-west-1:123456789012:parameter/shared/api-key",
            "arn:aws:ssm:eu-west-1:123456789012:parameter/shared/api-key",
        ),
    ],
)
def test_a_secure_string_secret_is_the_existing_parameter_the_context_names_read_and_nothing_else(
    setting: str, arn: str
) -> None:
    stack = _stack()
    topic = AlarmTopic(stack, "Alarms", new=NewAlarmTopic(alarm_name_prefix="Test-", email=None, retain=False))
    resources = JobResources(
        stack,
        "Resources",
        catalog=PARAMETER_CATALOG,
        settings={"api_key": setting},
        retain=False,
        stack_name="Test",
        alarm_topic=topic.topic,
        alarm_topic_key=topic.key,
    )
    role = iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))

    resources.provided["api_key"].grant(role)

    as_json = Template.from_stack(stack).to_json()
    (role_key,) = [key for key in of_type(as_json["Resources"], "AWS::IAM::Role") if key.startswith("Worker")]
    assert permissions(role_statements(as_json["Resources"], role_key)) == {("ssm:GetParameter", arn)}
    # CloudFormation can't create a SecureString: the stack makes no parameter or secret for it.
    assert not of_type(as_json["Resources"], "AWS::SecretsManager::Secret")
    assert render(as_json["Outputs"]["ApiKeyArn"]["Value"]) == arn


def test_a_secure_string_secret_without_its_parameter_fails_synth_in_one_line() -> None:
    from sqs_jobs.cdk.context import ContextError, StackContext

    with pytest.raises(ContextError) as raised:
        StackContext.parse(
            {"stack_name": "Test", "retain_data": False, "create_mail_identity": False}.get, PARAMETER_CATALOG
        )
    message = str(raised.value)
    assert "\n" not in message
    assert (
        "context key 'api_key' is not set: the Secret 'api_key' is an SSM SecureString, which CloudFormation can't "
        "create; create it (aws ssm put-parameter --type SecureString --name ...) and name it, e.g. "
        "-c api_key=/my-team/api-key"
    ) in message
    with pytest.raises(ContextError, match="api_key 'not a name' is not accepted for the Secret 'api_key': use an "):
        StackContext.parse(
            {"stack_name": "Test", "retain_data": False, "create_mail_identity": False, "api_key": "not a name"}.get,
            PARAMETER_CATALOG,
        )
