from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sqs_jobs.cdk import asset_staging
from sqs_jobs.cdk.asset_staging import BytecodeError, WrongInterpreterError, check_interpreter, stage
from sqs_jobs.cli import layer_bundle

REPO_ROOT = Path(__file__).resolve().parents[2]
LAYER_BUNDLE = Path(layer_bundle.__file__).parent


def _package(root: Path, name: str, source: str = "VALUE = 1\n") -> Path:
    package = root / name
    (package / "tests").mkdir(parents=True)
    (package / "__init__.py").write_text(source)
    (package / "tests" / "test_it.py").write_text("")
    (package / "conftest.py").write_text("")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"stale")
    return package


def test_stage_copies_each_package_without_tests_or_caches_and_compiles_it(tmp_path: Path) -> None:
    output = tmp_path / "out"
    stage([_package(tmp_path, "alpha"), _package(tmp_path, "beta")], output)
    shipped = sorted(str(path.relative_to(output)) for path in output.rglob("*") if path.is_file())
    tag = sys.implementation.cache_tag
    assert shipped == [
        "alpha/__init__.py",
        f"alpha/__pycache__/__init__.{tag}.pyc",
        "beta/__init__.py",
        f"beta/__pycache__/__init__.{tag}.pyc",
    ]


def test_stage_without_bytecode_ships_sources_only(tmp_path: Path) -> None:
    output = tmp_path / "out"
    stage([_package(tmp_path, "alpha")], output, bytecode=False)
    assert [path.name for path in output.rglob("*") if path.is_file()] == ["__init__.py"]


def test_a_module_that_does_not_compile_stops_the_staging(tmp_path: Path) -> None:
    with pytest.raises(BytecodeError, match="compiling"):
        stage([_package(tmp_path, "broken", "def (:\n")], tmp_path / "out")


def test_the_synth_refuses_an_interpreter_other_than_the_runtimes(monkeypatch: pytest.MonkeyPatch) -> None:
    check_interpreter()  # the venv runs the runtime's version
    monkeypatch.setattr(asset_staging, "RUNTIME_VERSION", (3, 99))
    with pytest.raises(WrongInterpreterError, match=r"compiled by Python 3\.99 .* this synth runs Python 3\.13"):
        check_interpreter()


def test_the_runtime_version_is_the_one_everything_else_targets() -> None:
    wanted = ".".join(map(str, asset_staging.RUNTIME_VERSION))
    assert layer_bundle.TARGET_PYTHON == wanted
    assert f'requires-python = ">={wanted},<' in (LAYER_BUNDLE / "project_template" / "pyproject.toml.tmpl").read_text()
    assert f"/versions/{wanted}.*/bin/python{wanted}" in (REPO_ROOT / "Makefile").read_text()
    assert f'requires-python = ">={wanted},<' in (REPO_ROOT / "pyproject.toml").read_text()


def test_a_handler_missing_from_the_code_asset_stops_synth_in_one_line(tmp_path: Path) -> None:
    from sqs_jobs.cdk.asset_staging import HandlerNotShippedError, check_handlers
    from sqs_jobs.maintenance import MAINTENANCE_RESOURCES, maintenance_queue
    from sqs_jobs.specs import Catalog, JobSpec, QueueSpec

    package = _package(tmp_path, "shop_jobs", "")
    (package / "jobs").mkdir()
    (package / "jobs" / "__init__.py").write_text("")
    (package / "jobs" / "send_receipt.py").write_text("def run(envelope, context):\n    return None\n")

    def catalog(handler: str) -> Catalog:
        job = JobSpec(name="send_receipt", handler=handler, description="a receipt")
        queue = QueueSpec(name="mail", description="mail", jobs=(job,))
        return Catalog(resources=MAINTENANCE_RESOURCES, queues=(queue, maintenance_queue()))

    check_handlers([package], catalog("shop_jobs.jobs.send_receipt"))  # the framework's DLQ review: its layer
    with pytest.raises(HandlerNotShippedError) as raised:
        check_handlers([package], catalog("shop_jobs.jobs.send_reciept"))

    assert str(raised.value) == (
        "job 'send_receipt' (queue 'mail'): its handler 'shop_jobs.jobs.send_reciept' is not in the functions' code "
        "(no shop_jobs/jobs/send_reciept.py under the project's packages shop_jobs)"
    )
