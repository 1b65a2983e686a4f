"""One provider per resource kind (sqs_jobs.resources): what the stack makes of a declared resource.

A provider creates the resource (or imports the existing one its context key names) and returns how it reaches a
worker: the value of the worker's environment variable (`resource_env_name(name)`) and the least grant its kind
needs. Nothing here knows an app's resources; sqs_jobs.cdk.job_resources calls the provider of each declared one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jsii
from aws_cdk import Acknowledgment, ArnFormat, CfnElement, IStableStringProducer, Lazy, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ses as ses
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IConstruct, IValidation

from sqs_jobs.cdk.job_bucket import JobBucket
from sqs_jobs.cdk.naming import pascal_case, physical_queue_name
from sqs_jobs.cdk.secure_table import SecureTable
from sqs_jobs.resources import Bucket, KeyType, MailSender, NetworkPlacement, Secret, SecretStore, Table
from sqs_jobs.specs import Catalog

# What each access allows on a table's items: re-reading by key (the article's rule 2), writing by key.
TABLE_READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")
TABLE_WRITE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")
# Reading a DLQ without consuming it: receive (and count), hand the message straight back, read the queue's counts.
DLQ_REVIEW_ACTIONS = ("sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes")
# What a publisher to an SNS topic encrypted with a customer-managed key calls KMS for (SNS does, on its behalf).
TOPIC_KEY_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
_ARN = re.compile(r"^arn:aws[a-z-]*:")
# What Lambda does with the worker's role to put the worker in a VPC (Lambda developer guide, "Giving Lambda
# functions access to resources in an Amazon VPC"): create its network interfaces in the subnets with the security
# groups, describe them, and delete them and manage their addresses when it no longer needs them.
NETWORK_INTERFACE_ACTIONS = (
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)
NETWORK_DESCRIBE_ACTIONS = ("ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets")

BUCKET_OBJECTS = (
    "s3:{actions} on <bucket>/{prefix}*: a job's object keys (e.g. {prefix}<id>) are not known at deploy time. The "
    "wildcard is only the object key under one prefix of one bucket, for the actions the resource's access needs."
)
BUCKET_ACCESS_LOGS = (
    "No server access logs: an access-log bucket would be a second retained bucket (itself without logs) for an "
    "object store that only this stack's workers write; the bucket is private, TLS 1.2-only, versioned and kept. "
    "Turn on CloudTrail S3 data events for the bucket if an audit trail of object access is required."
)
NETWORK_DESCRIBE_STAR = (
    "The worker is in a VPC: Lambda describes network interfaces and subnets with its role, and EC2's Describe "
    "actions accept no resource ARN, so '*' is the only resource they take (AWS's Lambda guide says "
    "DescribeNetworkInterfaces works only on '*'). Every other network grant names the subnets and security groups."
)
NETWORK_INTERFACES = (
    "Lambda creates, deletes and readdresses the worker's network interfaces, whose IDs exist only once Lambda "
    "has made them: network-interface/* in this account and region is the narrowest ARN (AWS's Lambda guide: "
    "without it the function may lose its VPC access). Creating one also needs the named subnets and groups."
)
SECRET_ROTATION = (
    "No rotation function: the secret holds a credential issued by someone else (an API key, a database "
    "password managed with the database); rotate it where it is issued and put the new value "
    "(docs/catalog.md, 'Secrets'). Workers read it again within SECRET_CACHE_S."
)


@dataclass(frozen=True)
class ProvidedResource:
    """How one resource reaches a worker: the environment variable's value and the grant. `findings` are the
    cdk-nag findings (rule ID, reason) a grantee's policy gets from this grant, acknowledged once, here."""

    value: str
    grant: Callable[[iam.IGrantable], object]
    findings: tuple[tuple[str, str], ...] = ()
    # The stack output's suffix, `<Name><suffix>`, when the resource is published.
    output_suffix: str = "Value"
    # A network: where the worker of a queue whose jobs name it runs.
    placement: NetworkPlacement | None = None


class MissingResourceError(LookupError):
    """The catalog names a resource that the stack does not provide."""


def _no_grant(_grantee: iam.IGrantable) -> None:
    """For a resource that is only a value (a URL): nothing in AWS to allow."""


def provide_table(
    scope: Construct, spec: Table, existing: str | dynamodb.ITable | None, *, retain: bool
) -> ProvidedResource:
    """The stack's own table (construct `<Name>`), the existing one `existing` names (a name or an ARN), or the
    host stack's own table given as `existing`."""
    construct_id = pascal_case(spec.name)
    table: dynamodb.ITable
    if existing is not None and not isinstance(existing, str):
        table = existing
    elif existing is None:
        table = SecureTable(
            scope,
            construct_id,
            partition_key=spec.partition_key,
            partition_key_type=_attribute_type(spec.partition_key_type),
            sort_key=spec.sort_key,
            sort_key_type=_attribute_type(spec.sort_key_type),
            retain=retain,
        ).table
    elif _ARN.match(existing):
        table = dynamodb.Table.from_table_arn(scope, construct_id, existing)
    else:
        table = dynamodb.Table.from_table_name(scope, construct_id, existing)
    actions = (*(TABLE_READ_ACTIONS if spec.access.reads else ()), *(TABLE_WRITE_ACTIONS if spec.access.writes else ()))
    # Table.grant adds the table's KMS key when the stack knows one (an existing table's key policy must allow the
    # worker if it has a customer-managed key: docs/catalog.md).
    return ProvidedResource(
        value=table.table_name, grant=lambda grantee: table.grant(grantee, *actions), output_suffix="Name"
    )


def _attribute_type(key_type: KeyType) -> dynamodb.AttributeType:
    return {
        KeyType.STRING: dynamodb.AttributeType.STRING,
        KeyType.NUMBER: dynamodb.AttributeType.NUMBER,
        KeyType.BINARY: dynamodb.AttributeType.BINARY,
    }[key_type]


def provide_bucket(scope: Construct, spec: Bucket, existing: str | s3.IBucket | None) -> ProvidedResource:
    """The stack's own bucket (construct `<Name>`, always kept), the existing one `existing` names, or the host
    stack's own bucket given as `existing`; the grant covers only keys under the resource's prefix."""
    construct_id = pascal_case(spec.name)
    bucket: s3.IBucket
    if existing is not None and not isinstance(existing, str):
        bucket = existing
    elif existing is None:
        created = JobBucket(scope, construct_id)
        bucket = created.bucket
        _acknowledge(created.bucket.node.default_child, "AwsSolutions-S1", BUCKET_ACCESS_LOGS)
    else:
        bucket = s3.Bucket.from_bucket_name(scope, construct_id, existing)
    object_actions = [
        *(["s3:GetObject"] if spec.access.reads else []),
        *(["s3:PutObject"] if spec.access.writes else []),
    ]
    objects_arn = bucket.arn_for_objects(f"{spec.prefix}*")

    def grant(grantee: iam.IGrantable) -> iam.Grant:
        # Object actions under the prefix only. (Bucket.grant_put/grant_read would add legal-hold, retention,
        # tagging and version actions and s3:Abort*, none of which a job uses.)
        granted = iam.Grant.add_to_principal(grantee=grantee, actions=object_actions, resource_arns=[objects_arn])
        if spec.access.reads:
            # Listing, of the prefix only (the s3:prefix condition); with no prefix, of the whole bucket.
            conditions = {"StringLike": {"s3:prefix": f"{spec.prefix}*"}} if spec.prefix else None
            granted = granted.combine(
                iam.Grant.add_to_principal(
                    grantee=grantee, actions=["s3:ListBucket"], resource_arns=[bucket.bucket_arn], conditions=conditions
                )
            )
        return granted

    stack = Stack.of(scope)
    # How cdk-nag names the bucket's ARN in a finding: the logical ID of a bucket of this stack, else its name.
    owned = existing is None or (not isinstance(existing, str) and isinstance(bucket.node.default_child, CfnElement))
    arn_token = (
        f"<{stack.resolve(stack.get_logical_id(_cfn(bucket)))}.Arn>"
        if owned
        else f"arn:<AWS::Partition>:s3:::{stack.resolve(bucket.bucket_name)}"
    )
    reason = BUCKET_OBJECTS.format(actions="/".join(a.removeprefix("s3:") for a in object_actions), prefix=spec.prefix)
    return ProvidedResource(
        value=bucket.bucket_name,
        grant=grant,
        findings=((f"AwsSolutions-IAM5[Resource::{arn_token}/{spec.prefix}*]", reason),),
        output_suffix="Name",
    )


def provide_secret(scope: Construct, spec: Secret, existing: str | secretsmanager.ISecret | None) -> ProvidedResource:
    """The stack's own secret (a random placeholder value until the real one is put), the existing one `existing`
    names (a name, or its complete ARN), or the host stack's own secret given as `existing` (its ARN complete: a
    secret of that stack, or imported by complete ARN). The worker may read its value, nothing else."""
    if spec.store is SecretStore.PARAMETER_STORE:
        if existing is not None and not isinstance(existing, str):
            raise MissingResourceError(
                f"secret {spec.name!r} is a SecureString parameter: name it by context, not as an ISecret"
            )
        return _provide_secure_parameter(scope, spec, existing)
    construct_id = pascal_case(spec.name)
    secret: secretsmanager.ISecret
    findings: tuple[tuple[str, str], ...] = ()
    suffix = ""
    if existing is not None and not isinstance(existing, str):
        secret = existing
    elif existing is None:
        secret = secretsmanager.Secret(scope, construct_id, description=spec.description)
        _acknowledge(secret.node.default_child, "AwsSolutions-SMG4", SECRET_ROTATION)
    elif _ARN.match(existing):
        secret = secretsmanager.Secret.from_secret_complete_arn(scope, construct_id, existing)
    else:
        # By name the real ARN ends in Secrets Manager's random 6-character suffix, which the imported ARN lacks:
        # the grant names it as `-??????`. The worker gets the partial ARN, which GetSecretValue accepts.
        secret = secretsmanager.Secret.from_secret_name_v2(scope, construct_id, existing)
        suffix = "-??????"
        findings = (
            (
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:"
                f"secret:{existing}-??????]",
                "The secret is named by context, and its ARN ends in a suffix Secrets Manager chose: '-??????' "
                "matches exactly that suffix of that one name. Give its complete ARN in the context key to name it "
                "exactly.",
            ),
        )
    return ProvidedResource(
        value=secret.secret_arn,
        grant=lambda grantee: iam.Grant.add_to_principal(
            grantee=grantee, actions=["secretsmanager:GetSecretValue"], resource_arns=[secret.secret_arn + suffix]
        ),
        findings=findings,
        output_suffix="Arn",
    )


def _provide_secure_parameter(scope: Construct, spec: Secret, existing: str | None) -> ProvidedResource:
    """An existing SSM SecureString (CloudFormation can't create one), by name or ARN: the worker may read that
    parameter, nothing else. Its key: the AWS-managed aws/ssm key lets every principal of the account decrypt;
    a customer-managed key's policy must allow the worker's role (docs/catalog.md)."""
    if existing is None:  # the context parser requires it; a direct caller must pass it too
        raise MissingResourceError(f"secret {spec.name!r} is a SecureString parameter: name the existing one")
    if _ARN.match(existing):
        arn = existing
    else:
        arn = Stack.of(scope).format_arn(
            service="ssm",
            resource="parameter",
            # A hierarchical name starts with "/", which the ARN's "parameter/" already holds.
            resource_name=existing.removeprefix("/"),
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
    return ProvidedResource(
        value=arn,
        grant=lambda grantee: iam.Grant.add_to_principal(
            grantee=grantee, actions=["ssm:GetParameter"], resource_arns=[arn]
        ),
        output_suffix="Arn",
    )


def provide_endpoint(url: str) -> ProvidedResource:
    # Outside AWS: the worker only needs the address (and outbound HTTPS, which Lambda has).
    return ProvidedResource(value=url, grant=_no_grant, output_suffix="Url")


def provide_network(scope: Construct, placement: NetworkPlacement) -> ProvidedResource:
    """The account's subnets and security groups the worker runs in (a queue's JobQueue places its function);
    the grant is only what Lambda needs to manage the worker's network interfaces there."""
    stack = Stack.of(scope)

    def ec2_arn(resource: str, name: str) -> str:
        return stack.format_arn(
            service="ec2", resource=resource, resource_name=name, arn_format=ArnFormat.SLASH_RESOURCE_NAME
        )

    interfaces = ec2_arn("network-interface", "*")
    placed_in = [
        *(ec2_arn("subnet", subnet) for subnet in placement.subnet_ids),
        *(ec2_arn("security-group", group) for group in placement.security_group_ids),
    ]

    def grant(grantee: iam.IGrantable) -> iam.Grant:
        return (
            iam.Grant.add_to_principal(
                grantee=grantee, actions=["ec2:CreateNetworkInterface"], resource_arns=[interfaces, *placed_in]
            )
            .combine(
                iam.Grant.add_to_principal(
                    grantee=grantee, actions=list(NETWORK_INTERFACE_ACTIONS), resource_arns=[interfaces]
                )
            )
            .combine(
                # EC2's Describe actions take no resource ARN.
                iam.Grant.add_to_principal(grantee=grantee, actions=list(NETWORK_DESCRIBE_ACTIONS), resource_arns=["*"])
            )
        )

    interfaces_token = "arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*"
    return ProvidedResource(
        value=str(placement),
        grant=grant,
        findings=(
            ("AwsSolutions-IAM5[Resource::*]", NETWORK_DESCRIBE_STAR),
            (f"AwsSolutions-IAM5[Resource::{interfaces_token}]", NETWORK_INTERFACES),
        ),
        placement=placement,
    )


def provide_mail_sender(
    scope: Construct, spec: MailSender, address: str, *, create_identity: bool, sandbox_recipients: Sequence[str]
) -> ProvidedResource:
    """ses:SendEmail from `address` only (the ses:FromAddress condition), against the identities SES authorizes
    a send with: the address or its domain, and in the SES sandbox each verified recipient. The identity is
    created only with `create_identity`: CloudFormation can't adopt one that already exists."""
    if create_identity:
        # Creating the identity sends AWS's verification mail to the address; SES refuses to send until it is
        # confirmed (and, in the SES sandbox, until each recipient is verified too).
        ses.EmailIdentity(scope, pascal_case(spec.name), identity=ses.Identity.email(address))
    stack = Stack.of(scope)
    identities = [
        stack.format_arn(
            service="ses", resource="identity", resource_name=name, arn_format=ArnFormat.SLASH_RESOURCE_NAME
        )
        for name in dict.fromkeys((address, address.rpartition("@")[2], *sandbox_recipients))
    ]
    return ProvidedResource(
        value=address,
        grant=lambda grantee: iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["ses:SendEmail"],
            resource_arns=identities,
            conditions={"StringEquals": {"ses:FromAddress": address}},
        ),
        output_suffix="Address",
    )


def provide_alarm_topic(topic: sns.ITopic, key: kms.IKey | None) -> ProvidedResource:
    def grant(grantee: iam.IGrantable) -> iam.Grant:
        # Publish to this one topic. The stack's own topic is encrypted with its customer-managed key, which SNS
        # uses on the publisher's behalf: that key too, by ARN (its policy delegates to IAM). An existing topic's
        # key is unknown at synth (no lookups): if it has one, its key policy must allow the worker's role
        # (docs/infrastructure.md).
        granted = iam.Grant.add_to_principal(grantee=grantee, actions=["sns:Publish"], resource_arns=[topic.topic_arn])
        if key is not None:
            granted = granted.combine(
                iam.Grant.add_to_principal(
                    grantee=grantee, actions=list(TOPIC_KEY_ACTIONS), resource_arns=[key.key_arn]
                )
            )
        return granted

    return ProvidedResource(value=topic.topic_arn, grant=grant)


@jsii.implements(IStableStringProducer)
class _Render:
    def __init__(self, render: Callable[[], str]) -> None:
        self._render = render

    def produce(self) -> str:
        return self._render()


@jsii.implements(IValidation)
class _Problems:
    def __init__(self, problems: Callable[[], list[str]]) -> None:
        self._problems = problems

    def validate(self) -> list[str]:
        return self._problems()


class DeadLetterQueueIndex:
    """The DeadLetterQueues kind: every catalog queue's DLQ URL and worker role ID, as one JSON object.

    A worker's resources exist before its queue (and the queues of the catalog after it), so `value` is rendered
    at synth, from the queues the stack `add`s as it builds them, in catalog order; once a worker is granted the
    resource, synth fails if a queue is missing. `grant` names each DLQ's ARN from its physical name (as the
    redrive-allow policy does): it needs no queue yet.
    """

    def __init__(self, scope: Construct, *, stack_name: str, catalog: Catalog) -> None:
        self._scope = scope
        self._stack_name = stack_name
        self._catalog = catalog
        self._queues: dict[str, tuple[sqs.IQueue, iam.Role]] = {}
        self._granted = False
        self.value = Lazy.string(_Render(self._render))
        scope.node.add_validation(_Problems(self._missing))

    def add(self, queue_name: str, dead_letter_queue: sqs.IQueue, worker_role: iam.Role) -> None:
        self._queues[queue_name] = (dead_letter_queue, worker_role)

    def provided(self) -> ProvidedResource:
        return ProvidedResource(value=self.value, grant=self.grant)

    def grant(self, grantee: iam.IGrantable) -> iam.Grant:
        self._granted = True
        stack = Stack.of(self._scope)
        arns = [
            stack.format_arn(
                service="sqs",
                resource=physical_queue_name(self._stack_name, spec.name, dlq=True, fifo=spec.fifo),
                arn_format=ArnFormat.NO_RESOURCE_NAME,
            )
            for spec in self._catalog
        ]
        return iam.Grant.add_to_principal(grantee=grantee, actions=list(DLQ_REVIEW_ACTIONS), resource_arns=arns)

    def _render(self) -> str:
        index: dict[str, dict[str, str]] = {}
        for spec in self._catalog:
            if spec.name in self._queues:  # a missing one has failed validation already
                dead_letter_queue, worker_role = self._queues[spec.name]
                index[spec.name] = {"dlq_url": dead_letter_queue.queue_url, "worker_role_id": worker_role.role_id}
        return Stack.of(self._scope).to_json_string(index)

    def _missing(self) -> list[str]:
        return [
            f"the dead-letter queue index has no DLQ of queue {spec.name!r}: the stack must add every queue "
            "(JobResources.dead_letter_queues.add)"
            for spec in self._catalog
            if self._granted and spec.name not in self._queues
        ]


def _cfn(bucket: s3.IBucket) -> CfnElement:
    child = bucket.node.default_child
    assert isinstance(child, CfnElement), bucket.node.path
    return child


def _acknowledge(construct: IConstruct | None, rule: str, reason: str) -> None:
    assert construct is not None
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
