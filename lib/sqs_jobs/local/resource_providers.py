"""One provider per resource kind (sqs_jobs.resources) on the local engine's moto server, or moto's mock_aws:
what sqs_jobs.cdk.resource_providers makes in the stack, made here with the same settings. Each returns the
value a
worker receives for the resource. Nothing here knows an app's resources."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqs_jobs.cli.errors import OperatorUsageError
from sqs_jobs.resources import (
    AlarmTopic,
    Bucket,
    DeadLetterQueues,
    Endpoint,
    MailSender,
    Network,
    Resource,
    Secret,
    SecretStore,
    Table,
)

# Where jobs find an endpoint the caller offers no stand-in or URL for (tests on mock_aws that don't call it):
# the discard port, so a job that does call it fails fast with a refused connection, a transient error.
UNUSED_ENDPOINT_URL = "http://127.0.0.1:9/unused"
# The stack's buckets have the same settings (tests/infra/test_engine_matches_stack.py compares them).
BUCKET_ENCRYPTION = "AES256"
BUCKET_PUBLIC_ACCESS_BLOCK = {
    "BlockPublicAcls": True,
    "IgnorePublicAcls": True,
    "BlockPublicPolicy": True,
    "RestrictPublicBuckets": True,
}
# A network's value on the local engine: its workers run on this machine and reach a local database directly.
LOCAL_NETWORK = "local (workers run on this machine)"
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")


class UnsupportedResourceError(OperatorUsageError, TypeError):
    """A resource of a kind the local engine has no provider for (one line from `jobctl local`, as from synth)."""


def local_resource_name(stack_name: str, resource: str) -> str:
    """`<stack>-<resource>` with '-' for '_': the local engine's name for a table or a secret."""
    return f"{stack_name}-{resource.replace('_', '-')}"


def local_bucket_name(stack_name: str, resource: str, account: str) -> str:
    """`<stack>-<resource>-<account>`, lowercase: S3 names are global, so the account keeps them apart.
    (The stack lets CloudFormation generate its bucket names; this is the local engine's.)"""
    name = f"{stack_name}-{resource.replace('_', '-')}-{account}".lower()
    if not _BUCKET_NAME.fullmatch(name) or "--" in name:
        raise ValueError(f"bucket name {name!r} is not a valid S3 name (3-63 of a-z, 0-9, '-'); shorten the stack name")
    return name


@dataclass(frozen=True)
class GlobalIndex:
    """A global secondary index projecting every attribute: its partition key and a number sort key."""

    name: str
    key: str
    sort_key: str


def create_table(
    dynamodb: Any,
    name: str,
    key: str,
    *,
    key_type: str = "S",
    sort_key: str | None = None,
    sort_key_type: str = "S",
    ttl_attribute: str | None = None,
    index: GlobalIndex | None = None,
) -> None:
    schema = [{"AttributeName": key, "KeyType": "HASH"}]
    definitions = [{"AttributeName": key, "AttributeType": key_type}]
    if sort_key:
        schema.append({"AttributeName": sort_key, "KeyType": "RANGE"})
        definitions.append({"AttributeName": sort_key, "AttributeType": sort_key_type})
    indexes: dict[str, Any] = {}
    if index is not None:
        definitions += [
            {"AttributeName": index.key, "AttributeType": "S"},
            {"AttributeName": index.sort_key, "AttributeType": "N"},
        ]
        indexes["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.key, "KeyType": "HASH"},
                    {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ]
    try:
        dynamodb.create_table(
            TableName=name,
            KeySchema=schema,
            AttributeDefinitions=definitions,
            BillingMode="PAY_PER_REQUEST",
            **indexes,
        )
    except dynamodb.exceptions.ResourceInUseException:
        return
    if ttl_attribute:
        dynamodb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl_attribute}
        )


def create_bucket(s3: Any, name: str) -> None:
    region = s3.meta.region_name
    # us-east-1 is the one region that refuses an explicit LocationConstraint.
    location = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):  # provision() is idempotent
        s3.create_bucket(Bucket=name, **location)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_encryption(
        Bucket=name,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": BUCKET_ENCRYPTION}}]
        },
    )
    s3.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=BUCKET_PUBLIC_ACCESS_BLOCK)


def create_secret(secretsmanager: Any, name: str, value: str | None) -> str:
    """The secret (created, or found with its value put again); its ARN. Without a value it gets a random
    placeholder, as the stack's does, and an existing one keeps what was put in it."""
    try:
        initial = value if value else secrets.token_urlsafe(32)
        return str(secretsmanager.create_secret(Name=name, SecretString=initial)["ARN"])
    except secretsmanager.exceptions.ResourceExistsException:
        arn = str(secretsmanager.describe_secret(SecretId=name)["ARN"])
        if value:
            secretsmanager.put_secret_value(SecretId=arn, SecretString=value)
        return arn


def local_parameter_name(stack_name: str, resource: str) -> str:
    """`/<stack>/secrets/<resource>`: the local engine's SecureString for a Secret kept in Parameter Store."""
    return f"/{stack_name}/secrets/{resource}"


def create_secure_parameter(ssm: Any, name: str, value: str | None) -> str:
    """The SecureString (created, or its value put again); its ARN. Without a value it gets a random placeholder,
    and an existing one keeps what was put in it."""
    try:
        ssm.put_parameter(Name=name, Type="SecureString", Value=value or secrets.token_urlsafe(32), Overwrite=False)
    except ssm.exceptions.ParameterAlreadyExists:
        if value:
            ssm.put_parameter(Name=name, Type="SecureString", Value=value, Overwrite=True)
    return str(ssm.get_parameter(Name=name)["Parameter"]["ARN"])


def local_alarm_topic_name(stack_name: str) -> str:
    """The local engine's alarm topic. (The stack lets CloudFormation name its topic, or uses yours.)"""
    return f"{stack_name}-alarms"


class LocalResources:
    """Makes each declared resource on one account. `settings` holds what a caller sets per resource: an
    endpoint's URL (a stand-in's), the mail sender's address; `dead_letter_queues` the JSON of every queue's DLQ."""

    def __init__(
        self,
        client: Callable[[str], Any],
        *,
        stack_name: str,
        account: str,
        settings: Mapping[str, str],
        dead_letter_queues: Mapping[str, Mapping[str, str]],
    ) -> None:
        self._client = client
        self._stack_name = stack_name
        self._account = account
        self._settings = settings
        self._dead_letter_queues = dead_letter_queues

    def provide(self, spec: Resource) -> str:
        setting = self._settings.get(spec.name)
        if isinstance(spec, Table):
            name = local_resource_name(self._stack_name, spec.name)
            create_table(
                self._client("dynamodb"),
                name,
                spec.partition_key,
                key_type=spec.partition_key_type.value,
                sort_key=spec.sort_key,
                sort_key_type=spec.sort_key_type.value,
            )
            return name
        if isinstance(spec, Bucket):
            name = local_bucket_name(self._stack_name, spec.name, self._account)
            create_bucket(self._client("s3"), name)
            return name
        if isinstance(spec, Secret) and spec.store is SecretStore.PARAMETER_STORE:
            name = local_parameter_name(self._stack_name, spec.name)
            return create_secure_parameter(self._client("ssm"), name, setting or spec.local_value)
        if isinstance(spec, Secret):
            name = local_resource_name(self._stack_name, spec.name)
            return create_secret(self._client("secretsmanager"), name, setting or spec.local_value)
        if isinstance(spec, Endpoint):
            return setting or UNUSED_ENDPOINT_URL
        if isinstance(spec, MailSender):
            address = setting or spec.default_address
            self._client("ses").verify_email_identity(EmailAddress=address)
            return address
        if isinstance(spec, Network):
            return LOCAL_NETWORK
        if isinstance(spec, AlarmTopic):
            # CreateTopic of an existing name returns it.
            return str(self._client("sns").create_topic(Name=local_alarm_topic_name(self._stack_name))["TopicArn"])
        if isinstance(spec, DeadLetterQueues):
            return json.dumps({name: dict(value) for name, value in self._dead_letter_queues.items()})
        raise UnsupportedResourceError(
            f"resource {spec.name!r} is a {spec.kind}, which the local engine has no provider for"
        )
