"""`jobctl init PATH`: a new deployment project that depends on sqs-jobs, ready to test, run locally and deploy.

It writes (never over an existing file): pyproject.toml (the dependency and `[tool.sqs-jobs] catalog`),
requirements.txt, app.py and cdk.json (the CDK app), a package holding the catalog (one queue, one job, and the
framework's weekly DLQ review) and the job, the job's test on `sqs_jobs.testing`, and a README whose commands work
in it. The templates are files of this package (project_template/), filled by name: `{{name}}`.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path

from sqs_jobs.cli.errors import OperatorUsageError

_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
_PROJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Template file -> where it goes in the project ("package" becomes the package's name, "job" the job's).
_LAYOUT = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "requirements.txt.tmpl": "requirements.txt",
    "requirements-lambda.txt.tmpl": "requirements-lambda.txt",
    "app.py.tmpl": "app.py",
    "cdk.json.tmpl": "cdk.json",
    "README.md.tmpl": "README.md",
    "gitignore.tmpl": ".gitignore",
    "package/__init__.py.tmpl": "{package}/__init__.py",
    "package/catalog.py.tmpl": "{package}/catalog.py",
    "package/jobs/__init__.py.tmpl": "{package}/jobs/__init__.py",
    "package/jobs/job.py.tmpl": "{package}/jobs/{job}.py",
    "tests/test_job.py.tmpl": "tests/test_{job}.py",
}
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class InitError(OperatorUsageError, ValueError):
    """The project can't be written as asked; the message says why and what is accepted."""


@dataclass(frozen=True)
class ProjectSettings:
    project: str
    package: str
    queue: str
    job: str
    stack_name: str
    # `--find-links DIR ` for the README's install line, until sqs-jobs is on the team's index.
    find_links: str

    def values(self) -> dict[str, str]:
        return {
            "project": self.project,
            "package": self.package,
            "queue": self.queue,
            "job": self.job,
            "stack_name": self.stack_name,
            "version": framework_version(),
            "next_minor": _next_minor(framework_version()),
            "find_links": f"--find-links {self.find_links} " if self.find_links else "",
            "install_note": (
                "(`--find-links`: where the sqs-jobs wheel is; drop it once sqs-jobs is on your team's package index.)"
                if self.find_links
                else "(sqs-jobs comes from your team's package index; where it isn't, add `--find-links DIR`, its "
                "wheel's.)"
            )
            # Not on the public PyPI: a package of that name there is someone else's, and `--find-links` alone still
            # lets pip look there (pip weighs the candidates of every source alike).
            + " sqs-jobs is not published on the public PyPI: install it only from your team's index or its wheel."
            " `--find-links` alone still lets pip look on PyPI too; where the team has no index, pin the wheel itself"
            " in requirements.txt (`sqs-jobs[...] @ file:///path/to/sqs_jobs-<version>-py3-none-any.whl`).",
        }


def framework_version() -> str:
    try:
        return version("sqs-jobs")
    except PackageNotFoundError:
        raise InitError("sqs-jobs is not installed in this Python: install it (with its extras) first") from None


def _next_minor(version_text: str) -> str:
    """The first version a project's range leaves out: a minor version may ask something of an upgrade (0.x)."""
    major, minor = (int(part) for part in re.findall(r"\d+", version_text)[:2])
    return f"{major}.{minor + 1}"


def check(settings: ProjectSettings) -> None:
    for what, value in (("--package", settings.package), ("--queue", settings.queue), ("--job", settings.job)):
        if not _IDENTIFIER.fullmatch(value) or keyword.iskeyword(value):
            raise InitError(f"{what} {value!r} must be a lowercase Python identifier (a-z, 0-9, _), not a keyword")
    if settings.package in ("sqs_jobs", "tests"):
        raise InitError(f"--package {settings.package!r} is taken (by the framework or the tests); choose another")
    if not _PROJECT.fullmatch(settings.project):
        raise InitError(f"project name {settings.project!r} must be letters, digits, '.', '_' or '-'")


def init_project(root: Path, settings: ProjectSettings) -> list[Path]:
    """Write the project under `root` (created if missing); the files written. Nothing is written over a file, and
    nothing at all if any would be."""
    check(settings)
    values = settings.values()
    template = files("sqs_jobs.cli") / "project_template"
    planned = {
        root / target.format(package=settings.package, job=settings.job): template.joinpath(source).read_text()
        for source, target in _LAYOUT.items()
    }
    existing = [path for path in planned if path.exists()]
    if existing:
        raise InitError(f"{existing[0]} exists already; nothing was written (jobctl init writes a new project)")
    for path, text in planned.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_PLACEHOLDER.sub(lambda found: values[found.group(1)], text))
    return list(planned)
