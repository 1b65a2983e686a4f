"""The pytest fixture of `sqs_jobs.testing`, registered by the distribution's `pytest11` entry point.

`job_harness`: a JobHarness for the project's catalog (`[tool.sqs-jobs] catalog` in the pyproject.toml at or
above pytest's root directory), in a moto account of its own for each test. Nothing is imported until a test asks
for it, so a project that doesn't use it pays nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from sqs_jobs.testing import JobHarness


@pytest.fixture
def job_harness(request: pytest.FixtureRequest) -> Iterator[JobHarness]:
    from sqs_jobs.catalog_ref import NoCatalogError, find_project, load_catalog
    from sqs_jobs.testing import JobHarness

    root = Path(str(request.config.rootpath))
    project = find_project(root)
    if project is None:
        raise NoCatalogError(
            f"job_harness: no pyproject.toml at or above {root} names a catalog ([tool.sqs-jobs] catalog = "
            "'package.module:NAME'); or build JobHarness.running(catalog) yourself"
        )
    with JobHarness.running(load_catalog(project.catalog_ref, search_path=project.root)) as harness:
        yield harness
