"""`jobctl enqueue QUEUE JOB ID [--in DURATION | --at TIME] [--priority LANE]`: publish one job through the stack's
queues, as a producer would; later than 15 minutes ahead through the stack's scheduler (a one-time schedule); onto
one of the queue's priority lanes (docs/priorities.md)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import click

from sqs_jobs.cli.cli_globals import JobctlCommand, complete_job, complete_queue
from sqs_jobs.cli.cli_support import Options, emit, operator_errors
from sqs_jobs.publisher import MAX_DELAY_S, JobPublisher
from sqs_jobs.stack_names import ONE_TIME_PREFIX
from sqs_jobs.tracing import TRACEPARENT, valid_traceparent

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> timedelta:
    """`90s`, `10m`, `2h`, `1d2h30m`: days, hours, minutes, seconds, in that order."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or not match:
        raise click.BadParameter(f"{text!r} is not a duration; accepted: e.g. 90s, 10m, 2h, 1d2h30m")
    days, hours, minutes, seconds = (int(part) if part else 0 for part in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def parse_time(text: str) -> datetime:
    """An ISO 8601 time with its zone, e.g. 2026-12-24T09:00:00Z or 2026-12-24T18:00+09:00."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time; accepted: e.g. 2026-12-24T09:00:00Z") from None
    if moment.tzinfo is None:
        raise click.BadParameter(f"{text!r} has no time zone; add one, e.g. {text.strip()}Z or {text.strip()}+09:00")
    return moment


@click.command(cls=JobctlCommand)
@click.argument("queue", shell_complete=complete_queue)
@click.argument("job", shell_complete=complete_job)
@click.argument("entity_id", metavar="ID")
@click.option("--key", help="Idempotency key, as the publisher gives it (default: the job's own, usually the ID).")
@click.option(
    "--tenant",
    help="Whose job it is (1-128 ASCII letters, digits, punctuation); on a standard queue its message group too.",
)
@click.option("--priority", metavar="LANE", help="The queue's priority lane to publish on (default: its default lane).")
@click.option("--delay", type=click.IntRange(0, MAX_DELAY_S), help="Delay in seconds (0-900).")
@click.option(
    "--in",
    "in_",
    metavar="DURATION",
    help="Run it this much later, e.g. 90s, 10m, 2h, 1d2h (beyond 15 minutes: a one-time schedule).",
)
@click.option(
    "--at", "at", metavar="TIME", help="Run it at this time, e.g. 2026-12-24T09:00:00Z (ISO 8601, with zone)."
)
@click.option(
    "--traceparent",
    metavar="TRACEPARENT",
    help="Make the job's runs spans of this W3C trace (a request's, from its logs): 00-<trace ID>-<span ID>-<flags>.",
)
@click.pass_obj
def enqueue(
    options: Options,
    queue: str,
    job: str,
    entity_id: str,
    key: str | None,
    tenant: str | None,
    priority: str | None,
    delay: int | None,
    in_: str | None,
    at: str | None,
    traceparent: str | None,
) -> None:
    """Publish one job to QUEUE: {"job": JOB, "id": ID}. At most one of --delay, --in and --at."""
    # Given is `not None`: `--delay 0 --at ...` contradicts itself as much as `--delay 5 --at ...`.
    given = [name for name, value in (("--delay", delay), ("--in", in_), ("--at", at)) if value is not None]
    if len(given) > 1:
        raise click.UsageError(f"give at most one of --delay, --in and --at, not {' and '.join(given)}")
    if traceparent is not None and valid_traceparent(traceparent) is None:
        raise click.BadParameter(
            f"{traceparent!r} is not a W3C traceparent: 00-<32 hex trace ID>-<16 hex span ID>-<2 hex flags>, "
            "lower case, neither ID all zeros",
            param_hint="--traceparent",
        )
    later = parse_duration(in_) if in_ is not None else None
    moment = parse_time(at) if at is not None else None
    with operator_errors():
        spec = options.catalog().queue(queue)
        if job not in spec.job_names:
            raise click.BadParameter(f"job {job!r} is not on queue {queue!r}; accepted: {', '.join(spec.job_names)}")
        if priority is not None and priority not in spec.lanes:
            accepted = f"accepted: {', '.join(spec.lanes)}" if spec.lanes else "it has no priority lanes"
            raise click.BadParameter(f"{priority!r} is not a priority lane of queue {queue!r}; {accepted}")
        # The scheduler's parameters are read only when the job is due beyond SQS's delay.
        far = (later is not None and later.total_seconds() > MAX_DELAY_S) or moment is not None
        publisher = JobPublisher.from_stack(
            options.client("ssm"),
            options.client("sqs"),
            options.client("scheduler") if far else None,
            stack_name=options.stack,
            queues=[queue],
            # Routes by the stack's contract; a stack deployed before contracts, by the project's catalog.
            catalog=options.catalog(),
        )
        with _in_trace(traceparent):
            sent = publisher.publish(
                job, entity_id, key=key, delay_s=delay, delay=later, at=moment, tenant=tenant, priority=priority
            )
    scheduled = sent.startswith(ONE_TIME_PREFIX)
    payload = {"queue": queue, "job": job, "id": entity_id, "tenant": tenant, "message_id": None if scheduled else sent}
    if priority is not None:
        payload["priority"] = priority
    payload["schedule"] = sent if scheduled else None

    whose = f" for tenant {tenant}" if tenant is not None else ""
    whose += f" ({priority} priority)" if priority is not None else ""

    def text() -> None:
        if scheduled:
            click.echo(f"scheduled {job}:{entity_id}{whose} on {queue} as one-time schedule {sent}")
            click.echo(f"  cancel it with: jobctl schedules cancel {sent}")
        else:
            click.echo(f"enqueued {job}:{entity_id}{whose} on {queue} as message {sent}")

    emit(options, payload, text)


@contextlib.contextmanager
def _in_trace(traceparent: str | None) -> Iterator[None]:
    """The publish made inside the trace `traceparent` names (as a request's span would be current there), so the
    publisher sends it on; nothing without one."""
    if traceparent is None:
        yield
        return
    try:
        from opentelemetry import context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        raise click.UsageError(
            "--traceparent needs OpenTelemetry's API where jobctl runs: pip install 'sqs-jobs[tracing]'"
        ) from None
    token = context.attach(TraceContextTextMapPropagator().extract({TRACEPARENT: traceparent}))
    try:
        yield
    finally:
        context.detach(token)
