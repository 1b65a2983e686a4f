"""The worker's dependencies (Powertools, the X-Ray SDK) as a Lambda layer, from `make bundle`'s output.

scripts/bundle_layer.sh vendors them from uv.lock, so the deployed Powertools is exactly the version the
tests ran against; no Docker, and no public layer ARN pinned per region.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.worker_code import ARCHITECTURE, RUNTIME

# What scripts/bundle_layer.sh writes beside python/: kept out of the layer.
_BUNDLE_FILES = (".built", ".stamp", "requirements.txt")
_LAYER_DESCRIPTION_MAX = 256


class LayerMissingError(FileNotFoundError):
    """The bundled layer directory is not there: `make bundle` has not run."""


class DependenciesLayer(Construct):
    """A LayerVersion of the vendored `python/` directory, for the workers' runtime and architecture."""

    def __init__(self, scope: Construct, construct_id: str, *, directory: Path, display_name: str) -> None:
        super().__init__(scope, construct_id)
        if not (directory / "python").is_dir():
            raise LayerMissingError(f"{display_name} is missing: run `make bundle`")
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
    text = "Worker dependencies from uv.lock: " + " ".join(pins)
    return text[:_LAYER_DESCRIPTION_MAX]
