"""The worker's runtime as a Lambda layer: the framework's worker and its dependencies (Powertools, the durable
SDK) and the jobs' own packages, from `jobctl bundle`'s output (sqs_jobs.cli.layer_bundle).

Their versions are the project's (its lock file, else what is installed), so the deployed framework and
Powertools are exactly what the tests ran against; no Docker, and no public layer ARN pinned per region.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from sqs_jobs.cdk.worker_code import ARCHITECTURE, RUNTIME

# What `jobctl bundle` writes beside python/: kept out of the layer.
_BUNDLE_FILES = (".built", ".stamp", "requirements.txt")
_LAYER_DESCRIPTION_MAX = 256


class LayerMissingError(FileNotFoundError):
    """The bundled layer directory is not there: `jobctl bundle` has not run."""


class DependenciesLayer(Construct):
    """A LayerVersion of the vendored `python/` directory, for the workers' runtime and architecture."""

    def __init__(self, scope: Construct, construct_id: str, *, directory: Path, display_name: str) -> None:
        super().__init__(scope, construct_id)
        if not (directory / "python").is_dir():
            raise LayerMissingError(f"{display_name} is missing: run `jobctl bundle` (make bundle runs it)")
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(str(directory), exclude=list(_BUNDLE_FILES)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=_describe(directory),
        )


def _describe(directory: Path) -> str:
    # The pinned versions, visible in the console and in the template (a test compares Powertools's).
    requirements = directory / "requirements.txt"
    pins = requirements.read_text().split() if requirements.is_file() else []
    text = "Worker runtime: sqs-jobs and " + " ".join(pins)
    return text[:_LAYER_DESCRIPTION_MAX]
