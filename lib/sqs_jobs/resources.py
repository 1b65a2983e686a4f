"""Resources a job may use, declared by kind in the app's catalog.

Each kind has one provider in the stack (sqs_jobs.cdk.resource_providers) and one in the local engine
(sqs_jobs.local.resource_providers); neither knows any app's resources. A job's `JobSpec.resources` names what
it may use, and the worker receives exactly those: each as the value of its environment variable (a table's
name, a bucket's name, a URL, a secret's ARN, an address), with the least grant its kind needs.

Every resource has a context key, its name: `cdk deploy -c customers_table=CrmService-Customers` uses a table that
exists already instead of creating one (tables, buckets, secrets), and sets an endpoint's URL or the mail
sender's address (docs/catalog.md, "Resources").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar
from urllib.parse import urlsplit

from sqs_jobs.flow_control import RateLimit, limit_problems
from sqs_jobs.limits import NAME

# An e-mail address, as far as a setting can be checked without sending to it.
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
# DynamoDB attribute names of the keys the stack declares: plain names, so jobs and tables agree on them.
_ATTRIBUTE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$")
# An S3 key prefix a grant is scoped to: "" (the whole bucket) or path segments ending with "/".
_PREFIX = re.compile(r"^([A-Za-z0-9!_.*'()-]+/)*$")


def https_base_url_problem(value: str) -> str | None:
    """Why `value` is not an https base URL with a host, without credentials, query or fragment, or None.
    Credentials would end up in a plain environment variable: API keys belong in a Secret."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        return "is not a URL"
    if parts.scheme != "https" or not parts.hostname:
        return "must be an https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials"
    if parts.query or parts.fragment or "?" in value or "#" in value:
        return "must be a base URL, without query or fragment"
    if any(char.isspace() for char in value):
        return "must not contain whitespace"
    return None


class Access(StrEnum):
    """What a job does with a table's items or a bucket's objects; the grant allows that and nothing else."""

    READ = "read"
    WRITE = "write"
    READ_WRITE = "read_write"

    @property
    def reads(self) -> bool:
        return self is not Access.WRITE

    @property
    def writes(self) -> bool:
        return self is not Access.READ


class KeyType(StrEnum):
    """A DynamoDB key attribute's type."""

    STRING = "S"
    NUMBER = "N"
    BINARY = "B"


@dataclass(frozen=True, kw_only=True)
class Resource:
    """One resource of the app: its name (the job's handle, its context key, its environment variable's suffix)
    and what it is for."""

    name: str
    description: str
    # Whether the stack publishes its value (a stack output and an SSM parameter) for services that use it too.
    published: ClassVar[bool] = True

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def context_key(self) -> str:
        return self.name

    def problems(self) -> list[str]:
        """Every rule this resource breaks, as sentences naming the accepted values."""
        found: list[str] = []
        if not NAME.fullmatch(self.name):
            found.append(f"resource name {self.name!r} must match {NAME.pattern}")
        if not self.description.strip():
            found.append(f"resource {self.name!r} needs a description (what it is, who reads it)")
        return found


@dataclass(frozen=True, kw_only=True)
class Table(Resource):
    """A DynamoDB table. Created by the stack (on demand, point-in-time recovery, encrypted), or an existing one
    named by context. READ: GetItem, BatchGetItem, Query; WRITE: PutItem, UpdateItem, DeleteItem,
    BatchWriteItem."""

    partition_key: str
    partition_key_type: KeyType = KeyType.STRING
    sort_key: str | None = None
    sort_key_type: KeyType = KeyType.STRING
    access: Access = Access.READ

    def problems(self) -> list[str]:
        found = super().problems()
        for label, key in (("partition_key", self.partition_key), ("sort_key", self.sort_key)):
            if key is not None and not _ATTRIBUTE.fullmatch(key):
                found.append(f"table {self.name!r}: {label} {key!r} must match {_ATTRIBUTE.pattern}")
        return found


@dataclass(frozen=True, kw_only=True)
class Bucket(Resource):
    """An S3 bucket; the job's grant covers only keys under `prefix`. Created by the stack (private, encrypted,
    TLS-only, versioned, always kept on delete), or an existing one named by context. READ: GetObject and
    ListBucket of the prefix; WRITE: PutObject."""

    prefix: str
    access: Access = Access.READ

    def problems(self) -> list[str]:
        found = super().problems()
        if not _PREFIX.fullmatch(self.prefix):
            found.append(
                f"bucket {self.name!r}: prefix {self.prefix!r} must be '' (the whole bucket) or path segments each "
                "ending with '/', e.g. 'thumbnails/'"
            )
        return found


@dataclass(frozen=True, kw_only=True)
class Endpoint(Resource):
    """An HTTPS API outside AWS: its base URL, `default_url` unless the context key sets another. `standin`
    ("module:callable") makes the local engine start a stand-in of it and give jobs its URL (docs/catalog.md)."""

    default_url: str
    standin: str | None = None
    # At most this many calls per second to the endpoint's host, from every job and worker that calls it (its
    # `per` keys it by a field of the calling job's envelope); None: no limit (sqs_jobs.flow_control).
    rate_limit: RateLimit | None = None

    def problems(self) -> list[str]:
        found = super().problems()
        problem = https_base_url_problem(self.default_url)
        if problem is not None:
            found.append(f"endpoint {self.name!r}: default_url {self.default_url!r} {problem}")
        wrong = limit_problems(f"endpoint {self.name!r}", "rate_limit", self.rate_limit, RateLimit)
        found += wrong
        if self.rate_limit is not None and not wrong:
            found += self.rate_limit.problems(f"endpoint {self.name!r}")
        if self.standin is not None and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", self.standin):
            found.append(f"endpoint {self.name!r}: standin {self.standin!r} must be 'module:callable'")
        return found


class SecretStore(StrEnum):
    """Where a Secret is kept."""

    SECRETS_MANAGER = "secretsmanager"
    # An SSM Parameter Store SecureString. CloudFormation can't create one (AWS::SSM::Parameter makes String and
    # StringList only), so the stack only uses one that exists, named by context.
    PARAMETER_STORE = "ssm"


@dataclass(frozen=True, kw_only=True)
class Secret(Resource):
    """A Secrets Manager secret a job reads with `context.secret(name)` (cached for SECRET_CACHE_S, never in an
    environment variable, never logged). Created by the stack with a random placeholder value (set the real one
    with `aws secretsmanager put-secret-value`), or an existing one named (or its ARN given) by context. The local
    engine stores `local_value` (never deployed), or a random placeholder like the stack's when it is empty.

    `store=SecretStore.PARAMETER_STORE` keeps it as an SSM SecureString instead: one that exists, always named
    (or its ARN given) by context, since CloudFormation can't create a SecureString."""

    local_value: str = ""
    store: SecretStore = SecretStore.SECRETS_MANAGER


@dataclass(frozen=True, kw_only=True)
class MailSender(Resource):
    """The address jobs send mail from through SES; `default_address` unless the context key sets another. The
    grant allows ses:SendEmail from that address only (the ses:FromAddress condition)."""

    default_address: str
    # At most this many SES calls per second from every worker whose jobs use the sender: the account's sending
    # rate (1 a second in SES's sandbox; set to the account's own out of it). None: no limit (SES throttles, and
    # the breaker holds the jobs).
    rate_limit: RateLimit | None = None

    def problems(self) -> list[str]:
        found = super().problems()
        if not EMAIL.fullmatch(self.default_address):
            found.append(f"mail sender {self.name!r}: default_address {self.default_address!r} is not an address")
        wrong = limit_problems(f"mail sender {self.name!r}", "rate_limit", self.rate_limit, RateLimit)
        found += wrong
        if self.rate_limit is not None and not wrong:
            found += self.rate_limit.problems(f"mail sender {self.name!r}")
        return found


@dataclass(frozen=True, kw_only=True)
class Network(Resource):
    """Subnets and security groups of the account's VPC, from its context key (required: there is no default
    network): a queue whose jobs name it runs its worker in them, to reach a database or a service inside the VPC.
    Its value is the IDs, comma-separated ("subnet-...,subnet-...,sg-..."); the grant is what Lambda needs to
    manage the worker's network interfaces there (docs/catalog.md, "Relational data and VPCs")."""

    published: ClassVar[bool] = False  # the account's own IDs: nothing a service needs from this stack


@dataclass(frozen=True, kw_only=True)
class AlarmTopic(Resource):
    """The stack's alarm topic (its ARN): a job may publish to it (e.g. a periodic report to the operators)."""

    published: ClassVar[bool] = False  # the stack's AlarmTopicArn output says it already


@dataclass(frozen=True, kw_only=True)
class DeadLetterQueues(Resource):
    """Every queue's DLQ, to read without consuming (receive, hand straight back, count): a JSON object of queue
    name -> {"dlq_url": ..., "worker_role_id": ...}, the role whose messages carry the runtime's evidence."""

    published: ClassVar[bool] = False  # each queue's parameters say it already


# Lambda's VpcConfig takes at most 16 subnets and 5 security groups (Lambda API reference, VpcConfig).
SUBNET_ID = re.compile(r"subnet-[0-9a-f]{8,17}")
SECURITY_GROUP_ID = re.compile(r"sg-[0-9a-f]{8,17}")
MAX_SUBNETS = 16
MAX_SECURITY_GROUPS = 5


@dataclass(frozen=True)
class NetworkPlacement:
    """Where a worker's network interfaces go: the subnets (one per availability zone it should survive losing)
    and the security groups that let it reach the database."""

    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]

    @classmethod
    def parse(cls, value: str | list[object]) -> NetworkPlacement:
        """From "subnet-a,subnet-b,sg-c" or a list of the IDs; each ID says what it is by its prefix. Raises
        ValueError naming what is wrong and what is accepted."""
        items = value.split(",") if isinstance(value, str) else list(value)
        subnets: list[str] = []
        groups: list[str] = []
        for item in items:
            text = item.strip() if isinstance(item, str) else item
            if isinstance(text, str) and SUBNET_ID.fullmatch(text):
                subnets.append(text)
            elif isinstance(text, str) and SECURITY_GROUP_ID.fullmatch(text):
                groups.append(text)
            else:
                raise ValueError(f"{text!r} is neither a subnet ID (subnet-<hex>) nor a security group ID (sg-<hex>)")
        subnets, groups = list(dict.fromkeys(subnets)), list(dict.fromkeys(groups))
        if not 1 <= len(subnets) <= MAX_SUBNETS or not 1 <= len(groups) <= MAX_SECURITY_GROUPS:
            raise ValueError(
                f"needs 1-{MAX_SUBNETS} subnet IDs and 1-{MAX_SECURITY_GROUPS} security group IDs, "
                f"not {len(subnets)} and {len(groups)}"
            )
        return cls(subnet_ids=tuple(subnets), security_group_ids=tuple(groups))

    def __str__(self) -> str:
        return ",".join((*self.subnet_ids, *self.security_group_ids))


# How long a worker keeps a secret's value before reading it again: a rotated secret reaches every worker within
# this time (AWS's Parameters and Secrets Lambda extension caches for the same 300 s by default).
SECRET_CACHE_S = 300
