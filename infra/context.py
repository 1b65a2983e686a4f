"""The stack's settings, read from CDK context (defaults in cdk.json, overrides with `cdk -c key=value`).

Pure (no CDK import): the app passes `app.node.try_get_context`. Nothing here reads the environment.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from infra.naming import physical_queue_name
from sqs_jobs.catalog import CATALOG, Catalog

STACK_NAME = "stack_name"
MAIL_SENDER = "mail_sender"
ALARM_EMAIL = "alarm_email"
RETAIN_DATA = "retain_data"
INVOICING_API_URL = "invoicing_api_url"
ALARM_TOPIC_ARN = "alarm_topic_arn"
CREATE_MAIL_IDENTITY = "create_mail_identity"
MAIL_SANDBOX_RECIPIENTS = "mail_sandbox_recipients"
CONTEXT_KEYS = (
    STACK_NAME,
    MAIL_SENDER,
    ALARM_EMAIL,
    RETAIN_DATA,
    INVOICING_API_URL,
    ALARM_TOPIC_ARN,
    CREATE_MAIL_IDENTITY,
    MAIL_SANDBOX_RECIPIENTS,
)

# CloudFormation's stack-name rule.
_STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
# An SES identity: an e-mail address, or a domain.
_DOMAIN = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}")
# An SNS topic ARN: partition, region, 12-digit account, topic name (SNS's name rule; FIFO checked apart).
_TOPIC_ARN = re.compile(r"arn:aws(-[a-z]+)*:sns:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?")
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")
# The CDK CLI passes cdk.json's context to the app; `python app.py` alone has none.
_UNSET = "is not set (cdk.json holds the defaults: run the app through the CDK CLI, e.g. `make synth`)"


class ContextError(ValueError):
    """The CDK context is missing a key or holds a bad value; the message lists every problem."""


@dataclass(frozen=True)
class StackContext:
    stack_name: str
    # Verified SES identity that the example job sends mail from.
    mail_sender: str
    # Where alarm notifications go by e-mail; None: no subscription (subscribe to the topic yourself).
    alarm_email: str | None
    # Keep tables, log groups and the alarm key when the stack is deleted.
    retain_data: bool
    # Base URL of the external invoicing API that generate_invoice calls (https, no trailing slash).
    invoicing_api_url: str
    # An existing SNS topic every alarm notifies instead of one the stack creates; None: the stack's own topic.
    alarm_topic_arn: str | None = None
    # Create the SES identity of mail_sender in the stack. Off by default: CloudFormation fails the whole deploy
    # when the identity already exists in the account (verified by hand, by another stack, or as its domain).
    create_mail_identity: bool = False
    # In the SES sandbox SES authorizes a send against each recipient's identity too: the verified recipients
    # (addresses or domains) the worker's grant must also name. Empty once the account has production access.
    mail_sandbox_recipients: tuple[str, ...] = ()

    @property
    def mail_sender_domain(self) -> str:
        return self.mail_sender.rpartition("@")[2]

    @classmethod
    def parse(cls, get: Callable[[str], object], catalog: Catalog = CATALOG) -> StackContext:
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
        mail_sender = text(MAIL_SENDER, required=True)
        if mail_sender and not _EMAIL.fullmatch(mail_sender):
            problems.append(f"{MAIL_SENDER} {mail_sender!r} is not an e-mail address")
        alarm_email = text(ALARM_EMAIL, required=False)
        if alarm_email and not _EMAIL.fullmatch(alarm_email):
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
        invoicing_api_url = text(INVOICING_API_URL, required=True)
        if invoicing_api_url:
            invoicing_api_url = _https_url(invoicing_api_url, INVOICING_API_URL, problems)
        if problems:
            raise ContextError("bad CDK context: " + "; ".join(problems))
        return cls(
            stack_name=stack_name,
            mail_sender=mail_sender,
            alarm_email=alarm_email or None,
            retain_data=retain_data,
            invoicing_api_url=invoicing_api_url,
            alarm_topic_arn=alarm_topic_arn or None,
            create_mail_identity=create_mail_identity,
            mail_sandbox_recipients=recipients,
        )


def _check_topic_arn(value: str, problems: list[str]) -> None:
    if not _TOPIC_ARN.fullmatch(value):
        problems.append(
            f"{ALARM_TOPIC_ARN} {value!r} is not an SNS topic ARN (arn:<partition>:sns:<region>:<account>:<topic>)"
        )
    elif value.endswith(".fifo"):
        # CloudWatch publishes alarm notifications without a message group ID, which a FIFO topic requires.
        problems.append(f"{ALARM_TOPIC_ARN} {value!r} is a FIFO topic; CloudWatch alarms need a standard topic")


def _https_url(value: str, key: str, problems: list[str]) -> str:
    """An https base URL with a host, without credentials, query or fragment; returned without a trailing '/'.
    Credentials would end up in a plain environment variable: API keys belong in a secret, not here."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        problems.append(f"{key} {value!r} is not a URL")
        return value
    if parts.scheme != "https" or not parts.hostname:
        problems.append(f"{key} {value!r} must be an https:// URL with a host")
    elif parts.username is not None or parts.password is not None:
        problems.append(f"{key} {value!r} must not carry credentials")
    elif parts.query or parts.fragment or "?" in value or "#" in value:
        problems.append(f"{key} {value!r} must be a base URL, without query or fragment")
    elif any(char.isspace() for char in value):
        problems.append(f"{key} {value!r} must not contain whitespace")
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
        if not isinstance(item, str) or not (_EMAIL.fullmatch(item) or _DOMAIN.fullmatch(item)):
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
