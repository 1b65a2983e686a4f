"""Chaos settings and the faults they inject into a real SES client (moto) and the fake invoicing API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from click.testing import CliRunner
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ses.models import SESBackend, ses_backends

from functions.worker.classify import Kind, classify
from jobctl.cli import main as jobctl
from jobctl.local.chaos import Chaos, ChaosSettings, ChaosSpecError
from jobctl.local.fake_invoicing import IDEMPOTENCY_HEADER, FakeInvoicingApi

SENDER = "jobs@example.com"


def test_parse_reads_every_setting() -> None:
    settings = ChaosSettings.parse("transient=0.2, hang=0.01,crash=0.01,duplicate=0.05,hang_s=3,seed=7")
    assert settings == ChaosSettings(transient=0.2, hang=0.01, crash=0.01, duplicate=0.05, hang_s=3.0, seed=7)
    assert "transient=0.2" in settings.describe() and "seed=7" in settings.describe()


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("", "empty chaos specification"),
        ("transient", "bad chaos setting 'transient'"),
        ("latency=0.1", "bad chaos setting 'latency=0.1'"),
        ("transient=lots", "is not a number"),
        ("seed=1.5", "is not an integer"),
        ("crash=1.5", "between 0 and 1"),
        ("duplicate=-0.1", "between 0 and 1"),
        ("transient=0.6,hang=0.6", "over 1"),
        ("hang_s=0", "hang_s"),
        ("crash=0.1,crash=0.2", "given twice"),
    ],
)
def test_bad_specs_get_one_line_naming_the_problem(spec: str, named: str) -> None:
    with pytest.raises(ChaosSpecError) as caught:
        ChaosSettings.parse(spec)
    assert named in str(caught.value)
    assert "\n" not in str(caught.value)


def test_cli_refuses_a_bad_chaos_spec_with_usage_exit_code() -> None:
    result = CliRunner().invoke(jobctl, ["local", "--port", "0", "--chaos", "transient=2"])
    assert result.exit_code == 2
    assert "--chaos" in result.output and "between 0 and 1" in result.output


def test_rates_of_zero_and_one_are_exact() -> None:
    never = Chaos(ChaosSettings(seed=1))
    always = Chaos(ChaosSettings(transient=1.0, crash=1.0, duplicate=1.0, seed=1))
    assert [never.downstream_fault("ses") for _ in range(50)] == [None] * 50
    assert not never.crash_after(10) and not never.duplicate()
    assert [always.downstream_fault("ses") for _ in range(50)] == ["transient"] * 50
    assert always.crash_after(1) and always.duplicate()
    assert not always.crash_after(0)  # nothing ran, nothing to crash after
    assert always.injected() == {"transient.ses": 50, "crash": 1, "duplicate": 1}


def test_rates_split_the_calls_about_as_asked() -> None:
    chaos = Chaos(ChaosSettings(transient=0.2, hang=0.1, seed=3))
    faults = [chaos.downstream_fault("invoicing") for _ in range(10_000)]
    assert 1800 < faults.count("transient") < 2200
    assert 800 < faults.count("hang") < 1200


@pytest.fixture
def ses() -> Iterator[tuple[boto3.session.Session, SESBackend]]:
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1")
        session.client("ses").verify_email_identity(EmailAddress=SENDER)
        yield session, ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]


def _send(client: Any) -> None:
    client.send_email(
        Source=SENDER,
        Destination={"ToAddresses": ["someone@example.com"]},
        Message={"Subject": {"Data": "hello"}, "Body": {"Text": {"Data": "hi"}}},
    )


def test_injected_ses_throttling_is_a_real_transient_client_error_and_sends_nothing(
    ses: tuple[boto3.session.Session, SESBackend],
) -> None:
    session, backend = ses
    Chaos(ChaosSettings(transient=1.0)).register_ses(session.events)
    with pytest.raises(ClientError) as caught:
        _send(session.client("ses"))
    assert caught.value.response["Error"]["Code"] == "Throttling"
    assert classify(caught.value).kind is Kind.TRANSIENT
    assert backend.sent_messages == []


def test_injected_ses_hang_times_out_after_hang_s_and_sends_nothing(
    ses: tuple[boto3.session.Session, SESBackend],
) -> None:
    session, backend = ses
    Chaos(ChaosSettings(hang=1.0, hang_s=0.05)).register_ses(session.events)
    with pytest.raises(ReadTimeoutError) as caught:
        _send(session.client("ses"))
    assert classify(caught.value).kind is Kind.TRANSIENT
    assert backend.sent_messages == []


def test_clients_of_other_sessions_are_untouched(ses: tuple[boto3.session.Session, SESBackend]) -> None:
    session, backend = ses
    Chaos(ChaosSettings(transient=1.0)).register_ses(session.events)
    _send(boto3.session.Session(region_name="us-east-1").client("ses"))
    assert len(backend.sent_messages) == 1


def _post_invoice(api: FakeInvoicingApi, key: str) -> int:
    body = json.dumps({"invoice_id": "inv-1", "customer": "Aiko", "amount": "10", "currency": "EUR"}).encode()
    request = urllib.request.Request(f"{api.url}/invoices", data=body, method="POST", headers={IDEMPOTENCY_HEADER: key})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_invoicing_transient_fault_is_a_503_that_creates_nothing() -> None:
    with FakeInvoicingApi(chaos=Chaos(ChaosSettings(transient=1.0))) as api:
        assert _post_invoice(api, "k1") == 503
        assert api.created_count() == 0


def test_invoicing_hang_creates_the_invoice_then_answers_late() -> None:
    chaos = Chaos(ChaosSettings(hang=1.0, hang_s=0.2))
    with FakeInvoicingApi(chaos=chaos) as api:
        assert _post_invoice(api, "k1") == 201
        assert _post_invoice(api, "k1") == 201  # the retry with the same key: the same invoice
        assert api.created_count("inv-1") == 1
    assert chaos.injected() == {"hang.invoicing": 2}
