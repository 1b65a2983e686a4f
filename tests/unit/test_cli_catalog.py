"""jobctl runs the project's catalog: --catalog, else $JOBS_CATALOG, else `[tool.sqs-jobs] catalog` in the nearest
pyproject.toml (its project's directory on the import path); none of them is a one-line usage error."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from functions.catalog import CATALOG
from sqs_jobs.catalog_ref import ENV_CATALOG, find_project
from sqs_jobs.cli.cli import main as jobctl

OTHER = "tests.unit.test_settings:TWO_QUEUES"
# An unknown job's usage error lists the catalog's jobs: which catalog jobctl read, before any AWS call.
SHOW_UNKNOWN = ["job", "show", "no_such_job", "1"]


def _accepted(output: str) -> list[str]:
    [line] = [line for line in output.splitlines() if "unknown job" in line]
    return line.split("accepted: ", 1)[1].split(", ")


@pytest.fixture(autouse=True)
def _no_catalog_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_CATALOG, raising=False)
    monkeypatch.chdir(tmp_path)  # no pyproject.toml at or above a pytest temporary directory


def test_outside_any_project_and_without_a_setting_jobctl_says_how_to_name_one() -> None:
    result = CliRunner().invoke(jobctl, SHOW_UNKNOWN, prog_name="jobctl")

    assert result.exit_code == 2
    [line] = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("jobctl: error: no catalog: this directory is in no project naming one")
    assert "--catalog MODULE:NAME" in line and "jobctl init PATH" in line


def test_a_projects_own_package_is_imported_from_its_root_wherever_jobctl_runs_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A package no sys.path entry holds, as a console script finds it (its path starts at the script's directory).
    package = tmp_path / "shop_jobs_7f3a"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "catalog.py").write_text("from tests.unit.test_settings import TWO_QUEUES as CATALOG\n")
    (tmp_path / "pyproject.toml").write_text('[tool.sqs-jobs]\ncatalog = "shop_jobs_7f3a.catalog:CATALOG"\n')
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path / "docs")
    monkeypatch.setattr("sys.path", [entry for entry in __import__("sys").path if entry not in ("", str(tmp_path))])

    result = CliRunner().invoke(jobctl, SHOW_UNKNOWN, prog_name="jobctl")

    assert _accepted(result.output) == ["send_mail", "resize"]


def test_the_catalog_option_names_another_projects_catalog() -> None:
    result = CliRunner().invoke(jobctl, [*SHOW_UNKNOWN, "--catalog", OTHER], prog_name="jobctl")

    assert result.exit_code == 2
    assert _accepted(result.output) == ["send_mail", "resize"]


def test_the_environment_names_it_and_the_option_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CATALOG, OTHER)
    assert _accepted(CliRunner().invoke(jobctl, SHOW_UNKNOWN, prog_name="jobctl").output) == ["send_mail", "resize"]

    shipped = "functions.catalog:CATALOG"
    result = CliRunner().invoke(jobctl, ["--catalog", shipped, *SHOW_UNKNOWN], prog_name="jobctl")
    assert _accepted(result.output) == list(CATALOG.job_names)


def test_a_project_names_it_once_in_its_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "shop"\n\n[tool.sqs-jobs]\ncatalog = "{OTHER}"\n')
    inside = tmp_path / "services" / "checkout"
    inside.mkdir(parents=True)
    monkeypatch.chdir(inside)

    result = CliRunner().invoke(jobctl, SHOW_UNKNOWN, prog_name="jobctl")

    found = find_project(inside)
    assert found is not None and (found.root, found.catalog_ref) == (tmp_path.resolve(), OTHER)
    assert _accepted(result.output) == ["send_mail", "resize"]


def test_a_pyproject_without_the_setting_or_unreadable_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(f'[tool.sqs-jobs]\ncatalog = "{OTHER}"\n')
    nested = tmp_path / "broken"
    nested.mkdir()
    (nested / "pyproject.toml").write_text("[tool.sqs-jobs\n")  # not TOML
    deeper = nested / "plain"
    deeper.mkdir()
    (deeper / "pyproject.toml").write_text('[project]\nname = "other"\n')

    found = find_project(deeper)
    assert found is not None and found.catalog_ref == OTHER


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("functions.catalog", "is malformed"),
        ("no_such_package.catalog:CATALOG", "module 'no_such_package.catalog' can't be imported"),
        ("tests.unit.test_settings:NOT_A_CATALOG", "is a dict"),
    ],
)
def test_a_catalog_that_cant_be_loaded_is_a_one_line_usage_error(ref: str, says: str) -> None:
    result = CliRunner().invoke(jobctl, [*SHOW_UNKNOWN, "--catalog", ref], prog_name="jobctl")

    assert result.exit_code == 2
    [line] = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("jobctl: error: --catalog: catalog reference") and says in line
    assert "accepted: 'package.module:NAME'" in line


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("raise NameError(\"name 'QueueSpc' is not defined\")\n", "NameError: name 'QueueSpc' is not defined"),
        ("import no_such_driver_7f3a\n", "ModuleNotFoundError"),
        ("CATALOG = (\n", "SyntaxError"),
    ],
)
def test_a_catalog_whose_own_code_fails_is_one_line_naming_the_projects_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, says: str
) -> None:
    package = tmp_path / f"broken_{abs(hash(source)) % 10**6}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "catalog.py").write_text(source)
    (tmp_path / "pyproject.toml").write_text(f'[tool.sqs-jobs]\ncatalog = "{package.name}.catalog:CATALOG"\n')
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(jobctl, SHOW_UNKNOWN, prog_name="jobctl")

    assert result.exit_code == 2
    [line] = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("jobctl: error: [tool.sqs-jobs] catalog in pyproject.toml: catalog reference")
    assert says in line
