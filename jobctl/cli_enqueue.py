"""`jobctl enqueue QUEUE JOB ID`: publish one job through the stack's queues, as a producer would."""

from __future__ import annotations

import click

from jobctl.cli_globals import JobctlCommand, complete_job, complete_queue
from jobctl.cli_support import Options, emit, operator_errors
from jobctl.discovery import find_queues
from sqs_jobs.catalog import CATALOG
from sqs_jobs.publisher import JobPublisher


@click.command(cls=JobctlCommand)
@click.argument("queue", shell_complete=complete_queue)
@click.argument("job", shell_complete=complete_job)
@click.argument("entity_id", metavar="ID")
@click.option("--key", help="Idempotency key (default: <job>:<id>).")
@click.option("--delay", type=click.IntRange(0, 900), default=0, help="Delay in seconds (0-900).")
@click.pass_obj
def enqueue(options: Options, queue: str, job: str, entity_id: str, key: str | None, delay: int) -> None:
    """Publish one job to QUEUE: {"job": JOB, "id": ID}."""
    with operator_errors():
        spec = CATALOG.queue(queue)
        if job not in spec.job_names:
            raise click.BadParameter(f"job {job!r} is not on queue {queue!r}; accepted: {', '.join(spec.job_names)}")
        locations = find_queues(options.client("ssm"), options.stack)
        publisher = JobPublisher(options.client("sqs"), {name: loc.url for name, loc in locations.items()})
        message_id = publisher.publish(job, entity_id, key=key, delay_s=delay)
        emit(
            options,
            {"queue": queue, "job": job, "id": entity_id, "message_id": message_id},
            lambda: click.echo(f"enqueued {job}:{entity_id} on {queue} as message {message_id}"),
        )
