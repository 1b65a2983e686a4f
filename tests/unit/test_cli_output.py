"""jobctl's outputs: the text flattening rule, --query on every output, and progress on stderr only, against
moto's mock_aws with the stack's resources provisioned as the local engine does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from click.testing import CliRunner, Result
from moto import mock_aws

from functions.catalog import CATALOG
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.cli_globals import Options
from sqs_jobs.cli.cli_output import emit, text_lines
from sqs_jobs.cli.errors import EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE
from sqs_jobs.local.provision import LocalDeployment, provision

REGION = "us-east-1"


def test_a_scalar_is_one_line() -> None:
    assert list(text_lines("x")) == ["x"]
    assert list(text_lines(3)) == ["3"]
    assert list(text_lines(None)) == ["None"]
    assert list(text_lines(True)) == ["True"]


def test_an_object_is_its_sorted_scalars_then_its_nested_values_prefixed_by_their_key() -> None:
    payload = {
        "total": 2,
        "queue": "orders",
        "groups": [
            {"count": 2, "jobs": ["a", "b"], "error_type": "E"},
            {"count": 1, "jobs": [], "extra": None},
        ],
        "meta": {"when": "now"},
    }
    assert list(text_lines(payload)) == [
        "orders\t2",
        # columns: the sorted union of the objects' scalar keys; a missing one is None
        "GROUPS\t2\tE\tNone",
        "JOBS\ta\tb",
        "GROUPS\t1\tNone\tNone",
        "META\tnow",
    ]


def test_lists_of_scalars_and_of_lists_are_lines() -> None:
    assert list(text_lines(["a", "b"])) == ["a\tb"]
    assert list(text_lines([["a", 1], ["b", 2]])) == ["a\t1", "b\t2"]
    assert list(text_lines([])) == []
    assert list(text_lines({})) == []


def test_a_value_stays_on_its_line() -> None:
    assert list(text_lines({"traceback": "line 1\n\tline 2", "path": "C:\\x"})) == ["C:\\\\x\tline 1\\n\\tline 2"]


def _emit(capsys: pytest.CaptureFixture[str], options: Options, payload: Any) -> str:
    emit(options, payload, lambda: print("TABLE"))
    return capsys.readouterr().out


def test_emit_prints_the_table_json_or_text(capsys: pytest.CaptureFixture[str]) -> None:
    payload = {"queues": [{"name": "orders", "backlog": 3}], "healthy": False}
    assert _emit(capsys, Options(output="table"), payload) == "TABLE\n"
    assert json.loads(_emit(capsys, Options(output="json"), payload)) == payload
    assert _emit(capsys, Options(output="text"), payload) == "False\nQUEUES\t3\torders\n"


def _query(expression: str, output: str) -> Options:
    import jmespath  # type: ignore[import-untyped]

    return Options(output=output, query=jmespath.compile(expression), query_text=expression)


def test_a_query_applies_to_the_json_payload_on_every_output(capsys: pytest.CaptureFixture[str]) -> None:
    payload = {"queues": [{"name": "orders", "backlog": 3}, {"name": "invoices", "backlog": 0}]}
    expression = "queues[?backlog > `0`].name"
    assert json.loads(_emit(capsys, _query(expression, "json"), payload)) == ["orders"]
    assert _emit(capsys, _query(expression, "text"), payload) == "orders\n"
    # With table, a query's result is printed as JSON: it has no table of its own.
    assert json.loads(_emit(capsys, _query(expression, "table"), payload)) == ["orders"]
    assert _emit(capsys, _query("queues[].[name, backlog]", "text"), payload) == "orders\t3\ninvoices\t0\n"


def test_a_query_that_fails_on_the_payload_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        emit(_query("length(total)", "json"), {"total": 4}, lambda: None)
    assert exited.value.code == EXIT_USAGE
    assert capsys.readouterr().err.startswith("jobctl: error: --query 'length(total)': In function length()")


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalDeployment]:
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_OUTPUT"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        session = boto3.session.Session(region_name=REGION)

        def client(service: str) -> Any:
            return session.client(service)  # type: ignore[call-overload]

        yield provision(client, catalog=CATALOG)


def _dead_letters(deployment: LocalDeployment, count: int) -> None:
    sqs = boto3.session.Session(region_name=REGION).client("sqs")
    for number in range(count):
        body = json.dumps({"job": "order_confirmation", "id": str(900 + number)})
        sqs.send_message(QueueUrl=deployment.queues["orders"].dlq_url, MessageBody=body)


def run(*args: str) -> Result:
    return CliRunner().invoke(jobctl, list(args), prog_name="jobctl", env={"COLUMNS": "200"})


@pytest.mark.slow
def test_forced_progress_goes_to_stderr_and_stdout_stays_json(deployment: LocalDeployment) -> None:
    _dead_letters(deployment, 12)
    listed = run("dlq", "list", "orders", "--output", "json", "--progress")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout)["total"] == 12
    assert "reading the DLQ of orders" in listed.stderr

    discarded = run("--progress", "dlq", "discard", "orders", "--yes", "--limit", "5", "--output", "json")
    assert discarded.exit_code == 0, discarded.output
    assert json.loads(discarded.stdout)["discarded"] == 5
    assert "discarding from the DLQ of orders" in discarded.stderr

    redriven = run("dlq", "redrive", "orders", "--yes", "--no-verify", "--output", "json", "--progress")
    assert redriven.exit_code == 0, redriven.output
    assert json.loads(redriven.stdout)["moved"] == 7
    assert "moving to orders" in redriven.stderr


@pytest.mark.slow
def test_progress_is_hidden_when_stderr_is_not_a_terminal(deployment: LocalDeployment) -> None:
    _dead_letters(deployment, 3)
    listed = run("dlq", "list", "orders", "--output", "json")
    assert listed.exit_code == 0
    assert listed.stderr == ""
    assert json.loads(listed.stdout)["total"] == 3


@pytest.mark.slow
def test_text_output_of_a_dlq_listing(deployment: LocalDeployment) -> None:
    _dead_letters(deployment, 2)
    result = run("dlq", "list", "orders", "--group-by", "job", "--output", "text")
    assert result.exit_code == 0, result.output
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert lines[0] == ["job", "orders", "2"]  # group_by, queue, total: the sorted keys
    assert lines[1][0] == "GROUPS" and lines[1][1] == "2"  # count first: the sorted scalar keys
    assert lines[2] == ["JOBS", "order_confirmation"]


@pytest.mark.slow
def test_query_on_a_real_command(deployment: LocalDeployment) -> None:
    _dead_letters(deployment, 2)
    result = run("dlq", "list", "orders", "--query", "groups[0].count", "--output", "text")
    assert result.exit_code == 0, result.output
    assert result.stdout == "2\n"


def test_status_exits_1_when_unhealthy_and_3_when_it_could_not_read(deployment: LocalDeployment) -> None:
    _dead_letters(deployment, 1)
    unhealthy = run("status", "orders", "--output", "json")
    assert unhealthy.exit_code == EXIT_FAILED, unhealthy.output
    assert json.loads(unhealthy.stdout)["healthy"] is False
    unreadable = run("status", "--stack", "NotDeployed")
    assert unreadable.exit_code == EXIT_UNREACHABLE
    assert unreadable.stderr.splitlines()[0].startswith("jobctl: error: stack 'NotDeployed' has no SSM parameter")
    assert unreadable.stdout == ""


def test_the_soaks_progress_shows_on_stderr_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    from example.soak import _progress

    with _progress(False, 10) as hidden:
        assert hidden is None
    with _progress(True, 10) as shown:
        assert shown is not None
        shown(10, 4)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "soak: 10 published, jobs settled" in captured.err and "4/10" in captured.err


def test_a_key_that_is_an_object_in_one_record_and_null_in_another_is_never_a_column() -> None:
    # `jobctl job list --output text`: one running job has progress, another none.
    lines = list(text_lines([{"id": "a", "progress": None}, {"id": "b", "progress": {"done": 1, "total": 2}}]))

    assert lines == ["a", "b", "PROGRESS\t1\t2"]
    assert not any("{" in line for line in lines)
