"""`jobctl status [QUEUE] [--watch]`: the four signals per queue and a health verdict; exit 1 if unhealthy, 3 if
the status could not be read."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

import click
from rich.table import Table

from sqs_jobs.cli.cli_globals import JobctlCommand, complete_queue
from sqs_jobs.cli.cli_output import age_text, relative_text
from sqs_jobs.cli.cli_support import Options, emit, operator_errors, queues_of
from sqs_jobs.cli.errors import EXIT_FAILED
from sqs_jobs.cli.shown import cell
from sqs_jobs.cli.shown import console as plain_console
from sqs_jobs.cli.status import DEFAULT_WINDOW_S, QueueStatus, queue_status


def _table(statuses: list[QueueStatus], now: datetime) -> Table:
    table = Table(title=f"queues at {now.isoformat(timespec='seconds')}")
    for column in (
        "queue",
        "backlog",
        "in flight",
        "oldest",
        "DLQ",
        "failed / runs",
        "last job done",
        "heartbeat",
        "noisy tenants",
        "health",
    ):
        table.add_column(column)
    for status in statuses:
        runs = status.succeeded + status.failed
        rate = f"{status.failed}/{runs}" + (f" ({status.failure_rate:.0%})" if status.failure_rate is not None else "")
        health = cell("healthy", "green") if status.healthy else cell("; ".join(status.problems), "red")
        table.add_row(
            cell(status.name),
            cell(status.backlog),
            cell(status.in_flight),
            cell(age_text(status.oldest_age_s)),
            cell(status.dlq_depth),
            cell(rate),
            cell(relative_text(status.last_success_at, now)),
            cell(relative_text(status.last_heartbeat_at, now)),
            cell(_tenants_text(status)),
            health,
        )
    return table


def _tenants_text(status: QueueStatus) -> str:
    """SQS's fair-queue figures: how many tenants it deems noisy, and the other tenants' oldest message."""
    if status.noisy_tenants is None:
        return "-"
    if status.quiet_oldest_age_s is None:
        return str(status.noisy_tenants)
    return f"{status.noisy_tenants} (others' oldest {age_text(status.quiet_oldest_age_s)})"


def _lanes_table(statuses: list[QueueStatus]) -> Table | None:
    """Each priority lane's queue (docs/priorities.md), or None when no queue has lanes."""
    if not any(status.lanes for status in statuses):
        return None
    table = Table(title="priority lanes")
    for column in ("queue", "lane", "backlog", "in flight", "oldest", "worker"):
        table.add_column(column)
    for status in statuses:
        for lane in status.lanes:
            table.add_row(
                cell(status.name),
                cell(lane.name),
                cell(lane.backlog),
                cell(lane.in_flight),
                cell(age_text(lane.oldest_age_s)),
                cell("?" if lane.paused is None else "paused" if lane.paused else "taking jobs"),
            )
    return table


def _limits_table(statuses: list[QueueStatus]) -> Table | None:
    """The queues' flow limits (docs/flow-control.md), or None when no queue has any."""
    if not any(status.limits for status in statuses):
        return None
    table = Table(title="flow limits")
    for column in ("queue", "limit", "declared", "now"):
        table.add_column(column)
    for status in statuses:
        for view in status.limits:
            table.add_row(
                cell(status.name), cell(view.declared.name), cell(view.declared.describe()), cell(view.state())
            )
    return table


@click.command(cls=JobctlCommand)
@click.argument("queue", required=False, shell_complete=complete_queue)
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=click.IntRange(1, 3600), default=10, show_default=True, help="--watch refresh (s).")
@click.option(
    "--window",
    type=click.IntRange(1, 1440),
    default=DEFAULT_WINDOW_S // 60,
    show_default=True,
    help="Minutes of history for the failure rate.",
)
@click.pass_obj
def status(options: Options, queue: str | None, watch: bool, interval: int, window: int) -> None:
    """Backlog, in flight, oldest message age, DLQ depth, failure rate and liveness of each queue, each priority
    lane's backlog, in flight and oldest age, and its flow limits (an unkeyed rate limit's free tokens now).

    Exit 0 when every queue is healthy, 1 when one is not, 3 when the status could not be read."""
    console = plain_console()
    with operator_errors():
        targets = queues_of(options, queue)
        sqs, cloudwatch, lambda_client = options.client("sqs"), options.client("cloudwatch"), options.client("lambda")
        catalog = options.catalog()
        limits = {spec.name: catalog.flow_limits(spec.name) for spec, _ in targets}
        # Only a queue with limits reads the table (an unkeyed rate limit's bucket).
        dynamodb = options.client("dynamodb") if any(limits.values()) else None
        while True:
            now = datetime.now(UTC)
            statuses = [
                queue_status(
                    sqs,
                    cloudwatch,
                    spec,
                    where,
                    now=now,
                    window_s=window * 60,
                    lambda_client=lambda_client,
                    limits=limits[spec.name],
                    dynamodb=dynamodb,
                )
                for spec, where in targets
            ]
            healthy = all(s.healthy for s in statuses)
            payload = {"healthy": healthy, "at": now.isoformat(), "queues": [s.to_dict() for s in statuses]}
            if watch and options.output == "table":
                console.clear()
            tables = [
                found
                for found in (_table(statuses, now), _lanes_table(statuses), _limits_table(statuses))
                if found is not None
            ]

            def render(tables: list[Table] = tables) -> None:
                for table in tables:
                    console.print(table)

            emit(options, payload, render)
            if not watch:
                break
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                break
    if not healthy:
        sys.exit(EXIT_FAILED)
