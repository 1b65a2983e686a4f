"""`jobctl init PATH`: write a new deployment project that depends on sqs-jobs (sqs_jobs.cli.project_init)."""

from __future__ import annotations

from pathlib import Path

import click

from sqs_jobs.cli.cli_globals import JobctlCommand


@click.command(cls=JobctlCommand)
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--package", default="functions", show_default=True, help="The package of the catalog and jobs.")
@click.option("--queue", default="work", show_default=True, help="The first queue's name.")
@click.option("--job", "job_name", default="hello", show_default=True, help="The first job's name.")
@click.option(
    "--find-links",
    default="",
    metavar="DIR",
    help="Where the sqs-jobs wheel is, for the README's install line (until it is on your package index).",
)
def init(path: Path, package: str, queue: str, job_name: str, find_links: str) -> None:
    """Write a new project: the catalog with one queue and one job, its test, the CDK app and a README.

    PATH is created if missing; nothing is written over an existing file. The project depends on the sqs-jobs
    version installed here.
    """
    from sqs_jobs.cli.project_init import ProjectSettings, init_project
    from sqs_jobs.stack_names import DEFAULT_STACK_NAME

    root = path.resolve()
    settings = ProjectSettings(
        project=root.name,
        package=package,
        queue=queue,
        job=job_name,
        stack_name=DEFAULT_STACK_NAME,
        find_links=str(Path(find_links).resolve()) if find_links else "",
    )
    written = init_project(root, settings)
    for file in written:
        click.echo(f"wrote {file.relative_to(Path.cwd()) if file.is_relative_to(Path.cwd()) else file}")
    click.echo(f"next: cd {path} and follow its README (set up, test, run locally, deploy)")
