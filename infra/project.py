"""Where this deployment's parts are, for its tests and benchmarks (no CDK): its root, the packages its functions'
code asset holds, and the layer `make bundle` builds."""

from __future__ import annotations

from pathlib import Path

from sqs_jobs.catalog_ref import find_project
from sqs_jobs.cdk.asset_staging import project_code_dirs

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LAYER_DIR = PROJECT_ROOT / "build" / "layer"


def code_dirs() -> tuple[Path, ...]:
    """The code asset's packages, as the stack's synth finds them (sqs_jobs.cdk.asset_staging.project_code_dirs)."""
    from sqs_jobs.catalog_ref import load_catalog

    project = find_project(PROJECT_ROOT)
    assert project is not None, "pyproject.toml names the catalog"
    return project_code_dirs(PROJECT_ROOT, project.catalog_ref, load_catalog(project.catalog_ref))
