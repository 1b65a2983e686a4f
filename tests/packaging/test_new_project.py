"""A new team's first hour, outside this repository: the wheel `make dist` builds, installed with its extras into
a fresh venv, `jobctl init` a project, and in that project, with nothing copied from here: its tests pass, its job
runs on the local engine, `jobctl bundle` builds the layer and `cdk synth` a stack whose workers' code asset holds
only the project's code and whose handler is the framework's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from sqs_jobs.local.engine import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
UV = REPO_ROOT / ".tools" / "bin" / "uv"
CDK = REPO_ROOT / "node_modules" / ".bin" / "cdk"

pytestmark = pytest.mark.slow


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _clean_env(project: Path) -> dict[str, str]:
    """What a new shell on this machine has (its network and certificate settings), with the project's venv first
    on PATH, and no AWS setting, virtual environment or path of this repository."""
    dropped = ("AWS_", "VIRTUAL_ENV", "PYTHON", "UV_PROJECT", "JOBS_", "CDK_")
    env = {name: value for name, value in os.environ.items() if not name.startswith(dropped)}
    env["PATH"] = f"{project / '.venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    env["JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION"] = "1"
    env["CDK_DISABLE_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert UV.is_file(), f"{UV} is missing: run `make dev`"
    dist = tmp_path_factory.mktemp("dist")
    _run(UV, "build", "--package", "sqs-jobs", "--wheel", "--out-dir", dist, "--quiet", cwd=REPO_ROOT)
    [wheel] = dist.glob("sqs_jobs-*-py3-none-any.whl")
    # The project's venv first (jobctl init writes beside it), with the framework and its extras, as the
    # project's README says.
    root = tmp_path_factory.mktemp("team") / "shop"
    venv = root / ".venv"
    _run(UV, "venv", "--quiet", "--python", sys.executable, "--no-python-downloads", venv, cwd=root.parent)
    _run(UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python", f"{wheel}[worker,cdk,cli,testing]",
         "pytest", cwd=root.parent)  # fmt: skip
    _run(venv / "bin" / "jobctl", "init", root, "--find-links", dist, cwd=root.parent, env=_clean_env(root))
    return root


def test_init_writes_a_project_whose_catalog_is_its_own(project: Path) -> None:
    written = sorted(str(path.relative_to(project)) for path in project.rglob("*") if ".venv" not in path.parts)
    assert {"app.py", "cdk.json", "pyproject.toml", "README.md", "functions/catalog.py", "tests/test_hello.py"} <= set(
        written
    )
    assert 'catalog = "functions.catalog:CATALOG"' in (project / "pyproject.toml").read_text()
    # An upgrade is one line: the one exact pin of the framework is requirements.txt's.
    pinned = f"=={version('sqs-jobs')}"
    lines = [
        line for name in ("requirements.txt", "pyproject.toml") for line in (project / name).read_text().splitlines()
    ]
    assert [line for line in lines if pinned in line] == [f"sqs-jobs[worker,cdk,cli,testing]{pinned}"]
    # Its README installs the framework from where the team keeps it, never from the public PyPI (not published
    # there: a package of that name would be someone else's).
    readme = (project / "README.md").read_text()
    assert "pypi.org" not in readme and "not published on the public PyPI" in readme
    # Nothing of this repository: no example job, no import of its tests.
    texts = "\n".join(path.read_text() for path in project.rglob("*.py") if ".venv" not in path.parts)
    assert "order_confirmation" not in texts and "tests.functional" not in texts


def test_its_tests_pass_on_the_testing_api(project: Path) -> None:
    output = _run(project / ".venv" / "bin" / "pytest", "-q", "-p", "no:cacheprovider", cwd=project,
                  env=_clean_env(project))  # fmt: skip
    assert "2 passed" in output


@pytest.fixture
def local_engine(project: Path) -> Iterator[tuple[str, dict[str, str]]]:
    port = free_port()
    env = _clean_env(project)
    engine = subprocess.Popen(
        [project / ".venv" / "bin" / "jobctl", "local", "--port", str(port)],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert engine.stdout is not None
        ready = engine.stdout.readline()
        assert ready.startswith("local engine ready at"), ready
        local = {
            **env,
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
        }
        yield f"http://127.0.0.1:{port}", local
    finally:
        engine.send_signal(signal.SIGINT)
        engine.wait(timeout=60)


def test_its_job_runs_on_the_local_engine(project: Path, local_engine: tuple[str, dict[str, str]]) -> None:
    _, env = local_engine
    jobctl = project / ".venv" / "bin" / "jobctl"
    _run(jobctl, "enqueue", "work", "hello", "7", cwd=project, env=env)
    deadline = time.monotonic() + 30
    while True:
        shown = json.loads(_run(jobctl, "--output", "json", "job", "show", "hello", "7", cwd=project, env=env))
        if shown["verdict"] == "completed" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert shown["verdict"] == "completed", shown


def test_synth_ships_the_projects_code_and_runs_the_frameworks_handler(project: Path) -> None:
    env = _clean_env(project)
    _run(project / ".venv" / "bin" / "jobctl", "bundle", "--uv", UV, cwd=project, env=env)
    _run(CDK, "synth", "--quiet", cwd=project, env=env)

    template = json.loads((project / "cdk.out" / "SqsJobs.template.json").read_text())
    functions = [res["Properties"] for res in template["Resources"].values() if res["Type"] == "AWS::Lambda::Function"]
    assert {function["Handler"] for function in functions} == {"sqs_jobs.worker.entry.handler"}
    assert {function["Environment"]["Variables"]["JOBS_CATALOG"] for function in functions} == {
        "functions.catalog:CATALOG"
    }
    assets = json.loads(next((project / "cdk.out").glob("SqsJobs.assets.json")).read_text())["files"]
    staged = [project / "cdk.out" / asset["source"]["path"] for asset in assets.values()]
    contents = {tuple(sorted(path.name for path in directory.iterdir())) for directory in staged if directory.is_dir()}
    # The code asset: the project's package only. The layer: the framework and its worker's dependencies.
    assert ("functions",) in contents
    [layer] = [directory for directory in staged if (directory / "python" / "sqs_jobs").is_dir()]
    assert (layer / "python" / "aws_lambda_powertools").is_dir()
    assert not (layer / "python" / "sqs_jobs" / "cli").exists()


def test_bundle_refuses_a_layer_that_lacks_what_a_job_imports(project: Path) -> None:
    job = project / "functions" / "jobs" / "hello.py"
    written = job.read_text()
    job.write_text(
        written.replace("from __future__ import annotations\n", "from __future__ import annotations\n\nimport yaml\n")
    )
    try:
        result = subprocess.run(
            [project / ".venv" / "bin" / "jobctl", "bundle", "--uv", UV],
            cwd=project,
            env=_clean_env(project),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        job.write_text(written)

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "jobctl: error: the deployed worker would fail at its start: functions/jobs/hello.py:5 imports yaml, which the "
        "deployed worker lacks (not in its code asset, its layer or the Lambda runtime): add PyYAML to "
        "requirements-lambda.txt (or uv.lock's lambda group), then jobctl bundle"
    ]
