"""`jobctl bundle [OUTDIR]`: build the workers' dependencies layer of the project (sqs_jobs.cli.layer_bundle)."""

from __future__ import annotations

from pathlib import Path

import click

from sqs_jobs.cli.cli_globals import JobctlCommand


@click.command(cls=JobctlCommand)
@click.argument("outdir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--requirements",
    "requirements_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A pip requirements file of what the jobs import. [default: the project's uv.lock `lambda` group, else "
    "its requirements-lambda.txt; the framework's worker extra as installed, always]",
)
@click.option("--uv", "uv", metavar="PATH", help="The uv to install with. [default: uv on PATH, else pip]")
def bundle(outdir: Path | None, requirements_file: Path | None, uv: str | None) -> None:
    """Build the workers' layer: the framework's worker and the jobs' packages, for Lambda's python3.13 on arm64.

    OUTDIR defaults to build/layer in the project (the directory of the pyproject.toml that names its catalog),
    where the stack's synth looks for it. In a project, it then checks that every import its jobs make at the
    worker's start is deployed: in the project's code, the layer or the Lambda runtime.
    """
    # Its errors (BundleError) are operator errors: one line, exit 1.
    from sqs_jobs.catalog_ref import find_project
    from sqs_jobs.cli.layer_bundle import bundle as build

    project = find_project(Path.cwd())
    root = project.root if project is not None else Path.cwd()
    out = outdir if outdir is not None else root / "build" / "layer"
    click.echo(
        build(
            root,
            out.resolve(),
            requirements_file=requirements_file,
            uv=uv,
            catalog_ref=project.catalog_ref if project is not None else None,
        )
    )
