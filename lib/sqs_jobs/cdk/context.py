"""The stack's settings, read from CDK context (defaults in cdk.json, overrides with `cdk -c key=value`).

Pure (no CDK import): the app passes `app.node.try_get_context`. Nothing here reads the environment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqs_jobs.cdk.naming import physical_queue_name
from sqs_jobs.resources import (
    EMAIL,
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
    https_base_url_problem,
)
from sqs_jobs.specs import Catalog

STACK_NAME = "stack_name"
ALARM_EMAIL = "alarm_email"
RETAIN_DATA = "retain_data"
ALARM_TOPIC_ARN = "alarm_topic_arn"
CREATE_MAIL_IDENTITY = "create_mail_identity"
MAIL_SANDBOX_RECIPIENTS = "mail_sandbox_recipients"
# The stack's own settings. Each catalog resource has a context key too, its name (`resource_settings`).
CONTEXT_KEYS = (
    STACK_NAME,
    ALARM_EMAIL,
    RETAIN_DATA,
    ALARM_TOPIC_ARN,
    CREATE_MAIL_IDENTITY,
    MAIL_SANDBOX_RECIPIENTS,
)

# CloudFormation's stack-name rule.
_STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")
# An SES identity: an e-mail address, or a domain.
_DOMAIN = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}")
# An SNS topic ARN: partition, region, 12-digit account, topic name (SNS's name rule; FIFO checked apart).
_TOPIC_ARN = re.compile(r"arn:aws(-[a-z]+)*:sns:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?")
# DynamoDB's table names, S3's bucket names, Secrets Manager's secret names (each service's naming rule).
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
_TABLE_ARN = re.compile(r"arn:aws(-[a-z]+)*:dynamodb:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:table/[A-Za-z0-9_.-]{3,255}")
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# Plus '!': the secrets RDS manages for a database's master user are named `rds!db-<id>` or `rds!cluster-<id>`.
_SECRET_NAME = re.compile(r"[A-Za-z0-9/_+=.@!-]{1,512}")
_SECRET_ARN = re.compile(
    r"arn:aws(-[a-z]+)*:secretsmanager:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@!-]{1,512}-[A-Za-z0-9]{6}"
)
# Parameter Store's names: letters, digits, '.', '-', '_', with '/' between hierarchy levels; a name with a '/'
# starts with one.
_PARAMETER_NAME = re.compile(r"(/[A-Za-z0-9_.-]+)+|[A-Za-z0-9_.-]{1,2048}")
_PARAMETER_ARN = re.compile(
    r"arn:aws(-[a-z]+)*:ssm:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:parameter/[A-Za-z0-9_./-]{1,2048}"
)
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")
# The CDK CLI passes cdk.json's context to the app; `python app.py` alone has none.
_UNSET = "is not set (cdk.json holds the defaults: run the app through the CDK CLI, e.g. `cdk synth`)"


class ContextError(ValueError):
    """The CDK context is missing a key or holds a bad value; the message lists every problem."""


@dataclass(frozen=True)
class StackContext:
    stack_name: str
    # Where alarm notifications go by e-mail; None: no subscription (subscribe to the topic yourself).
    alarm_email: str | None
    # Keep tables, log groups and the alarm key when the stack is deleted.
    retain_data: bool
    # An existing SNS topic every alarm notifies instead of one the stack creates; None: the stack's own topic.
    alarm_topic_arn: str | None = None
    # Create the SES identity of each mail sender resource in the stack. Off by default: CloudFormation fails the
    # whole deploy when the identity already exists in the account (verified by hand, by another stack, or as its
    # domain).
    create_mail_identity: bool = False
    # In the SES sandbox SES authorizes a send against each recipient's identity too: the verified recipients
    # (addresses or domains) the worker's grant must also name. Empty once the account has production access.
    mail_sandbox_recipients: tuple[str, ...] = ()
    # Per catalog resource whose context key is set: an existing table, bucket or secret (its name or ARN), an
    # endpoint's URL, the mail sender's address; a network's IDs (always: a network has no default). Absent: the
    # stack creates it, or the catalog's default applies.
    resource_settings: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, get: Callable[[str], object], catalog: Catalog) -> StackContext:
        """Read each key with `get` (`app.node.try_get_context`); one ContextError lists every problem."""
        problems: list[str] = []

        def text(key: str, *, required: bool) -> str:
            value = get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                if required:
                    problems.append(f"context key {key!r} {_UNSET}")
                return ""
            if not isinstance(value, str):
                problems.append(f"context key {key!r} must be a string, not {value!r}")
                return ""
            return value.strip()

        stack_name = text(STACK_NAME, required=True)
        if stack_name:
            if not _STACK_NAME.fullmatch(stack_name):
                rule = "must start with a letter and hold only letters, digits and '-'"
                problems.append(f"{STACK_NAME} {stack_name!r} {rule}")
            else:
                for queue in catalog:
                    try:
                        physical_queue_name(stack_name, queue.name, dlq=True, fifo=queue.fifo)
                    except ValueError as exc:
                        problems.append(f"{STACK_NAME}: {exc}")
        alarm_email = text(ALARM_EMAIL, required=False)
        if alarm_email and not EMAIL.fullmatch(alarm_email):
            problems.append(f"{ALARM_EMAIL} {alarm_email!r} is not an e-mail address (or leave it empty)")
        alarm_topic_arn = text(ALARM_TOPIC_ARN, required=False)
        if alarm_topic_arn:
            _check_topic_arn(alarm_topic_arn, problems)
            if alarm_email:
                # Props take an existing resource or the settings of a new one, never both.
                problems.append(
                    f"{ALARM_TOPIC_ARN} and {ALARM_EMAIL} are both set, set only one: with {ALARM_TOPIC_ARN} the "
                    f"alarms notify your topic (subscribe to it where it is managed), with {ALARM_EMAIL} the stack "
                    "creates a topic and subscribes that address"
                )
        retain_data = _flag(get(RETAIN_DATA), RETAIN_DATA, problems)
        create_mail_identity = _flag(get(CREATE_MAIL_IDENTITY), CREATE_MAIL_IDENTITY, problems)
        recipients = _identities(get(MAIL_SANDBOX_RECIPIENTS), MAIL_SANDBOX_RECIPIENTS, problems)
        resource_settings: dict[str, str] = {}
        for resource in catalog.resources:
            if resource.name in CONTEXT_KEYS:
                problems.append(
                    f"resource {resource.name!r} has the name of the stack's own context key; rename the resource"
                )
                continue
            if isinstance(resource, Network):
                placement = _network(get(resource.name), resource, problems)
                if placement is not None:
                    resource_settings[resource.name] = str(placement)
                continue
            value = text(resource.name, required=False)
            if value:
                resource_settings[resource.name] = _resource_setting(resource, value, problems)
            elif isinstance(resource, Secret) and resource.store is SecretStore.PARAMETER_STORE:
                problems.append(
                    f"context key {resource.name!r} is not set: the Secret {resource.name!r} is an SSM SecureString, "
                    f"which CloudFormation can't create; create it (aws ssm put-parameter --type SecureString "
                    f"--name ...) and name it, e.g. -c {resource.name}=/my-team/api-key"
                )
        if problems:
            raise ContextError("bad CDK context: " + "; ".join(problems))
        return cls(
            stack_name=stack_name,
            alarm_email=alarm_email or None,
            retain_data=retain_data,
            alarm_topic_arn=alarm_topic_arn or None,
            create_mail_identity=create_mail_identity,
            mail_sandbox_recipients=recipients,
            resource_settings=resource_settings,
        )


def _resource_setting(resource: Resource, value: str, problems: list[str]) -> str:
    """A resource's context value, checked against its kind's rule; a problem names what is accepted."""
    key = resource.name
    if isinstance(resource, Endpoint):
        return _https_url(value, key, problems)
    accepted: str | None = None
    if isinstance(resource, MailSender) and not EMAIL.fullmatch(value):
        accepted = "an e-mail address (the verified SES identity mail is sent from)"
    elif isinstance(resource, Table) and not (_TABLE_NAME.fullmatch(value) or _TABLE_ARN.fullmatch(value)):
        accepted = "an existing DynamoDB table's name (3-255 of A-Z a-z 0-9 _ . -) or ARN, or empty to create one"
    elif isinstance(resource, Bucket) and not _BUCKET_NAME.fullmatch(value):
        accepted = "an existing S3 bucket's name (3-63 of a-z 0-9 . -), or empty to create one"
    elif isinstance(resource, Secret) and resource.store is SecretStore.PARAMETER_STORE:
        if not (_PARAMETER_NAME.fullmatch(value) or _PARAMETER_ARN.fullmatch(value)):
            accepted = "an existing SecureString parameter's name (e.g. /my-team/api-key) or ARN"
    elif isinstance(resource, Secret) and not (_SECRET_NAME.fullmatch(value) or _SECRET_ARN.fullmatch(value)):
        accepted = "an existing secret's name or complete ARN (Secrets Manager), or empty to create one"
    elif isinstance(resource, (AlarmTopic, DeadLetterQueues)):
        accepted = f"nothing: the stack provides its {resource.kind} itself (remove the context key)"
    if accepted is not None:
        problems.append(f"{key} {value!r} is not accepted for the {resource.kind} {key!r}: use {accepted}")
    return value


def _network(value: object, resource: Network, problems: list[str]) -> NetworkPlacement | None:
    """A network's subnets and security groups: a JSON list (cdk.json) or a comma-separated string (`-c`)."""
    key = resource.name
    example = f"e.g. -c {key}=subnet-0123456789abcdef0,subnet-0fedcba9876543210,sg-0123456789abcdef0"
    if value is None or value in ("", []):
        problems.append(
            f"context key {key!r} is not set: the Network {key!r} needs the subnet and security group IDs its "
            f"worker runs in ({example})"
        )
        return None
    if not isinstance(value, str | list):
        problems.append(f"{key} must be a list of IDs or a comma-separated string, not {value!r}")
        return None
    try:
        return NetworkPlacement.parse(value)
    except ValueError as exc:
        problems.append(f"{key}: {exc} ({example})")
        return None


def _check_topic_arn(value: str, problems: list[str]) -> None:
    if not _TOPIC_ARN.fullmatch(value):
        problems.append(
            f"{ALARM_TOPIC_ARN} {value!r} is not an SNS topic ARN (arn:<partition>:sns:<region>:<account>:<topic>)"
        )
    elif value.endswith(".fifo"):
        # CloudWatch publishes alarm notifications without a message group ID, which a FIFO topic requires.
        problems.append(f"{ALARM_TOPIC_ARN} {value!r} is a FIFO topic; CloudWatch alarms need a standard topic")


def _https_url(value: str, key: str, problems: list[str]) -> str:
    """An https base URL (the rule the catalog's endpoint defaults follow too); without a trailing '/'."""
    problem = https_base_url_problem(value)
    if problem is not None:
        problems.append(f"{key} {value!r} {problem}")
    return value.rstrip("/")


def _identities(value: object, key: str, problems: list[str]) -> tuple[str, ...]:
    """SES identities from a JSON list (cdk.json) or a comma-separated string (`-c key=a@x.com,example.org`)."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        items: list[object] = [item.strip() for item in value.split(",")]
    elif isinstance(value, list):
        items = list(value)
    else:
        problems.append(f"{key} must be a list of addresses or domains, or a comma-separated string, not {value!r}")
        return ()
    found: list[str] = []
    for item in items:
        if not isinstance(item, str) or not (EMAIL.fullmatch(item) or _DOMAIN.fullmatch(item)):
            problems.append(f"{key}: {item!r} is not an e-mail address or a domain")
        elif item not in found:
            found.append(item)
    return tuple(found)


def _flag(value: object, key: str, problems: list[str]) -> bool:
    # `cdk -c retain_data=true` arrives as a string, cdk.json as a JSON boolean.
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    if value is None:
        problems.append(f"context key {key!r} {_UNSET}")
    else:
        problems.append(f"context key {key!r} must be true or false, not {value!r}")
    return False
