"""`jobctl enqueue`'s three ways of saying when (--delay, --in, --at): two together are refused before any AWS
call, zeros included; one alone goes on to publish (here to an endpoint where nothing listens)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result

from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.errors import EXIT_UNREACHABLE, EXIT_USAGE
from sqs_jobs.local.engine import free_port

# Nothing listens there: a command that gets as far as calling AWS exits EXIT_UNREACHABLE.
CLOSED_ENDPOINT = f"http://127.0.0.1:{free_port()}"
ENV = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_MAX_ATTEMPTS": "1",
    "AWS_PROFILE": None,
}


def enqueue(*args: str) -> Result:
    return CliRunner().invoke(
        jobctl,
        ["enqueue", "orders", "order_confirmation", "1", *args, "--endpoint-url", CLOSED_ENDPOINT],
        env=ENV,
        prog_name="jobctl",
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--delay", "0", "--at", "2026-12-24T09:00:00Z"], "--delay and --at"),  # the zero used to be dropped
        (["--delay", "0", "--in", "2h"], "--delay and --in"),
        (["--in", "0s", "--at", "2026-12-24T09:00:00Z"], "--in and --at"),
        (["--delay", "5", "--in", "10m", "--at", "2026-12-24T09:00:00Z"], "--delay and --in and --at"),
    ],
)
def test_two_ways_of_saying_when_are_refused_before_any_call(args: list[str], named: str) -> None:
    result = enqueue(*args)

    assert result.exit_code == EXIT_USAGE, result.output
    assert f"give at most one of --delay, --in and --at, not {named}" in result.stderr


@pytest.mark.parametrize("args", [["--delay", "0"], ["--in", "10m"], []])
def test_one_way_alone_goes_on_to_publish(args: list[str]) -> None:
    result = enqueue(*args)

    assert result.exit_code == EXIT_UNREACHABLE, result.output


def test_a_priority_the_queue_has_no_lane_for_is_refused_before_any_call() -> None:
    """docs/priorities.md: `--priority` names one of the queue's lanes; the example's orders queue has none."""
    result = enqueue("--priority", "high")

    assert result.exit_code == EXIT_USAGE, result.output
    assert "'high' is not a priority lane of queue 'orders'; it has no priority lanes" in result.stderr
