"""What the stack must make of each catalog resource, derived from its kind and settings: the value a worker
receives and the exact grant (nothing more). Tests of any catalog use these; none lists an app's resources."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqs_jobs.cdk.naming import pascal_case, physical_queue_name
from sqs_jobs.resources import (
    AlarmTopic,
    Bucket,
    DeadLetterQueues,
    Endpoint,
    MailSender,
    Network,
    NetworkPlacement,
    Resource,
    Secret,
    SecretStore,
    Table,
)
from sqs_jobs.specs import Catalog
from tests.infra.cfn import Permission, conditioned, of_type

# Reading the DLQs without consuming them: receive, hand back (visibility), count.
DLQ_REVIEW = ("sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes")
TABLE_READ = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")
# What Lambda needs of the role of a worker in a VPC (its network interfaces), and the Describe actions on "*".
NETWORK_INTERFACE = ("ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses")
NETWORK_DESCRIBE = ("ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets")
TABLE_WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")

Resources = Mapping[str, Mapping[str, Any]]


def made(resources: Resources, spec: Resource, type_name: str) -> str:
    """The logical ID of what the stack made for `spec` (the resources construct's child `<Name>`)."""
    prefix = f"Resources{pascal_case(spec.name)}"
    (found,) = [key for key in of_type(resources, type_name) if key.startswith(prefix)]
    return found


def topic_and_key(resources: Resources) -> tuple[str, str]:
    (topic,) = of_type(resources, "AWS::SNS::Topic")
    (key,) = of_type(resources, "AWS::KMS::Key")
    return topic, key


def dlq_arns(catalog: Catalog, stack_name: str) -> set[str]:
    """Every catalog queue's DLQ, by ARN: built from its physical name, like the redrive-allow policy."""
    return {
        f"arn:aws:sqs:${{Region}}:${{Account}}:{physical_queue_name(stack_name, spec.name, dlq=True, fifo=spec.fifo)}"
        for spec in catalog
    }


def ses_identity(name: str) -> str:
    return f"arn:aws:ses:${{Region}}:${{Account}}:identity/{name}"


def expected_value(resources: Resources, spec: Resource, settings: Mapping[str, str]) -> object:
    """The worker's environment value for a resource the stack created (or, for values, the setting)."""
    if isinstance(spec, Table):
        return {"Ref": made(resources, spec, "AWS::DynamoDB::Table")}
    if isinstance(spec, Bucket):
        return {"Ref": made(resources, spec, "AWS::S3::Bucket")}
    if isinstance(spec, Secret):
        return {"Ref": made(resources, spec, "AWS::SecretsManager::Secret")}
    if isinstance(spec, Endpoint):
        return settings.get(spec.name, spec.default_url)
    if isinstance(spec, MailSender):
        return settings.get(spec.name, spec.default_address)
    if isinstance(spec, Network):
        return str(NetworkPlacement.parse(settings[spec.name]))
    if isinstance(spec, AlarmTopic):
        return {"Ref": topic_and_key(resources)[0]}
    raise AssertionError(f"no plain value for {spec.kind}")


def expected_grant(
    resources: Resources,
    spec: Resource,
    *,
    catalog: Catalog,
    stack_name: str,
    settings: Mapping[str, str],
    sandbox_recipients: tuple[str, ...] = (),
) -> set[Permission]:
    """Exactly what a worker whose jobs use `spec` (created by the stack) is allowed for it."""
    if isinstance(spec, Table):
        table = f"{made(resources, spec, 'AWS::DynamoDB::Table')}.Arn"
        actions = (*(TABLE_READ if spec.access.reads else ()), *(TABLE_WRITE if spec.access.writes else ()))
        return {(action, table) for action in actions}
    if isinstance(spec, Bucket):
        bucket = f"{made(resources, spec, 'AWS::S3::Bucket')}.Arn"
        found = set()
        if spec.access.reads:
            found.add(("s3:GetObject", f"{bucket}/{spec.prefix}*"))
            condition = {"StringLike": {"s3:prefix": f"{spec.prefix}*"}}
            found.add(("s3:ListBucket", conditioned(bucket, condition) if spec.prefix else bucket))
        if spec.access.writes:
            found.add(("s3:PutObject", f"{bucket}/{spec.prefix}*"))
        return found
    if isinstance(spec, Secret) and spec.store is SecretStore.PARAMETER_STORE:
        name = settings[spec.name]
        arn = name if name.startswith("arn:") else f"arn:aws:ssm:${{Region}}:${{Account}}:parameter/{name.lstrip('/')}"
        return {("ssm:GetParameter", arn)}
    if isinstance(spec, Secret):
        return {("secretsmanager:GetSecretValue", f"Ref:{made(resources, spec, 'AWS::SecretsManager::Secret')}")}
    if isinstance(spec, Endpoint):
        return set()  # a URL outside AWS: nothing to allow
    if isinstance(spec, MailSender):
        address = settings.get(spec.name, spec.default_address)
        identities = {address, address.rpartition("@")[2], *sandbox_recipients}
        condition = {"StringEquals": {"ses:FromAddress": address}}
        return {("ses:SendEmail", conditioned(ses_identity(name), condition)) for name in identities}
    if isinstance(spec, Network):
        placement = NetworkPlacement.parse(settings[spec.name])
        ec2 = "arn:aws:ec2:${Region}:${Account}:"
        interfaces = f"{ec2}network-interface/*"
        placed_in = {f"{ec2}subnet/{subnet}" for subnet in placement.subnet_ids}
        placed_in |= {f"{ec2}security-group/{group}" for group in placement.security_group_ids}
        return (
            {("ec2:CreateNetworkInterface", arn) for arn in {interfaces, *placed_in}}
            | {(action, interfaces) for action in NETWORK_INTERFACE}
            | {(action, "*") for action in NETWORK_DESCRIBE}
        )
    if isinstance(spec, AlarmTopic):
        topic, key = topic_and_key(resources)
        # Publishing to the stack's own topic, and the topic's customer-managed key that SNS uses for the publisher.
        return {("sns:Publish", f"Ref:{topic}"), ("kms:GenerateDataKey", f"{key}.Arn"), ("kms:Decrypt", f"{key}.Arn")}
    if isinstance(spec, DeadLetterQueues):
        # Reading every DLQ without consuming it: no DeleteMessage, no SendMessage, no other queue.
        return {(action, arn) for action in DLQ_REVIEW for arn in dlq_arns(catalog, stack_name)}
    raise AssertionError(f"no expected grant for {spec.kind}")
