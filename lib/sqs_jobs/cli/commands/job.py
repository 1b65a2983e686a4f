"""`jobctl job show|list|cancel|event`: one job's fate (sqs_jobs.cli.job_lookup), the keys in flight
(sqs_jobs.cli.job_life), cancelling one (sqs_jobs.cli.job_cancel), and sending an event to a durable job waiting for
it (sqs_jobs.events)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from sqs_jobs.cli.cli_globals import JobctlGroup, complete_job, complete_queue
from sqs_jobs.cli.cli_output import relative_text
from sqs_jobs.cli.cli_support import Options, confirm, emit, fail, operator_errors, queues_of
from sqs_jobs.cli.durable_shown import durable_lines
from sqs_jobs.cli.errors import EXIT_FAILED, EXIT_USAGE
from sqs_jobs.cli.job_lookup import JobLookup, idempotency_table, lookup
from sqs_jobs.cli.shown import cell, console, shown

# How much of a job's result `job show` prints as text (--output json has all of it).
MAX_RESULT_SHOWN = 500


@click.group(cls=JobctlGroup)
def job() -> None:
    """Look up one job, list the jobs in flight, cancel one, send an event to a waiting durable job."""


def _queue_of(options: Options, name: str) -> str:
    catalog = options.catalog()
    try:
        return catalog.queue_for_job(name).name
    except KeyError:
        fail(f"unknown job {name!r}; accepted: {', '.join(catalog.job_names)}", EXIT_USAGE)


@job.command()
@click.argument("name", metavar="JOB", shell_complete=complete_job)
@click.argument("entity_id", metavar="ID")
@click.option("--key", help="The idempotency key, if the publisher chose one (default: the job's own, from the ID).")
@click.option("--tenant", help="The tenant the job was published for, if any (its key is the tenant's).")
@click.option(
    "--limit-key",
    help="For a job with a concurrency limit per envelope field other than the ID or key: the field's value, to "
    "show that key's slots.",
)
@click.pass_obj
def show(
    options: Options, name: str, entity_id: str, key: str | None, tenant: str | None, limit_key: str | None
) -> None:
    """Whether JOB ID completed (when, and until when a redelivery is skipped), is running, or sits in the DLQ; for a
    unique or debounced job, also its window and which publish holds it; for a job with a concurrency limit per key,
    who holds that key's slots."""
    queue = _queue_of(options, name)
    with operator_errors():
        [(spec, where)] = queues_of(options, queue)
        found = lookup(options.client, spec, where, name, entity_id, key, limit_key=limit_key, tenant=tenant)

    def text() -> None:
        click.echo(shown(f"{name}:{entity_id} on {queue}: {found.verdict}"))
        click.echo(shown(f"  {found.explanation()}"))
        click.echo(shown(f"  idempotency key: {found.idempotency_key}"))
        if found.callback_of is not None:
            click.echo(shown(f"  callback:        {found.callback_of.describe()}"))
        record = found.record
        if record is not None:
            if record.completed_at is not None:
                click.echo(f"  completed at:     {record.completed_at.isoformat(timespec='seconds')}")
            click.echo(f"  remembered until: {record.remembered_until.isoformat(timespec='seconds')}")
            if record.in_progress_until is not None:
                click.echo(f"  key held until:   {record.in_progress_until.isoformat(timespec='seconds')}")
            if record.cancelled_at is not None:
                click.echo(shown(f"  cancelled:        {record.cancelled_at.isoformat(timespec='seconds')}"))
            if record.trace_id:
                click.echo(shown(f"  trace:            {record.trace_id}"))
        for letter in found.dead_letters:
            click.echo(shown(f"  dead letter {letter.message_id}: {letter.error_type}: {letter.error_message}"))
        outcome = found.outcome()
        if outcome.value is not None:
            # What the job returned, as its publisher reads it (JobPublisher.result); the whole of it in --output json.
            returned = json.dumps(outcome.value, ensure_ascii=False, separators=(",", ":"))
            clipped = returned if len(returned) <= MAX_RESULT_SHOWN else returned[:MAX_RESULT_SHOWN] + "..."
            click.echo(shown(f"  result:           {clipped}"))
        if found.flow is not None:
            click.echo(shown(f"  {found.flow.describe(found.looked_at)}"))
        for line in key_slot_lines(found):
            click.echo(line)
        if found.durable is not None:
            for line in durable_lines(found.durable, found.looked_at):
                click.echo(shown(f"  {line}"))

    emit(options, found.to_dict(), text)


def key_slot_lines(found: JobLookup) -> list[str]:
    """`job show`'s lines for the slots of the job's key, if it has a concurrency limit per key: the key and each
    holder (its run's idempotency key) may be a producer's text, so each line is shown escaped."""
    if found.key_slots is None:
        return []
    return [shown(f"  {line}") for line in found.key_slots.describe(found.looked_at)]


@job.command("list")
@click.argument("queue", required=False, shell_complete=complete_queue)
@click.option(
    "--state",
    "states",
    type=click.Choice(["running", "retrying", "cancelled"]),
    multiple=True,
    help="Only these states (repeatable; default: all three).",
)
@click.option("--job", "job_name", shell_complete=complete_job, help="Only this job.")
@click.option("--search", help="Only keys whose ID or idempotency key contains TEXT (case-insensitive).")
@click.option(
    "--per-shard",
    type=click.IntRange(1, 1000),
    default=50,
    show_default=True,
    help="Read at most N records per index shard (4 shards per queue and state).",
)
@click.pass_obj
def list_(
    options: Options,
    queue: str | None,
    states: tuple[str, ...],
    job_name: str | None,
    search: str | None,
    per_shard: int,
) -> None:
    """The jobs in flight: running (since when, by which worker, progress), retrying or held (runs so far, last
    error, when due again), and cancelled, from the runtime's records (a Query per queue, state and shard). A new
    key's first run is listed once it has run its queue's list_running_after_s (5 s by default): `job show` any
    job for its run."""
    from sqs_jobs.cli.job_life import jobs_in_flight
    from sqs_jobs.worker.names import LifeState

    if job_name is not None:
        queue = queue or _queue_of(options, job_name)
    with operator_errors():
        located = queues_of(options, queue)
        table = idempotency_table(options.client("lambda"), located[0][1].arn)
        found = jobs_in_flight(
            options.client("dynamodb"),
            table,
            [spec.name for spec, _ in located],
            [LifeState(state) for state in states] or list(LifeState),
            job=job_name,
            text=search,
            per_shard=per_shard,
        )
    now = datetime.now(UTC)

    def render() -> None:
        from rich.table import Table

        if not found.jobs:
            click.echo("no jobs in flight" + (" match" if job_name or search else ""))
        for state in LifeState:
            rows = found.of(state)
            if not rows:
                continue
            view = Table(title=f"{state.value}: {len(rows)}")
            columns = {
                LifeState.RUNNING: ["queue", "job", "id", "run", "since", "worker", "progress"],
                LifeState.RETRYING: ["queue", "job", "id", "runs", "due", "last error"],
                LifeState.CANCELLED: ["queue", "job", "id", "cancelled", "by"],
            }[state]
            for column in columns:
                view.add_column(column)
            for entry in rows:
                common = [cell(entry.queue), cell(entry.job), cell(entry.job_id)]
                when = relative_text(entry.at, now, missing="?")  # since when running, when due, when cancelled
                if state is LifeState.RUNNING:
                    since = when + (" (never reported back)" if entry.stalled else "")
                    if entry.cancel_requested_at is not None:
                        since += "; cancel requested"
                    progress = entry.progress.describe() if entry.progress else ""
                    view.add_row(*common, cell(entry.runs), cell(since), cell(entry.run_by), cell(progress))
                elif state is LifeState.RETRYING:
                    error = f"{entry.last_error_type}: {entry.last_error}" if entry.last_error_type else "(held)"
                    if not entry.last_error_type and entry.waiting_for:
                        error = f"(waiting for {entry.waiting_for})"
                    view.add_row(*common, cell(entry.runs), cell(when), cell(error[:160]))
                else:
                    view.add_row(*common, cell(when), cell(entry.cancelled_by))
            console().print(view)
        if found.truncated:
            click.echo(
                f"more in flight than read ({per_shard} per shard): narrow with --job/--search or raise --per-shard"
            )

    emit(options, found.to_dict(), render)


@job.command()
@click.argument("name", metavar="JOB", shell_complete=complete_job)
@click.argument("entity_id", metavar="ID")
@click.option("--key", help="The idempotency key, if the publisher chose one (default: the job's own, from the ID).")
@click.option("--tenant", help="The tenant the job was published for, if any (its key is the tenant's).")
@click.option("--undo", is_flag=True, help="Withdraw an earlier cancel: the next copy runs (a redrive too).")
@click.option("--yes", is_flag=True, help="Don't ask for confirmation.")
@click.pass_obj
def cancel(
    options: Options, name: str, entity_id: str, key: str | None, tenant: str | None, undo: bool, yes: bool
) -> None:
    """Cancel JOB ID: a queued or retrying copy is acknowledged without running; a running one stops at its next
    progress report or call (dead-lettered as JobCancelledError, never retried). Lasts the queue's idempotency
    expiry."""
    from sqs_jobs.cli.job_cancel import (
        CancelOutcome,
        cancel_durable,
        cancel_job,
        operator_identity,
        stop_execution_with,
        target_for,
        withdraw,
        withdraw_durable,
    )

    queue = _queue_of(options, name)
    # A durable job's cancel is its durable record's, and its running execution is stopped (cancel_durable).
    durable = options.catalog().queue_for_job(name).job(name).durable is not None
    stopped: str | None = None
    with operator_errors():
        [(spec, where)] = queues_of(options, queue)
        target = target_for(spec, name, entity_id, key, tenant)
        confirm(f"{'withdraw the cancel of' if undo else 'cancel'} {shown(name)}:{shown(entity_id)} on {queue}?", yes)
        dynamodb = options.client("dynamodb")
        table = idempotency_table(options.client("lambda"), where.arn)
        if durable and undo:
            result = withdraw_durable(dynamodb, table, target)
        elif durable:
            stop = stop_execution_with(options.durable_api())
            result, stopped = cancel_durable(dynamodb, table, target, operator_identity(options.client("sts")), stop)
        elif undo:
            result = withdraw(dynamodb, table, target)
        else:
            result = cancel_job(dynamodb, table, target, operator_identity(options.client("sts")))
    payload = {"queue": queue, "job": name, "id": entity_id, "idempotency_key": target.key, **result.to_dict()}
    if durable:
        payload["stopped_execution"] = stopped
    said = f"{name}:{entity_id} on {queue} (key {target.key}): {result.explanation}"
    emit(options, payload, lambda: click.echo(shown(said)))
    if result.outcome in (CancelOutcome.COMPLETED, CancelOutcome.NOT_CANCELLED):
        raise SystemExit(EXIT_FAILED)


@job.command()
@click.argument("name", metavar="JOB", shell_complete=complete_job)
@click.argument("entity_id", metavar="ID")
@click.argument("event")
@click.option("--payload", default="null", show_default=True, help="The event's payload, as JSON.")
@click.option("--key", help="The idempotency key, if the publisher chose one (default: the job's own, from the ID).")
@click.option("--tenant", help="The tenant the job was published for, if any (its key is the tenant's).")
@click.pass_obj
def event(
    options: Options, name: str, entity_id: str, event: str, payload: str, key: str | None, tenant: str | None
) -> None:
    """Send EVENT to durable job JOB ID, which waits for it (context.wait_for_event): its execution goes on with the
    payload. Refused (exit 1) when it isn't waiting for EVENT now: not yet, no longer, or for another event."""
    from sqs_jobs.events import EventNotAwaitedError, EventPayloadError, JobEvents

    queue = _queue_of(options, name)
    if options.catalog().queue_for_job(name).job(name).durable is None:
        fail(f"{shown(name)} is not a durable job: only durable jobs wait for events", EXIT_USAGE)
    try:
        value = json.loads(payload)
    except ValueError as error:
        fail(f"--payload is not JSON ({error}); e.g. --payload '{{\"approved\": true}}'", EXIT_USAGE)
    with operator_errors():
        [(_, where)] = queues_of(options, queue)
        table = idempotency_table(options.client("lambda"), where.arn)
        sender = JobEvents(options.client("dynamodb"), options.durable_api(), table)
        try:
            sender.send(name, entity_id, event, value, key=key, tenant=tenant)
        except (EventNotAwaitedError, EventPayloadError) as refused:
            fail(str(refused), EXIT_FAILED if isinstance(refused, EventNotAwaitedError) else EXIT_USAGE)
    said = f"{name}:{entity_id} on {queue}: event {event!r} sent; its execution goes on"
    emit(
        options,
        {"queue": queue, "job": name, "id": entity_id, "event": event, "sent": True},
        lambda: click.echo(shown(said)),
    )
