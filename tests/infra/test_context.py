"""CDK context: the keys, cdk.json's defaults, and one error listing every bad value (pure, no synth)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cdk.context import CONTEXT_KEYS, ContextError, StackContext

GOOD: dict[str, object] = {
    "stack_name": "SqsJobs",
    "mail_sender": "jobs@example.com",
    "alarm_email": "",
    "retain_data": False,
    "invoicing_api_url": "https://invoicing.example.com",
    "alarm_topic_arn": "",
    "create_mail_identity": False,
    "mail_sandbox_recipients": [],
}
TOPIC_ARN = "arn:aws:sns:eu-west-1:123456789012:oncall-alarms"


def test_cdk_json_holds_a_default_for_every_key(cdk_context: dict[str, Any]) -> None:
    assert set(CONTEXT_KEYS) <= set(cdk_context)
    assert StackContext.parse(cdk_context.get, catalog=CATALOG) == StackContext(
        stack_name="SqsJobs",
        alarm_email=None,
        retain_data=False,
        alarm_topic_arn=None,
        # cdk.json sets the example's endpoint and sender to their catalog defaults.
        resource_settings={"mail_sender": "jobs@example.com", "invoicing_api_url": "https://invoicing.example.com"},
    )


@pytest.mark.parametrize(("raw", "expected"), [(True, True), ("true", True), ("False", False), ("0", False)])
def test_retain_data_accepts_json_booleans_and_command_line_strings(raw: object, expected: bool) -> None:
    assert StackContext.parse({**GOOD, "retain_data": raw}.get, catalog=CATALOG).retain_data is expected


def test_creating_the_mail_identity_is_a_choice_off_by_default() -> None:
    assert StackContext.parse(GOOD.get, catalog=CATALOG).create_mail_identity is False
    assert (
        StackContext.parse({**GOOD, "create_mail_identity": "true"}.get, catalog=CATALOG).create_mail_identity is True
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([], ()),
        ("", ()),
        (["qa@example.org", "example.net"], ("qa@example.org", "example.net")),
        ("qa@example.org, example.net,qa@example.org", ("qa@example.org", "example.net")),
    ],
)
def test_sandbox_recipients_come_as_a_list_or_a_comma_separated_string(raw: object, expected: tuple[str, ...]) -> None:
    assert (
        StackContext.parse({**GOOD, "mail_sandbox_recipients": raw}.get, catalog=CATALOG).mail_sandbox_recipients
        == expected
    )


@pytest.mark.parametrize("raw", ["not an address", ["ok@example.org", 7], {"a": 1}, "a@b.c,,"])
def test_a_bad_sandbox_recipient_is_named(raw: object) -> None:
    with pytest.raises(ContextError, match="mail_sandbox_recipients"):
        StackContext.parse({**GOOD, "mail_sandbox_recipients": raw}.get, catalog=CATALOG)


def test_alarm_email_is_optional() -> None:
    assert (
        StackContext.parse({**GOOD, "alarm_email": "ops@example.com"}.get, catalog=CATALOG).alarm_email
        == "ops@example.com"
    )
    assert StackContext.parse({**GOOD, "alarm_email": None}.get, catalog=CATALOG).alarm_email is None


def test_every_problem_is_reported_at_once() -> None:
    bad = {
        "stack_name": "1-stack",
        "mail_sender": "nobody",
        "alarm_email": "x@",
        "retain_data": "maybe",
        "invoicing_api_url": "http://invoicing.example.com",
    }

    with pytest.raises(ContextError) as raised:
        StackContext.parse(bad.get, catalog=CATALOG)

    message = str(raised.value)
    for key in (
        "stack_name '1-stack'",
        "mail_sender 'nobody'",
        "alarm_email 'x@'",
        "'retain_data' must be",
        "invoicing_api_url 'http://invoicing.example.com' must be an https:// URL",
    ):
        assert key in message


def test_missing_keys_point_at_cdk_json() -> None:
    nothing: dict[str, object] = {}

    expected = re.escape("'stack_name' is not set (cdk.json holds the defaults: run the app through")

    with pytest.raises(ContextError, match=expected):
        StackContext.parse(nothing.get, catalog=CATALOG)


def test_a_stack_name_too_long_for_the_queue_names_is_refused() -> None:
    with pytest.raises(ContextError, match="choose a shorter stack_name"):
        StackContext.parse({**GOOD, "stack_name": "S" * 76}.get, catalog=CATALOG)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://invoicing.example.com", "https://invoicing.example.com"),
        ("https://api.example.com/invoicing/v2/", "https://api.example.com/invoicing/v2"),
        ("  https://invoicing.example.com:8443  ", "https://invoicing.example.com:8443"),
    ],
)
def test_invoicing_api_url_is_an_https_base_url_without_trailing_slash(raw: str, expected: str) -> None:
    assert (
        StackContext.parse({**GOOD, "invoicing_api_url": raw}.get, catalog=CATALOG).resource_settings[
            "invoicing_api_url"
        ]
        == expected
    )


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("http://invoicing.example.com", "must be an https:// URL with a host"),
        ("invoicing.example.com", "must be an https:// URL with a host"),
        ("https://", "must be an https:// URL with a host"),
        ("https://user:secret@invoicing.example.com", "must not carry credentials"),
        ("https://invoicing.example.com/?key=1", "without query or fragment"),
        ("https://invoicing.example.com:99999", "is not a URL"),
        ("https://invoicing.example.com/a b", "must not contain whitespace"),
    ],
)
def test_a_bad_invoicing_api_url_is_refused(raw: str, problem: str) -> None:
    with pytest.raises(ContextError, match=re.escape(problem)):
        StackContext.parse({**GOOD, "invoicing_api_url": raw}.get, catalog=CATALOG)


def test_invoicing_api_url_must_be_a_string() -> None:
    with pytest.raises(ContextError, match="'invoicing_api_url' must be a string"):
        StackContext.parse({**GOOD, "invoicing_api_url": 443}.get, catalog=CATALOG)


@pytest.mark.parametrize(
    "arn",
    [
        TOPIC_ARN,
        "arn:aws-us-gov:sns:us-gov-west-1:123456789012:alarms",
        "arn:aws-cn:sns:cn-north-1:123456789012:Job_Alarms-1",
    ],
)
def test_alarm_topic_arn_names_an_existing_topic(arn: str) -> None:
    assert StackContext.parse({**GOOD, "alarm_topic_arn": f" {arn} "}.get, catalog=CATALOG).alarm_topic_arn == arn


def test_alarm_topic_arn_is_optional() -> None:
    assert StackContext.parse({**GOOD, "alarm_topic_arn": ""}.get, catalog=CATALOG).alarm_topic_arn is None
    assert StackContext.parse({**GOOD, "alarm_topic_arn": None}.get, catalog=CATALOG).alarm_topic_arn is None


@pytest.mark.parametrize(
    ("arn", "problem"),
    [
        ("oncall-alarms", "is not an SNS topic ARN"),
        ("arn:aws:sqs:eu-west-1:123456789012:oncall-alarms", "is not an SNS topic ARN"),
        ("arn:aws:sns:eu-west-1:12345:oncall-alarms", "is not an SNS topic ARN"),
        ("arn:aws:sns:eu-west-1:123456789012:", "is not an SNS topic ARN"),
        ("arn:aws:sns:eu-west-1:123456789012:on call", "is not an SNS topic ARN"),
        ("arn:aws:sns:eu-west-1:123456789012:alarms:subscription-id", "is not an SNS topic ARN"),
        ("arn:aws:sns:eu-west-1:123456789012:alarms.fifo", "is a FIFO topic"),
    ],
)
def test_a_bad_alarm_topic_arn_is_refused(arn: str, problem: str) -> None:
    with pytest.raises(ContextError, match=re.escape(problem)):
        StackContext.parse({**GOOD, "alarm_topic_arn": arn}.get, catalog=CATALOG)


def test_an_existing_topic_and_an_email_are_never_both_given() -> None:
    both = {**GOOD, "alarm_topic_arn": TOPIC_ARN, "alarm_email": "ops@example.com"}

    with pytest.raises(ContextError) as raised:
        StackContext.parse(both.get, catalog=CATALOG)

    # One problem, said once.
    assert str(raised.value).startswith("bad CDK context: alarm_topic_arn and alarm_email are both set, set only one")
    assert ";" not in str(raised.value)
