"""`jobctl job show JOB ID`: what became of one job (jobctl/job_lookup.py)."""

from __future__ import annotations

import click

from jobctl.cli_globals import JobctlGroup, complete_job
from jobctl.cli_support import Options, emit, fail, operator_errors, queues_of
from jobctl.errors import EXIT_USAGE
from jobctl.job_lookup import lookup
from jobctl.shown import shown
from sqs_jobs.catalog import CATALOG


@click.group(cls=JobctlGroup)
def job() -> None:
    """Look up one job by its name and ID."""


@job.command()
@click.argument("name", metavar="JOB", shell_complete=complete_job)
@click.argument("entity_id", metavar="ID")
@click.option("--key", help="The idempotency key, if the publisher chose one (default: the job's own, from the ID).")
@click.pass_obj
def show(options: Options, name: str, entity_id: str, key: str | None) -> None:
    """Whether JOB ID completed (when, and until when a redelivery is skipped), is running, or sits in the DLQ."""
    try:
        queue = CATALOG.queue_for_job(name).name
    except KeyError:
        fail(f"unknown job {name!r}; accepted: {', '.join(CATALOG.job_names)}", EXIT_USAGE)
    with operator_errors():
        [(spec, where)] = queues_of(options, queue)
        found = lookup(options.client, spec, where, name, entity_id, key)

    def text() -> None:
        click.echo(shown(f"{name}:{entity_id} on {queue}: {found.verdict}"))
        click.echo(shown(f"  {found.explanation()}"))
        click.echo(shown(f"  idempotency key: {found.idempotency_key}"))
        record = found.record
        if record is not None:
            if record.completed_at is not None:
                click.echo(f"  completed at:     {record.completed_at.isoformat(timespec='seconds')}")
            click.echo(f"  remembered until: {record.remembered_until.isoformat(timespec='seconds')}")
            if record.in_progress_until is not None:
                click.echo(f"  key held until:   {record.in_progress_until.isoformat(timespec='seconds')}")
        for letter in found.dead_letters:
            click.echo(shown(f"  dead letter {letter.message_id}: {letter.error_type}: {letter.error_message}"))

    emit(options, found.to_dict(), text)
