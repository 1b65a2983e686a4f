"""`jobctl queue pause|resume QUEUE`: stop and restart a queue's worker (its Lambda event source mapping)."""

from __future__ import annotations

import click

from sqs_jobs.cli import queue_control
from sqs_jobs.cli.cli_globals import JobctlGroup, complete_queue
from sqs_jobs.cli.cli_support import Options, emit, operator_errors, queues_of


@click.group(cls=JobctlGroup)
def queue() -> None:
    """Pause or resume a queue's worker: jobs wait in the queue, nothing is lost."""


def _switch(options: Options, name: str, pause: bool) -> None:
    with operator_errors():
        [(_, where)] = queues_of(options, name)
        change = queue_control.pause if pause else queue_control.resume
        # A queue with priority lanes: every lane's mapping.
        mappings = change(options.client("lambda"), *(source.arn for source in where.sources))
    verb = "paused" if pause else "resumed"
    lanes = {lane.arn: lane.name for lane in where.lanes}

    def described(mapping: queue_control.Mapping) -> dict[str, str | None]:
        found: dict[str, str | None] = {"uuid": mapping.uuid, "function": mapping.function_name, "state": mapping.state}
        if lanes:
            found["lane"] = lanes.get(mapping.source_arn)
        return found

    payload = {"queue": name, "paused": pause, "mappings": [described(m) for m in mappings]}

    def text() -> None:
        states = ", ".join(
            (f"lane {lanes.get(m.source_arn)}: " if lanes else "") + f"{m.function_name}: {m.state}" for m in mappings
        )
        click.echo(f"{verb} {name} ({states})")
        if pause:
            click.echo(f"jobs wait in {name} until `jobctl queue resume {name}`; batches in flight finish")

    emit(options, payload, text)


@queue.command()
@click.argument("name", metavar="QUEUE", shell_complete=complete_queue)
@click.pass_obj
def pause(options: Options, name: str) -> None:
    """Disable the queue's event source mapping (each priority lane's): its worker takes no new batches (those in
    flight finish)."""
    _switch(options, name, pause=True)


@queue.command()
@click.argument("name", metavar="QUEUE", shell_complete=complete_queue)
@click.pass_obj
def resume(options: Options, name: str) -> None:
    """Enable the queue's event source mapping (each priority lane's) again: its worker drains what waited."""
    _switch(options, name, pause=False)
