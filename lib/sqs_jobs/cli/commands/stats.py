"""`jobctl stats [QUEUE]`: runs processed and failed per period (sqs_jobs.cli.job_counts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from sqs_jobs.cli.cli_globals import JobctlCommand, complete_queue
from sqs_jobs.cli.cli_support import Options, emit, operator_errors
from sqs_jobs.cli.shown import cell, console


@click.command(cls=JobctlCommand)
@click.argument("queue", required=False, shell_complete=complete_queue)
@click.option("--hours", type=click.IntRange(1, 24 * 14), default=3, show_default=True, help="How far back.")
@click.option("--period", type=click.IntRange(1, 24 * 60), default=15, show_default=True, help="Minutes per row.")
@click.pass_obj
def stats(options: Options, queue: str | None, hours: int, period: int) -> None:
    """Runs processed, failed, retried and dead-lettered per period, and copies cancelled, from the workers' metrics."""
    from sqs_jobs.cli.job_counts import COUNTS, job_counts

    # To the end of the current minute: this minute's runs count too.
    end = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(hours=hours)
    catalog = options.catalog()
    specs = [catalog.queue(queue)] if queue else list(catalog)
    with operator_errors():
        found = job_counts(options.client("cloudwatch"), specs, start, end, period * 60)
    payload = {"start": start, "end": end, "period_s": period * 60, "queues": [counts.to_dict() for counts in found]}

    def table() -> None:
        from rich.table import Table

        for counts in found:
            view = Table(title=f"{counts.queue}: last {hours} h, {period} min a row (UTC)")
            view.add_column("from")
            for column in COUNTS:
                view.add_column(column.replace("_", " "), justify="right")
            for bucket, row in sorted(counts.buckets.items()):
                view.add_row(cell(f"{bucket:%Y-%m-%d %H:%M}"), *(cell(row[column]) for column in COUNTS))
            totals = counts.totals()
            view.add_row(cell("total"), *(cell(totals[column], style="bold") for column in COUNTS))
            console().print(view)

    emit(options, payload, table)
