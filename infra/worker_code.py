"""The worker Lambda's code asset and the runtime it targets.

The asset is the repository's `functions/` package and nothing else, at the zip root as `functions/...`, so
the handler is `functions.entry.handler` and `functions.catalog` imports as it does in the tests. It is
staged by a plain copy at synth (CDK "local bundling"): no Docker, and infra/, jobctl/, tests/ and .venv
can never leak into the zip.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

# Keep in step with scripts/bundle_layer.sh (TARGET_PYTHON, TARGET_PLATFORM): the layer's compiled wheels
# (wrapt) are built for exactly this interpreter and CPU.
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
HANDLER = "functions.entry.handler"

# Never shipped: bytecode caches (built for this machine's Python) and any tests kept beside the code.
EXCLUDED = ("__pycache__", "*.pyc", "*.pyo", "tests", "test_*.py", "conftest.py", ".*")


@jsii.implements(ILocalBundling)
class _CopyPackage:
    """Copies one package directory into the asset's output, under its own name."""

    def __init__(self, package_dir: Path) -> None:
        self._package_dir = package_dir

    # jsii calls this with the bundling options as a second argument, which a plain copy doesn't need.
    def try_bundle(self, output_dir: str, *_args: object, **_kwargs: object) -> bool:
        shutil.copytree(
            self._package_dir,
            Path(output_dir) / self._package_dir.name,
            ignore=shutil.ignore_patterns(*EXCLUDED),
            dirs_exist_ok=True,
        )
        return True


def worker_code(package_dir: Path) -> lambda_.Code:
    """The code asset of every worker function: `package_dir` (the `functions/` package) at the zip root."""
    if not (package_dir / "__init__.py").is_file():
        raise FileNotFoundError(f"{package_dir} is not a Python package (no __init__.py)")
    return lambda_.Code.from_asset(
        str(package_dir),
        exclude=list(EXCLUDED),
        # Hash what is shipped, so the function is only updated when the shipped code changes.
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            # Required by the API, never pulled: the local copy always succeeds.
            image=DockerImage.from_registry("local-bundling-only"),
            local=_CopyPackage(package_dir),
        ),
    )
