"""jobctl's aws-CLI-like surface: global options anywhere, --output, --query, --version, exit codes by type."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import botocore.exceptions
import click
import pytest
from click.testing import CliRunner, Result

from functions.catalog import CATALOG
from sqs_jobs.cli import cli_globals
from sqs_jobs.cli.cli import COMMANDS
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.cli_globals import DEFAULT_STACK, GlobalOption, Options
from sqs_jobs.cli.cli_support import exit_code_for
from sqs_jobs.cli.console.security import ConsoleBindError
from sqs_jobs.cli.discovery import DiscoveryError
from sqs_jobs.cli.dlq import BadFilterError, BadRateError, DlqError, MoveTaskFailedError, NoMoveTaskError
from sqs_jobs.cli.errors import EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, OperatorError
from sqs_jobs.cli.job_lookup import JobLookupError
from sqs_jobs.cli.queue_control import NoMappingError
from sqs_jobs.cli.scaffold import ScaffoldError
from sqs_jobs.cli.schedule_times import ScheduleExpressionError
from sqs_jobs.errors import EnvelopeFieldError, UnknownJobError
from sqs_jobs.publisher import InvalidDelayError, PartialPublishError, QueueNotConfiguredError
from sqs_jobs.specs import UnknownQueueError

GLOBAL = ("--profile", "--region", "--endpoint-url", "--stack", "--output", "--query", "--progress", "--debug")
CLEAN_ENV = {
    name: None for name in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_DEFAULT_OUTPUT")
}


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[Options]:
    """The Options each command calls AWS with; the call itself fails as an unreachable endpoint would."""
    calls: list[Options] = []

    def client(self: Options, service: str) -> Any:
        calls.append(self)
        raise cli_globals.EndpointError("stand-in: no AWS in unit tests")

    monkeypatch.setattr(Options, "client", client)
    return calls


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(jobctl, list(args), env={**CLEAN_ENV, **(env or {})}, prog_name="jobctl")


@pytest.mark.parametrize(
    ("args", "region"),
    [
        (["--region", "eu-west-1", "status"], "eu-west-1"),
        (["status", "--region", "eu-west-1"], "eu-west-1"),
        (["--region", "us-east-1", "status", "--region", "eu-west-1"], "eu-west-1"),
        (["dlq", "--region", "eu-west-2", "list", "orders"], "eu-west-2"),
        (["dlq", "list", "orders", "--region", "eu-west-3"], "eu-west-3"),
        (["--region", "a-1", "dlq", "--region", "b-1", "list", "--region", "c-1", "orders"], "c-1"),
        (["dlq", "--region", "b-1", "list", "orders"], "b-1"),
        (["enqueue", "orders", "order_confirmation", "1", "--region", "x-1"], "x-1"),
    ],
)
def test_a_global_option_goes_anywhere_and_the_last_one_wins(seen: list[Options], args: list[str], region: str) -> None:
    result = invoke(*args)
    assert result.exit_code == EXIT_UNREACHABLE, result.output
    assert [options.region for options in seen] == [region]


def test_every_global_option_is_read_after_the_subcommand(seen: list[Options]) -> None:
    result = invoke(
        "dlq",
        "list",
        "orders",
        "--profile",
        "ops",
        "--endpoint-url",
        "http://127.0.0.1:9",
        "--stack",
        "Other",
        "--output",
        "text",
        "--query",
        "total",
        "--no-progress",
    )
    assert result.exit_code == EXIT_UNREACHABLE
    [options] = seen
    assert (options.profile, options.endpoint_url, options.stack, options.output) == (
        "ops",
        "http://127.0.0.1:9",
        "Other",
        "text",
    )
    assert options.query_text == "total" and options.progress is False


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (None, None, None, DEFAULT_STACK, "table")),
        (
            {
                "AWS_PROFILE": "p",
                "AWS_DEFAULT_REGION": "r-2",
                "AWS_ENDPOINT_URL": "http://e",
                "AWS_DEFAULT_OUTPUT": "json",
            },
            ("p", "r-2", "http://e", DEFAULT_STACK, "json"),
        ),
        ({"AWS_REGION": "r-1", "AWS_DEFAULT_REGION": "r-2"}, (None, "r-1", None, DEFAULT_STACK, "table")),
    ],
)
def test_the_environment_gives_the_defaults(
    seen: list[Options], env: dict[str, str | None], expected: tuple[Any, ...]
) -> None:
    assert invoke("status", env=env).exit_code == EXIT_UNREACHABLE
    [options] = seen
    assert (options.profile, options.region, options.endpoint_url, options.stack, options.output) == expected


def test_the_command_line_beats_the_environment(seen: list[Options]) -> None:
    env: dict[str, str | None] = {"AWS_REGION": "env-1", "AWS_DEFAULT_OUTPUT": "json", "AWS_PROFILE": "env"}
    assert invoke("status", "--region", "cli-1", "--output", "text", "--profile", "cli", env=env).exit_code == 3
    [options] = seen
    assert (options.region, options.output, options.profile) == ("cli-1", "text", "cli")


def _all_commands() -> list[tuple[list[str], click.Command]]:
    found: list[tuple[list[str], click.Command]] = []
    ctx = click.Context(jobctl)

    def walk(path: list[str], command: click.Command) -> None:
        found.append((path, command))
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk([*path, name], sub)

    walk([], jobctl)
    return found


def test_every_command_takes_and_shows_the_global_options() -> None:
    commands = _all_commands()
    assert {" ".join(path) for path, _ in commands} >= {"", "status", "enqueue", "local", "dlq", "dlq list"}
    for path, command in commands:
        names = {opt for param in command.params if isinstance(param, GlobalOption) for opt in param.opts}
        assert names >= set(GLOBAL), path
        shown = invoke(*path, "--help")
        assert shown.exit_code == 0, path
        assert "Global options (before or after the command)" in shown.output
        for option in GLOBAL:
            assert option in shown.output, (path, option)


def test_the_registry_lists_each_command_with_its_own_short_help() -> None:
    listed = invoke("--help")
    assert listed.exit_code == 0
    ctx = click.Context(jobctl)
    for name, entry in COMMANDS.items():
        command = jobctl.get_command(ctx, name)
        assert command is not None
        assert click.Command(name, help=entry.help).get_short_help_str(200) == command.get_short_help_str(200)
        assert f"  {name}  " in listed.output
    assert "Exit codes:" in listed.output and "3  could not check" in listed.output


def test_an_unsupported_explicit_output_is_bad_usage_listing_the_choices() -> None:
    result = invoke("status", "--output", "yaml")
    assert result.exit_code == EXIT_USAGE
    assert "'table', 'json', 'text'" in result.output


def test_an_aws_default_output_jobctl_lacks_falls_back_to_table_with_one_warning(seen: list[Options]) -> None:
    result = invoke("status", env={"AWS_DEFAULT_OUTPUT": "yaml"})
    assert result.exit_code == EXIT_UNREACHABLE
    assert seen[0].output == "table"
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "jobctl: warning: AWS_DEFAULT_OUTPUT=yaml is not a jobctl output (table, json, text); using table"
    ]


def test_an_explicit_output_silences_the_aws_default_output_warning(seen: list[Options]) -> None:
    result = invoke("status", "--output", "json", env={"AWS_DEFAULT_OUTPUT": "yaml-stream"})
    assert result.exit_code == EXIT_UNREACHABLE
    assert "warning" not in result.stderr and seen[0].output == "json"


@pytest.mark.parametrize("expression", ["queues[", "a.b.", "`x", "[?"])
def test_an_invalid_query_is_bad_usage_naming_the_problem(expression: str) -> None:
    result = invoke("status", "--query", expression)
    assert result.exit_code == EXIT_USAGE
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert "--query" in error and repr(expression) in error and "is not a JMESPath expression" in error


def test_version_prints_the_installed_distributions_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output == f"jobctl {version('sqs-jobs')}\n"


def _client_error(code: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError({"Error": {"Code": code, "Message": "no"}}, "GetParameters")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UnknownQueueError("unknown queue 'x'"), EXIT_USAGE),
        (UnknownJobError("job 'x'"), EXIT_USAGE),
        (EnvelopeFieldError("field 'id' is empty"), EXIT_USAGE),
        (InvalidDelayError("delay"), EXIT_USAGE),
        (BadFilterError("--match is empty"), EXIT_USAGE),
        (BadRateError("--rate 0"), EXIT_USAGE),
        (ScaffoldError("job name 'X' must match"), EXIT_USAGE),
        (ConsoleBindError("host"), EXIT_USAGE),
        (JobLookupError("no table"), EXIT_UNREACHABLE),
        (NoMappingError("no mapping"), EXIT_UNREACHABLE),
        (botocore.exceptions.ParamValidationError(report="bad"), EXIT_USAGE),
        (DiscoveryError("no SSM parameter"), EXIT_UNREACHABLE),
        (QueueNotConfiguredError("no URL"), EXIT_UNREACHABLE),
        (cli_globals.EndpointError("bad URL"), EXIT_UNREACHABLE),
        (botocore.exceptions.NoCredentialsError(), EXIT_UNREACHABLE),
        (botocore.exceptions.NoRegionError(), EXIT_UNREACHABLE),
        (botocore.exceptions.ProfileNotFound(profile="x"), EXIT_UNREACHABLE),
        (botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"), EXIT_UNREACHABLE),
        (_client_error("AccessDenied"), EXIT_UNREACHABLE),
        (_client_error("ThrottlingException"), EXIT_UNREACHABLE),
        (PartialPublishError.__new__(PartialPublishError), EXIT_FAILED),
        (MoveTaskFailedError("failed"), EXIT_FAILED),
        (NoMoveTaskError("none running"), EXIT_FAILED),
        (DlqError("could not delete"), EXIT_FAILED),
        (ValueError("a bug"), None),
    ],
)
def test_an_errors_type_decides_its_exit_code(error: Exception, code: int | None) -> None:
    assert exit_code_for(error) == code


def test_every_error_jobctl_defines_is_an_operator_error_with_a_documented_exit_code() -> None:
    import importlib
    import inspect
    import pkgutil

    import sqs_jobs.cli

    modules = [
        importlib.import_module(f"sqs_jobs.cli.{info.name}")
        for info in pkgutil.iter_modules(sqs_jobs.cli.__path__)
        if not info.name.startswith(("local", "soak", "demo", "__main__"))
    ]
    errors = {
        item
        for module in modules
        for _, item in inspect.getmembers(module, inspect.isclass)
        if issubclass(item, Exception) and item.__module__ == module.__name__
    }
    # Parsing errors click reports itself (ScheduleExpressionError is caught and shown as a schedule's state).
    errors -= {ScheduleExpressionError}
    assert errors, "jobctl defines errors"
    for error in errors:
        assert issubclass(error, OperatorError), error
        assert error.exit_code in (EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE), error


def test_an_operator_error_is_one_line_without_the_quotes_of_a_key_error(seen: list[Options]) -> None:
    result = invoke("dlq", "list", "nosuch")
    assert result.exit_code == EXIT_USAGE
    queues = ", ".join(CATALOG.queue_names)
    assert result.stderr == f"jobctl: error: unknown queue 'nosuch'; the catalog has: {queues}\n"
    assert seen == []  # refused before any AWS call


def test_could_not_check_is_exit_3_and_one_line(seen: list[Options]) -> None:
    result = invoke("status", "orders")
    assert result.exit_code == EXIT_UNREACHABLE
    assert result.stderr.splitlines() == ["jobctl: error: stand-in: no AWS in unit tests"]
    assert result.stdout == ""


@pytest.mark.parametrize("args", [["--endpoint-url", "foo", "--region", "us-east-1"], ["--region", "us east"]])
def test_a_malformed_endpoint_or_region_is_could_not_check(args: list[str]) -> None:
    result = invoke("status", *args, env={"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"})
    assert result.exit_code == EXIT_UNREACHABLE
    [line] = result.stderr.splitlines()
    assert line.startswith("jobctl: error: ")
