"""The jobs inside a team's own stack (`Jobs`), with the host's own table, bucket and secret: the construct uses
and grants those and creates none of its own, its workers run the framework's handler on the project's code, and
a construct of the wrong kind, or for a resource the catalog lacks, is refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk.assertions import Template

from infra.project import LAYER_DIR
from sqs_jobs.cdk.job_resources import GivenResourceError
from sqs_jobs.cdk.jobs import Jobs
from sqs_jobs.maintenance import MAINTENANCE_RESOURCES
from sqs_jobs.resources import Access, Bucket, Secret, Table
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from tests.infra.cfn import of_type, permissions, role_statements

CATALOG = Catalog(
    resources=(
        Table(name="customers_table", description="the shop's customers", partition_key="customer_id"),
        Bucket(name="exports_bucket", description="exports", prefix="exports/", access=Access.WRITE),
        Secret(name="crm_api_key", description="the CRM's API key"),
        *MAINTENANCE_RESOURCES,
    ),
    queues=(
        QueueSpec(
            name="exports",
            description="exports of a customer to the CRM",
            jobs=(
                JobSpec(
                    name="export_customer",
                    handler="shop_jobs.export_customer",
                    description="export one customer",
                    resources=("customers_table", "exports_bucket", "crm_api_key"),
                ),
            ),
        ),
    ),
)


def _host(tmp_path: Path, **given: Any) -> tuple[Stack, dict[str, Any]]:
    package = tmp_path / "shop_jobs"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "export_customer.py").write_text("def run(envelope, context):\n    return None\n")
    stack = Stack(App(), "ShopService")
    own: dict[str, Any] = {
        "customers_table": dynamodb.Table(
            stack, "Customers", partition_key=dynamodb.Attribute(name="customer_id", type=dynamodb.AttributeType.STRING)
        ),
        "exports_bucket": s3.Bucket(stack, "Exports"),
        "crm_api_key": secretsmanager.Secret(stack, "CrmApiKey"),
    }
    Jobs(
        stack,
        "Jobs",
        catalog=CATALOG,
        catalog_ref="shop_jobs.catalog:CATALOG",
        code_dirs=(package,),
        layer_dir=LAYER_DIR,
        resources=given if given else own,
    )
    return stack, own


@pytest.fixture(scope="module")
def hosted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Stack, dict[str, Any]]:
    stack, own = _host(tmp_path_factory.mktemp("host"))
    return Template.from_stack(stack).to_json()["Resources"], stack, own


def test_the_hosts_own_resources_are_used_and_none_is_created_beside_them(
    hosted: tuple[dict[str, Any], Stack, dict[str, Any]],
) -> None:
    resources, stack, own = hosted
    tables = of_type(resources, "AWS::DynamoDB::Table")
    # The host's table and the jobs' idempotency table: no second customers table.
    assert len(tables) == 2
    assert stack.get_logical_id(own["customers_table"].node.default_child) in tables
    assert len(of_type(resources, "AWS::S3::Bucket")) == 1
    assert len(of_type(resources, "AWS::SecretsManager::Secret")) == 1


def test_the_worker_is_granted_the_hosts_resources_and_nothing_wider(
    hosted: tuple[dict[str, Any], Stack, dict[str, Any]],
) -> None:
    resources, stack, own = hosted
    [role] = [key for key in of_type(resources, "AWS::IAM::Role") if key.startswith("JobsExportsQueue")]
    granted = permissions(role_statements(resources, role))
    table = stack.get_logical_id(own["customers_table"].node.default_child)
    bucket = stack.get_logical_id(own["exports_bucket"].node.default_child)
    secret = stack.get_logical_id(own["crm_api_key"].node.default_child)
    hosts = {
        (action, resource) for action, resource in granted if resource.startswith((table, bucket, f"Ref:{secret}"))
    }
    # Read on the table (its access is READ), objects put under the prefix, the secret's value: nothing more.
    assert hosts == {
        ("dynamodb:BatchGetItem", f"{table}.Arn"),
        ("dynamodb:GetItem", f"{table}.Arn"),
        ("dynamodb:Query", f"{table}.Arn"),
        ("s3:PutObject", f"{bucket}.Arn/exports/*"),
        ("secretsmanager:GetSecretValue", f"Ref:{secret}"),
    }


def test_its_workers_run_the_frameworks_handler_on_the_projects_catalog(
    hosted: tuple[dict[str, Any], Stack, dict[str, Any]],
) -> None:
    resources, _, _ = hosted
    workers = [resource["Properties"] for resource in of_type(resources, "AWS::Lambda::Function").values()]
    exports = [props for props in workers if "JOBS_QUEUE_NAME" in props.get("Environment", {}).get("Variables", {})]
    assert {props["Handler"] for props in exports} == {"sqs_jobs.worker.entry.handler"}
    assert {props["Environment"]["Variables"]["JOBS_CATALOG"] for props in exports} == {"shop_jobs.catalog:CATALOG"}


def test_a_construct_of_another_kind_or_for_an_undeclared_resource_is_refused_in_one_line(tmp_path: Path) -> None:
    bucket_stack = Stack(App(), "Other")
    a_bucket = s3.Bucket(bucket_stack, "Bucket")

    with pytest.raises(GivenResourceError) as wrong_kind:
        _host(tmp_path, customers_table=a_bucket)
    with pytest.raises(GivenResourceError) as undeclared:
        _host(tmp_path, orders_table=a_bucket)
    other_key = dynamodb.Table(
        bucket_stack, "ByEmail", partition_key=dynamodb.Attribute(name="email", type=dynamodb.AttributeType.STRING)
    )
    with pytest.raises(GivenResourceError, match="the table's partition key is 'email'; the catalog's"):
        _host(tmp_path, customers_table=other_key)

    assert str(wrong_kind.value).startswith("resources={'customers_table': ...}: 'customers_table' is a Table")
    assert "takes an ITable" in str(wrong_kind.value)
    assert str(undeclared.value).startswith("resources={'orders_table': ...}: the catalog declares no resource")
    assert "\n" not in str(wrong_kind.value) + str(undeclared.value)
