"""`jobctl new job NAME --queue QUEUE`: scaffold a job (its module and its test) and print its catalog entry."""

from __future__ import annotations

from pathlib import Path

import click

from sqs_jobs.cli.cli_globals import JobctlGroup, Options, complete_queue
from sqs_jobs.cli.cli_support import fail
from sqs_jobs.cli.errors import EXIT_USAGE
from sqs_jobs.cli.scaffold import ScaffoldError, scaffold_job
from sqs_jobs.specs import UnknownQueueError


@click.group(cls=JobctlGroup)
def new() -> None:
    """Scaffold a job: its module and its test, in the project's style."""


@new.command(name="job")
@click.argument("name")
@click.option("--queue", required=True, shell_complete=complete_queue, help="The catalog queue that will run it.")
@click.option("--package", help="Where its module goes. [default: the catalog's package's `jobs`, e.g. functions.jobs]")
@click.option("--tests", default="tests", show_default=True, help="Where its test goes.")
@click.option("--description", default="", help="One sentence: what the job does.")
@click.option("--new-queue", is_flag=True, help="QUEUE is not in the catalog yet: print a QueueSpec holding the job.")
@click.pass_obj
def job(
    options: Options, name: str, queue: str, package: str | None, tests: str, description: str, new_queue: bool
) -> None:
    """Write <package>/NAME.py and <tests>/test_NAME.py (never over a file), then print the JobSpec to add to the
    queue's jobs in the catalog (with --new-queue, the QueueSpec to add to its queues)."""
    catalog = options.catalog()
    ref = options.resolved_catalog_ref()
    where = _catalog_file(ref)
    if package is None:
        # Beside the catalog's module: functions.catalog -> functions.jobs (a top-level catalog module: jobs).
        catalog_package = ref.split(":", 1)[0].rpartition(".")[0]
        package = f"{catalog_package}.jobs" if catalog_package else "jobs"
    try:
        made = scaffold_job(
            catalog,
            name,
            queue,
            root=Path.cwd(),
            package=package,
            tests=tests,
            description=description,
            new_queue=new_queue,
        )
    except UnknownQueueError as error:
        fail(f"{error} (or --new-queue to declare it with the job)", EXIT_USAGE)
    except ScaffoldError as error:
        fail(str(error), EXIT_USAGE)
    click.echo(f"wrote {made.module.relative_to(Path.cwd())}")
    click.echo(f"wrote {made.test.relative_to(Path.cwd())}")
    if made.new_queue:
        click.echo(f"add to the catalog's queues in {where} (its settings default as docs/catalog.md says):")
    else:
        click.echo(f"add to the jobs of queue {queue!r} in {where}:")
    click.echo(made.catalog_entry)
    click.echo("then: run the test (it fails until the job is written).")


def _catalog_file(ref: str) -> str:
    """The catalog's file, relative to here where it can be; else its reference."""
    import importlib.util

    module, _, name = ref.partition(":")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return ref
    origin = Path(spec.origin)
    shown = origin.relative_to(Path.cwd()) if origin.is_relative_to(Path.cwd()) else origin
    return f"{shown} ({name})"
