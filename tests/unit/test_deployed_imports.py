"""What the deployed worker imports when it starts is there on Lambda: the handler's module and each catalog job's
module, and every module they import, are in the worker's code asset (the project's packages:
sqs_jobs.cdk.asset_staging.project_code_dirs) or the framework's copy in the layer, and each of their top-level
third-party imports is in the dependencies layer (`make bundle` vendors the framework and uv.lock's `lambda`
dependency group into build/layer) or in the Lambda runtime (boto3 and its dependencies).

The tests run in a venv with every dependency group installed, so a job whose driver is declared only in the `dev`
group passes its tests and fails on AWS alone, at the worker's cold start (ModuleNotFoundError: every record of
its queue goes back, then to the DLQ without evidence). This test is where a team meets it first: in `make check`,
before any synth or deploy, naming the job's module and line, the import, the group it is declared in and the fix.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from functions.catalog import CATALOG
from infra.project import LAYER_DIR, code_dirs
from infra.project import PROJECT_ROOT as REPO_ROOT
from sqs_jobs.cdk.asset_staging import FRAMEWORK_PACKAGE
from sqs_jobs.cli import deployed_imports, layer_bundle
from sqs_jobs.cli.deployed_imports import DeployedWorker
from sqs_jobs.specs import Catalog
from tests.sample_app.catalog import CATALOG as SAMPLE_CATALOG

HANDLER_MODULE = deployed_imports.HANDLER_MODULE
# The dependency group `jobctl bundle` vendors into the layer.
LAYER_GROUP = "lambda"
LAYER = LAYER_DIR / "python"


def _built(packages: Sequence[Path] | None = None, layer: Path = LAYER) -> DeployedWorker:
    if not (layer / FRAMEWORK_PACKAGE).is_dir():
        pytest.fail(f"{layer.relative_to(REPO_ROOT)} is missing: run `make bundle` (make check does)")
    return DeployedWorker.from_layout(packages if packages is not None else code_dirs(), layer)


def _declared_groups(distribution: str) -> list[str]:
    """The dependency groups of pyproject.toml (and `project` for its dependencies) that name `distribution`."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    lists = {"project": project["project"].get("dependencies", []), **project.get("dependency-groups", {})}
    wanted = canonicalize_name(distribution)
    return [
        group
        for group, specs in lists.items()
        if any(isinstance(spec, str) and canonicalize_name(Requirement(spec).name) == wanted for spec in specs)
    ]


def _what_to_do(name: str) -> str:
    distributions = packages_distributions().get(name, [])
    if not distributions:
        return f"{name} is not installed in the project's venv either"
    distribution = distributions[0]
    if canonicalize_name(distribution) == "sqs-jobs-example":
        return f"{name} is this repository's own package, outside the worker's code asset"
    groups = _declared_groups(distribution)
    if LAYER_GROUP in groups:
        return f"{distribution} is in the {LAYER_GROUP} group, but not in the layer: run `make bundle`"
    declared = f"in the {' and '.join(groups)} group only" if groups else "in no dependency group"
    return f"{distribution} is declared {declared}: `uv add --group {LAYER_GROUP} {distribution}`, then `make bundle`"


def undeployed_imports(roots: list[str], worker: DeployedWorker) -> list[str]:
    return deployed_imports.undeployed_imports(roots, worker, _what_to_do, shown_from=REPO_ROOT)


def _roots(catalog: Catalog) -> list[str]:
    return deployed_imports.start_roots(catalog)


def test_every_module_the_worker_imports_at_its_start_is_deployed() -> None:
    assert undeployed_imports(_roots(CATALOG), _built()) == []


def test_the_layer_is_built_from_the_group_this_test_reads() -> None:
    assert layer_bundle.LAYER_GROUP == LAYER_GROUP


def test_a_jobs_driver_declared_only_for_development_is_named_with_its_group_and_the_fix() -> None:
    # The sample app's database job imports pg8000, which pyproject.toml declares in the dev group only (the app is
    # a test's, never deployed). Were its package shipped in the code asset, its worker would still fail to start.
    shipped_with_tests = _built((*code_dirs(), REPO_ROOT / "tests"))

    assert undeployed_imports(_roots(SAMPLE_CATALOG), shipped_with_tests) == [
        "tests/sample_app/close_account.py:13 imports pg8000, which the deployed worker lacks (not in its code asset, "
        "its layer or the Lambda runtime): pg8000 is declared in the dev group only: "
        "`uv add --group lambda pg8000`, then `make bundle`"
    ]


def test_a_job_module_outside_the_code_asset_is_named() -> None:
    problems = undeployed_imports(_roots(SAMPLE_CATALOG), _built())

    assert problems == [
        f"{job.handler} (the worker loads it at its start) is not in the worker's code asset, which holds only the "
        "packages functions, sqs_jobs (the project's: sqs_jobs.cdk.asset_staging.project_code_dirs)"
        for queue in SAMPLE_CATALOG
        for job in queue.jobs
    ]


def test_an_optional_or_type_checking_import_is_not_one_the_start_needs(tmp_path: Path) -> None:
    package = tmp_path / "jobs_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "job.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "try:\n    import orjson\nexcept ImportError:\n    orjson = None\n"
        "if TYPE_CHECKING:\n    import mypy_boto3_sqs\n"
        "import boto3\nimport aws_lambda_powertools\nfrom . import helpers\n"
    )
    (package / "helpers.py").write_text("import pg8000\n")
    worker = DeployedWorker(code={"jobs_pkg": package}, layer=frozenset({"aws_lambda_powertools"}))

    [problem] = undeployed_imports(["jobs_pkg.job"], worker)

    assert problem.startswith(f"{package / 'helpers.py'}:1 imports pg8000, which the deployed worker lacks")
    assert problem.endswith(
        "pg8000 is declared in the dev group only: `uv add --group lambda pg8000`, then `make bundle`"
    )


def test_a_traced_queue_needs_opentelemetry_in_the_layer_though_no_job_imports_it() -> None:
    from dataclasses import replace

    first = CATALOG.queues[0]
    traced = replace(CATALOG, queues=(replace(first, tracing=True),))
    without = _built()
    assert "opentelemetry" not in without.layer  # the example deploys no traced queue, so its layer has none

    problems = undeployed_imports(_roots(traced), without)

    assert any("sqs_jobs/worker/tracing.py" in problem and "imports opentelemetry" in problem for problem in problems)
    assert undeployed_imports(_roots(replace(CATALOG, queues=(first,))), without) == []
