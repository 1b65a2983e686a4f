"""`jobctl chain show`: each step of a chain, where it stopped and how to resume it (sqs_jobs.cli.chain_lookup)."""

from __future__ import annotations

import click

from sqs_jobs.cli.cli_globals import JobctlGroup
from sqs_jobs.cli.cli_output import emit
from sqs_jobs.cli.cli_support import Options, operator_errors
from sqs_jobs.cli.shown import shown


@click.group(cls=JobctlGroup)
def chain() -> None:
    """Look up a chain: each step's state, where it stopped and how to resume it."""


@chain.command()
@click.argument("chain_id", metavar="ID")
@click.pass_obj
def show(options: Options, chain_id: str) -> None:
    """Chain ID's steps in order, each succeeded, dead-lettered, cancelled (by an operator, before it ran),
    published (queued, running or retrying) or waiting; where a step stopped it, and what continues it: the redrive
    of a dead-lettered step, or for one cancelled before it ran (no dead letter) undoing the cancel and publishing
    it again as a member (runbook)."""
    from sqs_jobs.cli.batch_lookup import batch_table
    from sqs_jobs.cli.chain_lookup import look_up_chain

    with operator_errors():
        table = batch_table(options.client("ssm"), options.stack)
        found = look_up_chain(options.client("dynamodb"), table, chain_id, options.catalog())

    def text() -> None:
        click.echo(shown(f"chain {found.chain_id}: {found.verdict}"))
        if found.description:
            click.echo(shown(f"  description: {found.description}"))
        for step in found.steps:
            click.echo(shown(f"  {step.index + 1}. {step.name}: {step.state} (batch {step.batch_id})"))
            if step.cancel is not None:
                click.echo(shown(f"     its key cancelled {step.cancel.said()}"))

    emit(options, found.to_dict(), text)
