"""Chaos settings and the faults they inject into a real SES client (moto) and the fake invoicing API."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from click.testing import CliRunner
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ses.models import SESBackend, ses_backends

from example.standins.invoicing import IDEMPOTENCY_HEADER, FakeInvoicingApi
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.local.chaos import Chaos, ChaosSettings, ChaosSpecError
from sqs_jobs.worker.classify import Kind, classify
from sqs_jobs.worker.clients import ClientFactory, new_session
from sqs_jobs.worker.errors import HttpTransientError
from sqs_jobs.worker.http import HttpClient, HttpDeadlineError
from sqs_jobs.worker.time_limit import JobRun, JobRunner

SENDER = "jobs@example.com"


def test_parse_reads_every_setting() -> None:
    settings = ChaosSettings.parse("transient=0.2, hang=0.01,crash=0.01,duplicate=0.05,hang_s=3,seed=7")
    assert settings == ChaosSettings(transient=0.2, hang=0.01, crash=0.01, duplicate=0.05, hang_s=3.0, seed=7)
    assert "transient=0.2" in settings.describe() and "seed=7" in settings.describe()
    slow = ChaosSettings.parse("slow_start=0.3,slow_start_s=4,slow_store=0.02,slow_store_s=2.5,drip=0.1,drip_s=6")
    assert slow == ChaosSettings(
        slow_start=0.3, slow_start_s=4.0, slow_store=0.02, slow_store_s=2.5, drip=0.1, drip_s=6.0
    )
    # How long a slow fault lasts is said when the fault is on
    assert "slow_store=0.02" in slow.describe() and "slow_store_s=2.5" in slow.describe()
    assert "drip_s" not in settings.describe()


def test_parse_reads_the_runtime_fault_and_describe_names_it() -> None:
    settings = ChaosSettings.parse("transient=0.1, runtime=0.005,seed=3")
    assert settings == ChaosSettings(transient=0.1, runtime=0.005, seed=3)
    assert "runtime=0.005" in settings.describe()
    # Off unless asked, and said so
    assert ChaosSettings().runtime == 0.0 and "runtime=0.0" in ChaosSettings().describe()
    # Its own share of calls (the runtime's), not the jobs' calls that transient and hang split
    assert ChaosSettings.parse("transient=0.9,hang=0.1,runtime=1").runtime == 1.0


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
        ("slow_start=2", "between 0 and 1"),
        ("slow_store_s=-1", "slow_store_s=-1.0 must be above 0"),
        ("drip_s=901", "at most 900 seconds"),
        ("crash=0.1,crash=0.2", "given twice"),
        ("runtime=1.5", "between 0 and 1"),
        ("runtime=-0.01", "runtime=-0.01"),
        ("runtime=often", "chaos setting runtime='often' is not a number"),
        ("runtime_s=1", "bad chaos setting 'runtime_s=1'"),
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
    always = Chaos(
        ChaosSettings(transient=1.0, crash=1.0, duplicate=1.0, slow_start=1.0, slow_store=1.0, drip=1.0, seed=1)
    )
    assert [never.downstream_fault("ses") for _ in range(50)] == [None] * 50
    assert not never.crash_after(10) and not never.duplicate()
    assert (never.slow_start_s(), never.store_delay_s(), never.drip_s("api")) == (0.0, 0.0, 0.0)
    assert [always.downstream_fault("ses") for _ in range(50)] == ["transient"] * 50
    assert always.crash_after(1) and always.duplicate()
    assert not always.crash_after(0)  # nothing ran, nothing to crash after
    settings = always.settings
    assert (always.slow_start_s(), always.store_delay_s(), always.drip_s("api")) == (
        settings.slow_start_s,
        settings.slow_store_s,
        settings.drip_s,
    )
    assert always.injected() == {
        "transient.ses": 50,
        "crash": 1,
        "duplicate": 1,
        "slow_start": 1,
        "slow_store": 1,
        "drip.api": 1,
    }


def test_rates_split_the_calls_about_as_asked() -> None:
    chaos = Chaos(ChaosSettings(transient=0.2, hang=0.1, seed=3))
    faults = [chaos.downstream_fault("invoicing") for _ in range(10_000)]
    assert 1800 < faults.count("transient") < 2200
    assert 800 < faults.count("hang") < 1200


def in_a_job_run(call: Callable[[], Any]) -> Any:
    """`call` made from a job's run (a job thread, `current_run()` set), as a job's code makes its calls."""
    return JobRunner().run(JobRun(key="soak:1", limit_s=10.0, target=call, args=()))


@pytest.fixture
def aws() -> Iterator[tuple[ClientFactory, SESBackend]]:
    with mock_aws():
        clients = ClientFactory(session=new_session(region_name="us-east-1"))
        clients("ses").verify_email_identity(EmailAddress=SENDER)
        clients("dynamodb").create_table(
            TableName="orders",
            KeySchema=[{"AttributeName": "order_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "order_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield clients, ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]


def _send(client: Any) -> None:
    client.send_email(
        Source=SENDER,
        Destination={"ToAddresses": ["someone@example.com"]},
        Message={"Subject": {"Data": "hello"}, "Body": {"Text": {"Data": "hi"}}},
    )


def _read(client: Any) -> Any:
    return client.get_item(TableName="orders", Key={"order_id": {"S": "1"}})


def test_a_jobs_aws_calls_of_any_service_get_their_services_throttling_and_send_nothing(
    aws: tuple[ClientFactory, SESBackend],
) -> None:
    clients, backend = aws
    chaos = Chaos(ChaosSettings(transient=1.0))
    chaos.register_aws(clients)
    for call, code in ((lambda: _send(clients("ses")), "Throttling"), (lambda: _read(clients("dynamodb")), None)):
        with pytest.raises(ClientError) as caught:
            in_a_job_run(call)
        assert caught.value.response["Error"]["Code"] == (code or "ProvisionedThroughputExceededException")
        assert classify(caught.value).kind is Kind.TRANSIENT
    assert backend.sent_messages == []
    assert chaos.injected() == {"transient.ses": 1, "transient.dynamodb": 1}


def test_the_runtimes_own_calls_on_the_same_clients_are_never_failed(aws: tuple[ClientFactory, SESBackend]) -> None:
    clients, backend = aws
    chaos = Chaos(ChaosSettings(transient=1.0))
    chaos.register_aws(clients)
    # Outside a job's run (the record's thread: the idempotency table, the DLQ), and on bounded clients too
    _send(clients("ses"))
    _read(clients.within("dynamodb", 5.0))
    assert len(backend.sent_messages) == 1
    assert chaos.injected() == {}


def test_the_runtime_fault_throttles_the_runtimes_own_calls_and_never_a_jobs(
    aws: tuple[ClientFactory, SESBackend],
) -> None:
    clients, backend = aws
    chaos = Chaos(ChaosSettings(runtime=1.0))
    chaos.register_aws(clients)
    # The runtime's own calls: outside a job's run, on bounded clients too, each its service's throttling
    calls: list[tuple[Callable[[], Any], str]] = [
        (lambda: _read(clients.within("dynamodb", 5.0)), "ProvisionedThroughputExceededException"),
        (lambda: clients("sqs").list_queues(), "ThrottlingException"),
    ]
    for call, code in calls:
        with pytest.raises(ClientError) as caught:
            call()
        assert caught.value.response["Error"]["Code"] == code
        assert classify(caught.value).kind is Kind.TRANSIENT
    # A call the runtime makes from a run's thread on its own behalf (a cancel's read, a rate limit's lease)
    run = JobRun(key="soak:1", limit_s=10.0, target=lambda: None, args=())

    def on_the_runtimes_behalf() -> None:
        run.runtime_calling = True
        _read(clients("dynamodb"))

    run.target = on_the_runtimes_behalf
    with pytest.raises(ClientError):
        JobRunner().run(run)
    # A job's own calls go through
    in_a_job_run(lambda: _send(clients("ses")))
    assert len(backend.sent_messages) == 1
    assert chaos.injected() == {"runtime.dynamodb.GetItem": 2, "runtime.sqs.ListQueues": 1}


def test_an_injected_aws_hang_times_out_after_hang_s_and_sends_nothing(aws: tuple[ClientFactory, SESBackend]) -> None:
    clients, backend = aws
    Chaos(ChaosSettings(hang=1.0, hang_s=0.05)).register_aws(clients)
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError) as caught:
        in_a_job_run(lambda: _send(clients("ses")))
    assert time.monotonic() - started >= 0.05
    assert classify(caught.value).kind is Kind.TRANSIENT
    assert backend.sent_messages == []


def test_clients_of_other_factories_are_untouched(aws: tuple[ClientFactory, SESBackend]) -> None:
    clients, backend = aws
    Chaos(ChaosSettings(transient=1.0)).register_aws(clients)
    other = ClientFactory(session=new_session(region_name="us-east-1"))
    in_a_job_run(lambda: _send(other("ses")))
    assert len(backend.sent_messages) == 1


def _invoice(client: HttpClient, api: FakeInvoicingApi, key: str) -> Any:
    payload = {"invoice_id": "inv-1", "customer": "Aiko", "amount": "10", "currency": "EUR"}
    return client.request("POST", f"{api.url}/invoices", json=payload, idempotency_key=key)


def test_a_jobs_http_call_can_find_its_connection_refused_before_anything_is_sent() -> None:
    chaos = Chaos(ChaosSettings(transient=1.0))
    client = HttpClient(before_send=chaos.before_http_send)
    with FakeInvoicingApi() as api:
        with pytest.raises(HttpTransientError) as caught:
            in_a_job_run(lambda: _invoice(client, api, "k1"))
        assert isinstance(caught.value.__cause__, ConnectionRefusedError)
        assert api.requests_for("k1") == 0
        # The same client outside a job's run: sent, and answered
        assert _invoice(client, api, "k2").status == 201
    assert chaos.injected() == {"transient.http": 1}


def test_an_injected_http_hang_ends_in_the_calls_whole_call_timeout_having_sent_nothing() -> None:
    chaos = Chaos(ChaosSettings(hang=1.0, hang_s=30.0))
    client = HttpClient(connect_timeout_s=0.1, read_timeout_s=0.2, before_send=chaos.before_http_send)
    with FakeInvoicingApi() as api:
        started = time.monotonic()
        with pytest.raises(HttpDeadlineError):
            in_a_job_run(lambda: _invoice(client, api, "k1"))
        assert 0.3 <= time.monotonic() - started < 2.0  # the call's 0.3 s, not the hang's 30 s
        assert api.requests_for("k1") == 0


def test_a_dripping_answer_is_whole_when_the_call_has_time_and_cut_at_its_deadline_when_not() -> None:
    chaos = Chaos(ChaosSettings(drip=1.0, drip_s=1.0))
    with FakeInvoicingApi(chaos=chaos) as api:
        patient = HttpClient(connect_timeout_s=1.0, read_timeout_s=3.0)
        started = time.monotonic()
        answer = _invoice(patient, api, "k1")
        assert answer.status == 201 and answer.data.startswith(b"%PDF")
        assert time.monotonic() - started >= 0.9  # a byte at a time over drip_s
        # Each read waits well under its 0.3 s read timeout: only the whole-call deadline (0.5 s) ends the call
        hurried = HttpClient(connect_timeout_s=0.2, read_timeout_s=0.3, total_timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(HttpDeadlineError):
            _invoice(hurried, api, "k2")
        assert time.monotonic() - started < 0.9
        assert api.created_count("inv-1") == 2  # one per key: the work was done, the answer dripped
    assert chaos.injected() == {"drip.invoicing": 2}


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
