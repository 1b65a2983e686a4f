"""Which packages `jobctl bundle` puts in the layer from a project's uv.lock (sqs_jobs.cli.layer_bundle): its
`lambda` dependency group when its pyproject.toml declares one, whatever uv's messages say; none otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from sqs_jobs.cli.layer_bundle import BundleError, Installer, locked_requirements

WITH_GROUP = '[project]\nname = "team"\nversion = "1"\n\n[dependency-groups]\nlambda = ["sqs-jobs[worker]", "six"]\n'
WITHOUT_GROUP = '[project]\nname = "team"\nversion = "1"\n\n[dependency-groups]\ndev = ["pytest"]\n'


def uv_that(script: str) -> Installer:
    """An installer whose `uv` is a shell script (the arguments it is given follow as $1, $2, ...)."""
    return Installer(("sh", "-c", script, "uv"), is_uv=True)


def project(tmp_path: Path, pyproject: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "uv.lock").write_text("version = 1\n")
    return tmp_path


def test_the_lambda_group_is_exported_as_pinned_lines(tmp_path: Path) -> None:
    exported = uv_that('echo "$@" > asked; printf "# a comment\\nsix==1.17.0\\n\\nboto3==1.40.0\\n"')
    assert locked_requirements(project(tmp_path, WITH_GROUP), exported) == ["six==1.17.0", "boto3==1.40.0"]
    assert "export --locked --only-group lambda" in (tmp_path / "asked").read_text()


def test_a_project_without_the_group_gets_none_and_uv_is_not_asked(tmp_path: Path) -> None:
    never = uv_that("touch asked; exit 2")
    assert locked_requirements(project(tmp_path, WITHOUT_GROUP), never) is None
    assert not (tmp_path / "asked").exists()


def test_a_failed_export_of_a_declared_group_is_an_error_whatever_it_says(tmp_path: Path) -> None:
    # A message that mentions a group is no sign the project has none: the layer would lose its packages.
    stale = uv_that("echo 'error: the lockfile needs to be updated: dependency group lambda changed' >&2; exit 2")
    with pytest.raises(BundleError, match=r"uv export of the 'lambda' group .* failed: error: the lockfile needs"):
        locked_requirements(project(tmp_path, WITH_GROUP), stale)


def test_a_pyproject_that_is_not_toml_is_named(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"pyproject.toml is not valid TOML"):
        locked_requirements(project(tmp_path, "[dependency-groups\n"), uv_that("exit 0"))
