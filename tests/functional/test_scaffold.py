"""`jobctl new job`: the scaffolded module and test, wired into a catalog, run on the real worker: the job fails
(transiently) until it is written, then succeeds; the scaffold never overwrites and refuses bad input in one line."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from functions.catalog import CATALOG
from sqs_jobs.catalog_ref import ENV_CATALOG
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.cli.scaffold import ScaffoldError, scaffold_job
from sqs_jobs.specs import JobSpec, QueueSpec, UnknownQueueError
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.conftest import Harness, envelope

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def package_root(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [name for name in sys.modules if name.startswith("scaffolded")]:
        del sys.modules[name]


def _job_spec(entry: str) -> JobSpec:
    return _job_spec_of(ast.parse(entry.strip().rstrip(","), mode="eval").body)


def _job_spec_of(call: ast.expr) -> JobSpec:
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "JobSpec"
    fields = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords if keyword.arg}
    return JobSpec(**fields)


def _queue_spec(entry: str) -> QueueSpec:
    """The printed QueueSpec, read as data (its jobs as JobSpecs), never executed."""
    call = ast.parse(entry.strip().rstrip(","), mode="eval").body
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "QueueSpec"
    fields: dict[str, object] = {}
    for keyword in call.keywords:
        assert keyword.arg is not None
        if keyword.arg == "jobs":
            assert isinstance(keyword.value, ast.Tuple)
            fields["jobs"] = tuple(_job_spec_of(element) for element in keyword.value.elts)
        else:
            fields[keyword.arg] = ast.literal_eval(keyword.value)
    return QueueSpec(**fields)  # type: ignore[arg-type]


def test_the_scaffolded_job_fails_until_written_then_runs(clients: ClientFactory, package_root: Path) -> None:
    made = scaffold_job(
        CATALOG, "resize_image", "orders", root=package_root, package="scaffolded.jobs", tests="scaffolded_tests"
    )
    (package_root / "scaffolded" / "__init__.py").write_text("")
    (package_root / "scaffolded" / "jobs" / "__init__.py").write_text("")
    spec = _job_spec(made.catalog_entry)
    assert spec.handler == "scaffolded.jobs.resize_image"
    compile(made.test.read_text(), str(made.test), "exec")
    orders = CATALOG.queue("orders")
    catalog = replace(
        CATALOG, queues=tuple(replace(q, jobs=(*q.jobs, spec)) if q is orders else q for q in CATALOG.queues)
    )
    harness = Harness.provisioned(clients, catalog)

    harness.send(envelope("resize_image", "1001"))
    unwritten = harness.deliver()

    assert unwritten is not None and len(unwritten.failed_ids) == 1  # NotImplementedError: transient, retried
    made.module.write_text(made.module.read_text().replace("    raise NotImplementedError(", "    return None  # (", 1))
    del sys.modules["scaffolded.jobs.resize_image"]
    harness.expire_visibility(unwritten)
    written = harness.deliver()
    assert written is not None and written.failed_ids == []
    assert harness.dead_letters() == []


def test_it_writes_nothing_over_an_existing_file_and_refuses_bad_input(tmp_path: Path) -> None:
    made = scaffold_job(CATALOG, "resize_image", "orders", root=tmp_path)
    # In the project's style: its linter finds nothing in either file.
    linted = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--config",
            str(ROOT / "pyproject.toml"),
            str(made.module),
            str(made.test),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert linted.returncode == 0, linted.stdout
    with pytest.raises(ScaffoldError, match="exists already; nothing was written"):
        scaffold_job(CATALOG, "resize_image", "orders", root=tmp_path)
    with pytest.raises(ScaffoldError, match="must match"):
        scaffold_job(CATALOG, "Resize-Image", "orders", root=tmp_path)
    with pytest.raises(ScaffoldError, match="already in the catalog, on queue 'orders'"):
        scaffold_job(CATALOG, "order_confirmation", "orders", root=tmp_path)
    with pytest.raises(UnknownQueueError):
        scaffold_job(CATALOG, "resize_image2", "images", root=tmp_path)


def test_the_command_prints_the_catalog_entry_and_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ENV_CATALOG, "functions.catalog:CATALOG")
    runner = CliRunner()
    done = runner.invoke(jobctl, ["new", "job", "resize_image", "--queue", "orders"], prog_name="jobctl")
    refused = runner.invoke(jobctl, ["new", "job", "resize_image", "--queue", "images"], prog_name="jobctl")

    assert done.exit_code == 0, done.output
    assert "wrote functions/jobs/resize_image.py" in done.output
    assert 'handler="functions.jobs.resize_image"' in done.output
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines() == [
        "jobctl: error: unknown queue 'images'; the catalog has: orders, order_updates, invoices, imports, maintenance "
        "(or --new-queue to declare it with the job)"
    ]
    taken = runner.invoke(jobctl, ["new", "job", "order_confirmation", "--queue", "orders"], prog_name="jobctl")
    assert taken.exit_code == 2
    assert taken.output.strip().splitlines() == [
        "jobctl: error: job 'order_confirmation' is already in the catalog, on queue 'orders'"
    ]


def test_a_job_on_a_queue_not_yet_declared_gets_the_queue_entry_which_builds_a_valid_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ENV_CATALOG, "functions.catalog:CATALOG")
    runner = CliRunner()
    done = runner.invoke(
        jobctl, ["new", "job", "make_thumbnail", "--queue", "images", "--new-queue"], prog_name="jobctl"
    )

    assert done.exit_code == 0, done.output
    assert "add to the catalog's queues in " in done.output and "functions/catalog.py (CATALOG)" in done.output
    entry = done.output[done.output.index("QueueSpec(") : done.output.index("then: run the test")]
    queue = _queue_spec(entry)
    catalog = replace(CATALOG, queues=(*CATALOG.queues, queue))
    assert catalog.queue_for_job("make_thumbnail").name == "images"
    assert catalog.queue("images").jobs[0].handler == "functions.jobs.make_thumbnail"
    again = runner.invoke(jobctl, ["new", "job", "other_job", "--queue", "orders", "--new-queue"], prog_name="jobctl")
    assert again.exit_code == 2
    assert again.output.strip().splitlines() == [
        "jobctl: error: queue 'orders' is in the catalog already; add the job to it without --new-queue"
    ]
