"""`jobctl dlq list | show | redrive | discard`: the article's redrive procedure, safe and scriptable."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from sqs_jobs.cli.cli_globals import JobctlGroup, complete_queue
from sqs_jobs.cli.cli_support import Options, confirm, emit, fail, operator_errors, progress_bar, queues_of
from sqs_jobs.cli.dlq import (
    NO_TENANT,
    BadFilterError,
    BadRateError,
    DeadLetter,
    DeadLetterQueue,
    Filter,
    MoveReport,
    MoveTasks,
    MoveTaskStatus,
    group,
    lane_counts,
    not_idempotent,
    open_archive,
    queue_busy,
    verify,
)
from sqs_jobs.cli.errors import EXIT_FAILED
from sqs_jobs.cli.shown import attribute_lines, cell, console, shown

# Error codes an endpoint answers StartMessageMoveTask with when it doesn't implement it (the local engine).
_UNSUPPORTED = {
    "InvalidAction",
    "UnsupportedOperation",
    "NotImplemented",
    "InvalidRequest",
    "UnknownOperationException",
}


def _dlq(options: Options, queue: str) -> tuple[DeadLetterQueue, Any]:
    [(_, where)] = queues_of(options, queue)
    sqs = options.client("sqs")
    # DynamoDB only for a dead letter whose producer attributes had to be stored beside it (rare).
    dead = DeadLetterQueue.of(sqs, where, dynamodb=lambda: options.client("dynamodb"))
    return dead, where


def _find(options: Options, dead: DeadLetterQueue, queue: str, message_id: str) -> DeadLetter | None:
    """One message of the DLQ, read without consuming; the scan stops where it is found."""
    if not options.show_progress:
        return dead.find(message_id)
    with progress_bar(options, f"reading the DLQ of {queue}") as bar:
        seen = 0

        def received(count: int) -> None:
            nonlocal seen
            seen += count
            bar.update(seen, total=None)

        return dead.find(message_id, progress=received)


def _scan(options: Options, dead: DeadLetterQueue, queue: str, limit: int | None = None) -> list[DeadLetter]:
    """Every message of the DLQ (up to `limit`), read without consuming, with progress against its depth."""
    if not options.show_progress:
        return dead.peek(limit)
    depth = dead.depth()  # an estimate (SQS's approximate count), asked only when progress is shown
    total = min(depth, limit) if limit is not None else depth
    with progress_bar(options, f"reading the DLQ of {queue}", total=total or None) as bar:
        seen = 0

        def received(count: int) -> None:
            nonlocal seen
            seen += count
            bar.update(seen, total=max(seen, total) if total else None)

        return dead.peek(limit, progress=received)


def _move_tasks(options: Options, where: Any) -> MoveTasks:
    sqs = options.client("sqs")
    dlq_arn = sqs.get_queue_attributes(QueueUrl=where.dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return MoveTasks(sqs, dlq_arn=dlq_arn, destination_arn=where.arn)


def _lanes_text(lanes: dict[str, int] | None) -> str:
    """' (high: 2, normal: 3)' for a queue with lanes, else nothing."""
    if not lanes:
        return ""
    return " (" + ", ".join(f"{lane}: {count}" for lane, count in lanes.items()) + ")"


def _filters(error_type: str | None, match: str | None, job: str | None, tenant: str | None = None) -> Filter:
    try:
        return Filter(error_type=error_type, match=match, job=job, tenant=tenant)
    except BadFilterError as error:
        raise click.UsageError(str(error)) from None


def tenant_option(command: Any) -> Any:
    return click.option("--tenant", help="Only this tenant's (the envelope's tenant).")(command)


def filter_options(command: Any) -> Any:
    command = tenant_option(command)
    command = click.option("--job", help="Only this job type.")(command)
    command = click.option("--match", help="Only messages whose error or body contains TEXT (case-insensitive).")(
        command
    )
    command = click.option("--error-type", help="Only this error type, e.g. OrderNotFoundError.")(command)
    return command


@click.group(cls=JobctlGroup)
def dlq() -> None:
    """Triage a queue's dead-letter queue: list, show, redrive, discard."""


@dlq.command("list")
@click.argument("queue", shell_complete=complete_queue)
@click.option("--group-by", type=click.Choice(["error", "job", "tenant", "day"]), default="error", show_default=True)
@tenant_option
@click.option("--limit", type=click.IntRange(1), help="Read at most N messages.")
@click.pass_obj
def list_(options: Options, queue: str, group_by: str, tenant: str | None, limit: int | None) -> None:
    """Group the DLQ's messages by error, job, tenant or day (read without consuming)."""
    chosen = _filters(None, None, None, tenant)
    with operator_errors():
        dead, _ = _dlq(options, queue)
        letters = [letter for letter in _scan(options, dead, queue, limit) if chosen.matches(letter)]
        groups = group(letters, group_by)
    payload: dict[str, Any] = {"queue": queue, "total": len(letters), "group_by": group_by, "groups": groups}
    if tenant is not None:
        payload["tenant"] = tenant

    def table() -> None:
        from rich.table import Table

        if not letters:
            click.echo(
                f"the DLQ of {queue} is empty" if tenant is None else shown(f"no dead letter of tenant {tenant}")
            )
            return
        whose = f" of tenant {tenant}" if tenant is not None else ""
        view = Table(title=cell(f"DLQ of {queue}: {len(letters)} message(s){whose} by {group_by}"))
        key_columns = ["error type", "HTTP", "error message"] if group_by == "error" else [group_by]
        for column in (*key_columns, "count", "jobs", "first seen", "last seen", "sample message"):
            view.add_column(column)
        for entry in groups:
            keys = (
                [entry["error_type"], entry["http_status"] or "", entry["error_message"][:80]]
                if group_by == "error"
                else [NO_TENANT if entry[group_by] is None else entry[group_by]]
            )
            view.add_row(
                *(cell(key) for key in keys),
                cell(entry["count"]),
                cell(", ".join(entry["jobs"])),
                cell(entry["first_seen"] or "?"),
                cell(entry["last_seen"] or "?"),
                cell(entry["sample_message_id"]),
            )
        console().print(view)

    emit(options, payload, table)


@dlq.command()
@click.argument("queue", shell_complete=complete_queue)
@click.argument("message_id")
@click.pass_obj
def show(options: Options, queue: str, message_id: str) -> None:
    """One dead-lettered message: payload, attempts, error, traceback, timestamps."""
    with operator_errors():
        dead, _ = _dlq(options, queue)
        letter = _find(options, dead, queue, message_id)
    if letter is None:
        # The command ran and the message isn't there (redriven, discarded, or a wrong ID): a finding.
        fail(f"no message {message_id!r} in the DLQ of {queue!r}", EXIT_FAILED)
    details = letter.to_dict()

    def text() -> None:
        for name in ("message_id", "job", "id", "tenant", "body", "error_type", "error_message", "failure", "attempts"):
            value = NO_TENANT if name == "tenant" and details[name] is None else details[name]
            click.echo(f"{name:>16}: {shown(value)}")
        if details["http_status"] is not None:
            click.echo(f"{'http':>16}: {details['http_status']} {shown(details['http_body'] or '')}".rstrip())
        for name in ("first_failed_at", "last_failed_at", "source_queue"):
            click.echo(f"{name:>16}: {shown(details[name])}")
        # The producer's attributes, one `name (Type): value` line each (JSON output has them exact).
        lines = attribute_lines(details["attributes"]) or ["(none)"]
        click.echo(f"{'attributes':>16}: " + "\n".join([lines[0], *(" " * 18 + line for line in lines[1:])]))
        if details["attributes_stored"]:  # did not fit the dead letter; a redrive reads them back
            click.echo(f"{'stored in':>16}: {shown(details['attributes_stored'])}")
        click.echo("       traceback:")
        traceback = details["traceback"] or "(none: moved by SQS redrive, see the worker's logs)"
        click.echo(shown(traceback, keep_newlines=True))

    emit(options, details, text)


def _check_idempotent(options: Options, letters: list[DeadLetter], allow: bool) -> None:
    """Refuse to bulk-redrive jobs that are not safe to run twice, unless explicitly allowed."""
    unsafe = not_idempotent(letters, options.catalog())
    if unsafe and not allow:
        raise click.UsageError(
            f"not known to be idempotent: {shown(', '.join(unsafe))}; a redrive may run them twice. "
            "Check them, then add --allow-non-idempotent"
        )


def _server_side_move(options: Options, tasks: MoveTasks, rate: int | None) -> int | None:
    """StartMessageMoveTask of the whole DLQ into its source queue, followed to its end; None when the endpoint
    doesn't have it (the local engine)."""
    import botocore.exceptions  # loaded already: the client that `tasks` holds imported it

    try:
        tasks.start(rate)
    except botocore.exceptions.ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        # A stand-in endpoint (--endpoint-url) that lacks the action may answer it with a bare 500.
        if code in _UNSUPPORTED or (options.endpoint_url and code.startswith("5")):
            return None
        raise
    except NotImplementedError:
        return None
    try:
        with progress_bar(options, "moving (server side)") as bar:

            def show(task: MoveTaskStatus) -> None:
                bar.update(task.moved, total=task.to_move)

            return tasks.follow(show).moved
    except KeyboardInterrupt:
        tasks.cancel()
        click.echo("cancelled the move task; messages not yet moved stay in the DLQ", err=True)
        sys.exit(EXIT_FAILED)


@dlq.command()
@click.argument("queue", shell_complete=complete_queue)
@filter_options
@click.option("--limit", type=click.IntRange(1), help="Move at most N messages.")
@click.option(
    "--rate", type=click.FloatRange(0.1), help="At most N messages a second (with --all: a whole number, 1-500)."
)
@click.option("--all", "move_all", is_flag=True, help="Everything, server side (StartMessageMoveTask).")
@click.option("--cancel", is_flag=True, help="Cancel the running server-side move task (--all) of this DLQ.")
@click.option("--dry-run", is_flag=True, help="Say what would move; move nothing.")
@click.option("--yes", is_flag=True, help="Don't ask for confirmation.")
@click.option("--allow-non-idempotent", is_flag=True, help="Redrive jobs the catalog marks not idempotent.")
@click.option("--verify/--no-verify", default=True, show_default=True, help="Follow the redriven jobs.")
@click.option("--verify-timeout", type=click.IntRange(1), default=300, show_default=True, help="Seconds.")
@click.pass_obj
def redrive(
    options: Options,
    queue: str,
    error_type: str | None,
    match: str | None,
    job: str | None,
    tenant: str | None,
    limit: int | None,
    rate: float | None,
    move_all: bool,
    cancel: bool,
    dry_run: bool,
    yes: bool,
    allow_non_idempotent: bool,
    verify: bool,
    verify_timeout: int,
) -> None:
    """Move dead-lettered jobs back to their queue: selectively, rate-limited, crash-safe, then verified."""
    chosen = _filters(error_type, match, job, tenant)
    if cancel:
        _cancel(options, queue)
        return
    if move_all and (not chosen.empty or limit is not None):
        raise click.UsageError("--all moves everything: leave out --error-type, --match, --job, --tenant and --limit")
    try:
        task_rate = MoveTasks.check_rate(rate) if move_all else None
    except BadRateError as error:
        raise click.UsageError(str(error)) from None
    with operator_errors():
        dead, where = _dlq(options, queue)
        matching = [letter for letter in _scan(options, dead, queue) if chosen.matches(letter)]
        if limit is not None:
            matching = matching[:limit]
        if not dry_run:  # a preview moves nothing: it shows what the real redrive would refuse instead
            _check_idempotent(options, matching, allow_non_idempotent)
        if dry_run or not matching:
            _report_redrive(options, dead, queue, matching, None, None, dry_run=dry_run, method="none")
            return
        lanes = lane_counts(dead, dead.destinations(matching))
        confirm(f"move {len(matching)} message(s) from the DLQ of {queue} back to {queue}{_lanes_text(lanes)}?", yes)
        since = datetime.now(UTC)
        report: MoveReport | None = None
        method = "client"
        # SQS's move task sends everything to one queue: dead letters of a lane other than the default go client side.
        if move_all and any(dead.destination(letter) != dead.source_url for letter in matching):
            click.echo("dead letters of other lanes than the default: moving client side, each to its lane", err=True)
            move_all = False
        if move_all:
            moved = _server_side_move(options, _move_tasks(options, where), task_rate)
            if moved is None:
                click.echo("this endpoint has no StartMessageMoveTask: moving client side instead", err=True)
            else:
                method = "server"
                report = MoveReport(
                    moved=moved, matched=len(matching), moved_letters=matching, moved_to={dead.source_url: moved}
                )
        if report is None:
            with progress_bar(options, f"moving to {queue}", total=len(matching)) as bar:
                report = dead.move(
                    chosen,
                    rate_per_s=rate,
                    progress=bar.advance,
                    only={letter.message_id for letter in matching},
                )
        checked = None
        if verify and report.moved:
            checked = _follow(options, dead, report, since, verify_timeout)
        _report_redrive(options, dead, queue, matching, report, checked, dry_run=False, method=method)
    if (report and report.failed) or (checked and (checked.returned_to_dlq or not checked.drained)):
        sys.exit(EXIT_FAILED)


def _cancel(options: Options, queue: str) -> None:
    with operator_errors():
        [(_, where)] = queues_of(options, queue)
        task = _move_tasks(options, where).cancel()
    emit(
        options,
        {"queue": queue, "cancelled": True, "moved": task.moved, "to_move": task.to_move},
        lambda: click.echo(
            f"cancelled the move task of the DLQ of {queue} after {task.moved} message(s); the rest stay in the DLQ"
        ),
    )


def _follow(options: Options, dead: DeadLetterQueue, report: MoveReport, since: datetime, timeout_s: int) -> Any:
    if not options.show_progress:  # no bar on a pipe: say why the command is still running, and for how long
        click.echo(
            f"verifying: waiting up to {timeout_s}s for {report.moved} job(s) to be processed (--no-verify skips it)",
            err=True,
        )
    with progress_bar(options, f"verifying: waiting for {report.moved} job(s) to be processed"):
        return verify(dead._sqs, dead, report.moved_letters, since=since, timeout_s=timeout_s)


def _report_redrive(
    options: Options,
    dead: DeadLetterQueue,
    queue: str,
    matching: list[DeadLetter],
    report: MoveReport | None,
    checked: Any,
    dry_run: bool,
    method: str,
) -> None:
    payload: dict[str, Any] = {
        "queue": queue,
        "dry_run": dry_run,
        "matched": len(matching),
        "moved": report.moved if report else 0,
        "failed": report.failed if report else [],
        "method": method,
        "verified": None if checked is None else checked.drained,
        "returned_to_dlq": None if checked is None else checked.returned_to_dlq,
        "returned": [] if checked is None else [letter.to_dict() for letter in checked.returned],
    }
    # A queue with priority lanes: how many go (went) back to each lane.
    lanes = lane_counts(dead, dead.destinations(matching) if dry_run else report.moved_to if report else {})
    if lanes is not None:
        payload["lanes"] = lanes
    if dry_run:
        payload["would_move"] = [
            {"message_id": m.message_id, "job": m.job, "id": m.entity_id}
            | ({"lane": dead.lane_of(dead.destination(m))} if dead.lanes else {})
            for m in matching
        ]
        payload["not_idempotent"] = not_idempotent(matching, options.catalog())

    def text() -> None:
        if dry_run:
            click.echo(f"dry run: {len(matching)} message(s) would move back to {queue}{_lanes_text(lanes)}")
            for letter in matching:
                lane = f"  -> {dead.lane_of(dead.destination(letter))}" if dead.lanes else ""
                click.echo(shown(f"  {letter.message_id}  {letter.job}:{letter.entity_id}  {letter.error_type}") + lane)
            if payload["not_idempotent"]:
                unsafe = ", ".join(payload["not_idempotent"])
                click.echo(shown(f"not known to be idempotent: {unsafe}; the redrive needs --allow-non-idempotent"))
            return
        if not matching:
            click.echo("no message matches: nothing moved")
            return
        assert report is not None
        click.echo(
            f"moved {report.moved} of {len(matching)} message(s) back to {queue}{_lanes_text(lanes)} ({method} side)"
        )
        for failure in report.failed:
            click.echo(shown(f"  not moved: {failure['message_id']}: {failure['error']}"))
        if checked is not None:
            state = "processed" if checked.drained else f"not all processed after {checked.waited_s:.0f}s"
            click.echo(f"verified: {state}; {checked.returned_to_dlq} came back to the DLQ")
            for letter in checked.returned:
                click.echo(
                    shown(f"  back: {letter.job}:{letter.entity_id}  {letter.error_type}: {letter.error_message}")
                )

    emit(options, payload, text)


@dlq.command()
@click.argument("queue", shell_complete=complete_queue)
@filter_options
@click.option("--limit", type=click.IntRange(1), help="Discard at most N messages.")
@click.option("--archive", type=click.Path(dir_okay=False, path_type=Path), help="Append them to this JSON Lines file.")
@click.option("--yes", is_flag=True, help="Required: discarding can't be undone.")
@click.pass_obj
def discard(
    options: Options,
    queue: str,
    error_type: str | None,
    match: str | None,
    job: str | None,
    tenant: str | None,
    limit: int | None,
    archive: Path | None,
    yes: bool,
) -> None:
    """Delete matching dead letters (the bad-data case), archiving each first when asked."""
    chosen = _filters(error_type, match, job, tenant)
    if not yes:
        raise click.UsageError("discard deletes messages for good: add --yes (and --archive FILE to keep a copy)")
    with operator_errors():
        dead, _ = _dlq(options, queue)
        chosen_ids = {letter.message_id for letter in _scan(options, dead, queue) if chosen.matches(letter)}
        if limit is not None:
            chosen_ids = set(sorted(chosen_ids)[:limit])
        with progress_bar(options, f"discarding from the DLQ of {queue}", total=len(chosen_ids)) as bar:
            if archive is not None:
                with open_archive(archive) as sink:
                    discarded = (
                        dead.discard(chosen, archive=sink, only=chosen_ids, progress=bar.advance) if chosen_ids else []
                    )
            else:
                discarded = dead.discard(chosen, only=chosen_ids, progress=bar.advance) if chosen_ids else []
        left = queue_busy(dead._sqs, dead.dlq_url)
    payload = {
        "queue": queue,
        "discarded": len(discarded),
        "archive": str(archive) if archive else None,
        "messages": [
            {"message_id": m.message_id, "job": m.job, "id": m.entity_id, "error_type": m.error_type} for m in discarded
        ],
        "left_in_dlq": left,
    }

    def text() -> None:
        click.echo(f"discarded {len(discarded)} message(s) from the DLQ of {queue}; {left} left")
        for letter in discarded:
            click.echo(shown(f"  {letter.message_id}  {letter.job}:{letter.entity_id}  {letter.error_type}"))
        if archive is not None:
            click.echo(f"archived to {archive}")

    emit(options, payload, text)
