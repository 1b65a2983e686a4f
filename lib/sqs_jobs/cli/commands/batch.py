"""`jobctl batch show`: one batch's members by state, its callbacks and its times (sqs_jobs.cli.batch_lookup)."""

from __future__ import annotations

import click

from sqs_jobs.cli.cli_globals import JobctlGroup
from sqs_jobs.cli.cli_output import emit
from sqs_jobs.cli.cli_support import Options, operator_errors
from sqs_jobs.cli.shown import shown

# How many members of each state the text lists; JSON lists them all.
LISTED_PER_STATE = 20


@click.group(cls=JobctlGroup)
def batch() -> None:
    """Look up a batch: its members by state, its callbacks, and how long it took."""


@batch.command()
@click.argument("batch_id", metavar="ID")
@click.option(
    "--all", "show_all", is_flag=True, help=f"List every member of each state (default: the first {LISTED_PER_STATE})."
)
@click.pass_obj
def show(options: Options, batch_id: str, show_all: bool) -> None:
    """Batch ID's members by state (succeeded, dead-lettered, open), whether each callback was published and when,
    and when the batch was created, last moved and ended. A dead-lettered member resumes the batch when redriven
    (`jobctl dlq redrive QUEUE --match BATCH_ID`: the batch ID is in its members' bodies only); one cancelled
    before it ran has no dead letter: undo the cancel and publish it again as a member (runbook)."""
    from sqs_jobs.cli.batch_lookup import DEAD_STATE, OPEN_STATE, SUCCEEDED_STATE, batch_table, look_up_batch

    with operator_errors():
        table = batch_table(options.client("ssm"), options.stack)
        found = look_up_batch(options.client("dynamodb"), table, batch_id)

    def text() -> None:
        click.echo(shown(f"batch {found.batch_id}: {found.verdict}"))
        if found.description:
            click.echo(shown(f"  description: {found.description}"))
        click.echo(f"  created:     {found.created_at.isoformat(timespec='seconds')}")
        if found.last_ended_at is not None:
            click.echo(f"  last ended:  {found.last_ended_at.isoformat(timespec='seconds')}")
        if found.completed_at is not None:
            click.echo(
                f"  completed:   {found.completed_at.isoformat(timespec='seconds')} "
                f"({found.time_to_complete_s:g} s after it was created)"
            )
        for callback in found.callbacks:
            state = (
                f"published {callback.published_at.isoformat(timespec='seconds')}"
                if callback.published_at
                else "not published"
            )
            click.echo(shown(f"  {callback.kind}: {callback.job}:{callback.entity_id} ({state})"))
        for state in (SUCCEEDED_STATE, DEAD_STATE, OPEN_STATE):
            members = found.of_state(state)
            click.echo(f"  {state}: {len(members)}")
            listed = members if show_all else members[:LISTED_PER_STATE]
            for index, member in listed:
                click.echo(shown(f"    {index}: {member}"))
            if len(listed) < len(members):
                click.echo(f"    ... {len(members) - len(listed)} more (--all, or --output json)")

    emit(options, found.to_dict(), text)
