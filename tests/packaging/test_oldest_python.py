"""The operators' and the tests' extras on the oldest Python the distribution supports (lib/pyproject.toml's
requires-python), where a team's laptops and CI may still be: the wheel with `cli` and `testing` installed into a
fresh venv on it, `jobctl` answers, `jobctl init` writes a project, and that project's tests pass on the testing
API there. (The worker runs on Lambda's python3.13 only: its layer is built for it, docs/infrastructure.md.)"""

from __future__ import annotations

import shutil
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.packaging.test_distribution import OLDEST_PYTHON, UV, _wheel
from tests.packaging.test_new_project import _clean_env, _run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def oldest_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert UV.is_file(), f"{UV} is missing: run `make dev`"
    interpreter = shutil.which(OLDEST_PYTHON)
    assert interpreter is not None, f"{OLDEST_PYTHON} is not on PATH: the oldest supported Python must be tested"
    dist = tmp_path_factory.mktemp("dist")
    [wheel] = _wheel(dist)
    root = tmp_path_factory.mktemp("team") / "laptop"
    venv = root / ".venv"
    _run(UV, "venv", "--quiet", "--python", interpreter, "--no-python-downloads", venv, cwd=root.parent)
    _run(UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python", f"{wheel}[cli,testing]", "pytest",
         cwd=root.parent)  # fmt: skip
    _run(venv / "bin" / "jobctl", "init", root, "--find-links", dist, cwd=root.parent, env=_clean_env(root))
    return root


def test_jobctl_answers_on_the_oldest_python(oldest_project: Path) -> None:
    python = oldest_project / ".venv" / "bin" / "python"
    said = _run(python, "-c", "import sys; print(sys.version_info[:2])", cwd=oldest_project)
    assert said.strip() == str(tuple(int(part) for part in OLDEST_PYTHON.removeprefix("python").split(".")))
    assert said.strip() != str(sys.version_info[:2])  # not the interpreter these tests run on
    env = _clean_env(oldest_project)
    assert _run(oldest_project / ".venv" / "bin" / "jobctl", "--version", cwd=oldest_project, env=env).strip() == (
        f"jobctl {version('sqs-jobs')}"
    )
    # Its console and local engine import there too (flask, moto's server, the durable testing SDK).
    _run(python, "-c", "import sqs_jobs.cli.console.app, sqs_jobs.local.engine", cwd=oldest_project, env=env)


def test_a_new_projects_tests_pass_on_the_oldest_python(oldest_project: Path) -> None:
    output = _run(oldest_project / ".venv" / "bin" / "pytest", "-q", "-p", "no:cacheprovider", cwd=oldest_project,
                  env=_clean_env(oldest_project))  # fmt: skip
    assert "2 passed" in output
