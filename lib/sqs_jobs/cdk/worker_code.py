"""The worker Lambda's code asset and the runtime it targets.

The asset is the project's own packages at the zip root (its catalog and jobs) and nothing else; the handler is
the framework's (`sqs_jobs.worker.entry.handler`, in the layer `jobctl bundle` builds), which loads the catalog
its function names (JOBS_CATALOG). It is staged by a plain copy at synth (CDK "local bundling"), compiled to
bytecode (sqs_jobs.cdk.asset_staging): no Docker, and the project's tests, venv and CDK app never leak into the
zip.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from sqs_jobs.cdk.asset_staging import EXCLUDED, check_interpreter, stage

# Keep in step with sqs_jobs.cdk.asset_staging (RUNTIME_VERSION), sqs_jobs.cli.layer_bundle (UV_PLATFORM,
# PIP_PLATFORM) and the Makefile's LAMBDA_PYTHON: the layer's wheels and every .pyc are built for exactly this
# interpreter and CPU.
RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
HANDLER = "sqs_jobs.worker.entry.handler"


@jsii.implements(ILocalBundling)
class _CopyPackages:
    """Copies package directories into the asset's output, each under its own name, and compiles them."""

    def __init__(self, package_dirs: Sequence[Path]) -> None:
        self._package_dirs = tuple(package_dirs)

    # jsii calls this with the bundling options as a second argument, which a plain copy doesn't need.
    def try_bundle(self, output_dir: str, *_args: object, **_kwargs: object) -> bool:
        stage(self._package_dirs, Path(output_dir))
        return True


def worker_code(package_dirs: Sequence[Path]) -> lambda_.Code:
    """The code asset of every worker function: `package_dirs` (the project's packages) at the zip root."""
    for package_dir in package_dirs:
        if not (package_dir / "__init__.py").is_file():
            raise FileNotFoundError(
                f"{package_dir} is not a Python package (no __init__.py): the catalog and its jobs' handlers name "
                "packages of the project, shipped as the functions' code"
            )
    check_interpreter()
    return lambda_.Code.from_asset(
        str(package_dirs[0]),
        exclude=list(EXCLUDED),
        # Hash what is shipped, so the function is only updated when the shipped code changes.
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            # Required by the API, never pulled: the local copy always succeeds.
            image=DockerImage.from_registry("local-bundling-only"),
            local=_CopyPackages(package_dirs),
        ),
    )
