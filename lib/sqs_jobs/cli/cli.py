"""`jobctl`: the operator's command line. Behaves like the `aws` CLI: global options anywhere on the line,
`--output json|table|text`, `--query`, one-line errors, documented exit codes (docs/jobctl.md).

Subcommands are imported when used: help, `--version` and shell completion of the command names load neither
boto3 nor moto.
"""

from __future__ import annotations

from typing import Any

import click

from sqs_jobs.cli.cli_globals import EXIT_CODES_HELP, LazyCommand, LazyGroup, print_version

# The short help is the first sentence of the command's docstring (a unit test keeps them equal).
COMMANDS = {
    "batch": LazyCommand(
        "sqs_jobs.cli.commands.batch:batch",
        "Look up a batch: its members by state, its callbacks, and how long it took.",
    ),
    "bundle": LazyCommand(
        "sqs_jobs.cli.commands.bundle:bundle",
        "Build the workers' layer: the framework's worker and the jobs' packages, for Lambda's python3.13 on arm64.",
    ),
    "chain": LazyCommand(
        "sqs_jobs.cli.commands.chain:chain",
        "Look up a chain: each step's state, where it stopped and how to resume it.",
    ),
    "console": LazyCommand(
        "sqs_jobs.cli.commands.console:console",
        "Serve the operator console: queues, dead letters, redrive, discard, pause, in the browser.",
    ),
    "dlq": LazyCommand(
        "sqs_jobs.cli.commands.dlq:dlq", "Triage a queue's dead-letter queue: list, show, redrive, discard."
    ),
    "enqueue": LazyCommand(
        "sqs_jobs.cli.commands.enqueue:enqueue", 'Publish one job to QUEUE: {"job": JOB, "id": ID}.'
    ),
    "init": LazyCommand(
        "sqs_jobs.cli.commands.init:init",
        "Write a new project: the catalog with one queue and one job, its test, the CDK app and a README.",
    ),
    "job": LazyCommand(
        "sqs_jobs.cli.commands.job:job",
        "Look up one job, list the jobs in flight, cancel one, send an event to a waiting durable job.",
    ),
    "local": LazyCommand(
        "sqs_jobs.cli.commands.local:local",
        "Run the local engine: moto server + the real workers behind an SQS event source emulator, every resource "
        "of the catalog, and a stand-in of each endpoint that declares one.",
    ),
    "new": LazyCommand(
        "sqs_jobs.cli.commands.new:new", "Scaffold a job: its module and its test, in the project's style."
    ),
    "queue": LazyCommand(
        "sqs_jobs.cli.commands.queue:queue",
        "Pause or resume a queue's worker: jobs wait in the queue, nothing is lost.",
    ),
    "schedules": LazyCommand(
        "sqs_jobs.cli.commands.schedules:schedules",
        "Recurring and one-time schedules: list them with their next run, cancel a pending one.",
    ),
    "stats": LazyCommand(
        "sqs_jobs.cli.commands.stats:stats",
        "Runs processed, failed, retried and dead-lettered per period, and copies cancelled, from the workers' "
        "metrics.",
    ),
    "status": LazyCommand(
        "sqs_jobs.cli.commands.status:status",
        "Backlog, in flight, oldest message age, DLQ depth, failure rate and liveness of each queue, each priority "
        "lane's backlog, in flight and oldest age, and its flow limits (an unkeyed rate limit's free tokens now).",
    ),
}


class _Root(LazyGroup):
    def invoke(self, ctx: click.Context) -> Any:
        # Imported here, when a command runs: the errors' types come from modules help doesn't need.
        from sqs_jobs.cli.cli_support import operator_errors

        # Any command's operator errors, wherever raised: one line and their exit code.
        with operator_errors():
            return super().invoke(ctx)


@click.group(
    cls=_Root,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EXIT_CODES_HELP + "\nReference: docs/jobctl.md. Completion: _JOBCTL_COMPLETE=bash_source jobctl.",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=print_version,
    help="Print jobctl's version and exit.",
)
def main() -> None:
    """Operate background-job queues: publish, watch, triage and redrive (AWS or the local engine)."""
