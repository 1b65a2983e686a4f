"""`jobctl schedules list | cancel NAME`: the stack's recurring schedules (from the catalog) and the pending
one-time schedules of delayed jobs, with their next run."""

from __future__ import annotations

import click

from sqs_jobs.cli.cli_globals import JobctlGroup
from sqs_jobs.cli.cli_support import Options, emit, fail, operator_errors
from sqs_jobs.cli.errors import EXIT_FAILED, EXIT_USAGE
from sqs_jobs.cli.schedule_list import list_schedules
from sqs_jobs.cli.shown import cell, console
from sqs_jobs.stack_names import ONE_TIME_PREFIX, schedule_group_name


@click.group(cls=JobctlGroup)
def schedules() -> None:
    """Recurring and one-time schedules: list them with their next run, cancel a pending one."""


@schedules.command("list")
@click.pass_obj
def list_(options: Options) -> None:
    """Every schedule of the stack's group, soonest first: recurring ones and pending one-time ones."""
    group = schedule_group_name(options.stack)
    with operator_errors():
        rows = list_schedules(options.client("scheduler"), options.stack).rows

    def table() -> None:
        from rich.table import Table

        if not rows:
            click.echo(f"no schedules in {group}")
            return
        view = Table(title=f"schedules of {options.stack} ({group})")
        for column in ("name", "kind", "job", "id", "queue", "expression", "next run", "state"):
            view.add_column(column)
        for row in rows:
            when = f"{row['expression']} {row['timezone']}" if row["timezone"] != "UTC" else row["expression"]
            view.add_row(
                cell(row["name"]),
                cell(row["kind"]),
                cell(row["job"] or ""),
                cell(row["id"] or ""),
                cell(row["queue"]),
                cell(when),
                cell(row["next_run"] or "never"),
                cell(row["state"]),
            )
        console().print(view)

    emit(options, {"group": group, "schedules": rows}, table)


@schedules.command()
@click.argument("name")
@click.pass_obj
def cancel(options: Options, name: str) -> None:
    """Cancel a pending one-time schedule (a delayed job): the job is never sent."""
    if not name.startswith(ONE_TIME_PREFIX):
        fail(
            f"{name!r} is not a one-time schedule (their names start {ONE_TIME_PREFIX!r}); recurring schedules come "
            "from the catalog: change it there and deploy",
            EXIT_USAGE,
        )
    group = schedule_group_name(options.stack)
    with operator_errors():
        scheduler = options.client("scheduler")
        try:
            scheduler.delete_schedule(Name=name, GroupName=group)
        except scheduler.exceptions.ResourceNotFoundException:
            fail(f"no pending schedule {name!r} in {group}: it already fired, or was cancelled", EXIT_FAILED)
    emit(options, {"cancelled": name, "group": group}, lambda: click.echo(f"cancelled {name}; the job won't be sent"))
