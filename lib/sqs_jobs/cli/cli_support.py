"""What jobctl's commands share beyond the global options: errors as one line with the exit code of their type,
the queues a command works on. Imports no boto3: Options.client does, when a command first calls AWS.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import click

from sqs_jobs.cli.cli_globals import Options
from sqs_jobs.cli.cli_output import emit, progress_bar
from sqs_jobs.cli.discovery import QueueLocation, find_queues
from sqs_jobs.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, OperatorError
from sqs_jobs.cli.shown import shown
from sqs_jobs.errors import EnvelopeError
from sqs_jobs.publisher import InvalidDelayError, PublishError, QueueNotConfiguredError
from sqs_jobs.specs import QueueSpec, UnknownQueueError

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Options",
    "confirm",
    "emit",
    "exit_code_for",
    "fail",
    "operator_errors",
    "progress_bar",
    "queues_of",
]

# The library's errors (sqs_jobs is installed by services and can't derive from jobctl's OperatorError): their
# exit codes. jobctl's own errors carry theirs (sqs_jobs.cli.errors).
_LIBRARY_EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (UnknownQueueError, EXIT_USAGE),
    (EnvelopeError, EXIT_USAGE),  # the job or ID given can't make a valid envelope (includes UnknownJobError)
    (InvalidDelayError, EXIT_USAGE),
    (QueueNotConfiguredError, EXIT_UNREACHABLE),
    (PublishError, EXIT_FAILED),
)


def exit_code_for(error: BaseException) -> int | None:
    """The exit code an error means, or None for a bug (left to show its traceback)."""
    if isinstance(error, OperatorError):
        return error.exit_code
    for kind, code in _LIBRARY_EXIT_CODES:
        if isinstance(error, kind):
            return code
    # Without an AWS call botocore was never imported, and the error can't be one of its.
    botocore_errors = sys.modules.get("botocore.exceptions")
    if botocore_errors is not None:
        if isinstance(error, botocore_errors.ParamValidationError):
            return EXIT_USAGE
        # Credentials, region, profile, endpoint, connection, throttling, access denied, any service error.
        if isinstance(error, botocore_errors.BotoCoreError | botocore_errors.ClientError):
            return EXIT_UNREACHABLE
    return None


def _message(error: BaseException) -> str:
    # A KeyError's str() is its repr (quoted): show its message as written.
    if isinstance(error, KeyError) and len(error.args) == 1 and isinstance(error.args[0], str):
        return error.args[0]
    return str(error)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """One line on stderr, then exit with `code`."""
    # The message may quote what a producer or a job wrote (an ID, an error): shown as text, one line.
    click.echo(f"jobctl: error: {shown(message)}", err=True)
    sys.exit(code)


@contextmanager
def operator_errors() -> Iterator[None]:
    """Errors an operator can act on as one line and their exit code (docs/jobctl.md), never a traceback."""
    try:
        yield
    except Exception as error:
        code = exit_code_for(error)
        if code is None:
            raise
        if _debugging():
            traceback.print_exc(file=sys.stderr)
        fail(_message(error), code)


def _debugging() -> bool:
    ctx = click.get_current_context(silent=True)
    return ctx is not None and isinstance(ctx.find_root().obj, Options) and ctx.find_root().obj.debug


def confirm(question: str, yes: bool) -> None:
    """Ask before a change; without a terminal, refuse unless `--yes` was given."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{question} - not confirmed: add --yes to run without a prompt")
    if not click.confirm(question, default=False):
        click.echo("nothing done")
        sys.exit(EXIT_OK)


def queues_of(options: Options, queue: str | None = None) -> list[tuple[QueueSpec, QueueLocation]]:
    """The catalog queue(s) asked for, with where the stack put them."""
    catalog = options.catalog()
    specs = [catalog.queue(queue)] if queue else list(catalog)
    locations = find_queues(options.client("ssm"), options.stack, catalog)
    return [(spec, locations[spec.name]) for spec in specs]
