"""The stack and the operator's tools read the runtime's names without loading the runtime: `infra/` and
`jobctl`'s status and console import no Powertools, and functions/worker/names.py imports nothing but the
standard library. Inside the worker, calls point one way: the batch (runtime.py) calls a job's run
(execution.py) and its settling (settlement.py), never the other way round."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "module", ["infra.stack", "infra.monitoring", "jobctl.status", "jobctl.console.charts", "functions.worker.settings"]
)
def test_the_module_loads_no_powertools(module: str) -> None:
    probe = (
        f"import sys, {module}\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} & {'aws_lambda_powertools'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def test_the_names_module_imports_only_the_standard_library() -> None:
    tree = ast.parse((ROOT / "functions" / "worker" / "names.py").read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def _worker_modules_imported_at_run_time(module: str) -> set[str]:
    """The worker's modules `module` imports, at the top or in a function; those under TYPE_CHECKING aside."""
    tree = ast.parse((ROOT / "functions" / "worker" / f"{module}.py").read_text())
    for_type_checking = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
        for statement in block.body
        for node in ast.walk(statement)
    }
    imported: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in for_type_checking:
            continue
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "functions.worker":
            imported |= {f"functions.worker.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    return {name.removeprefix("functions.worker.") for name in imported if name.startswith("functions.worker.")}


@pytest.mark.parametrize(
    ("module", "never"),
    [
        ("invocation", {"runtime", "execution", "settlement"}),
        ("execution", {"runtime", "settlement"}),
        ("settlement", {"runtime", "execution"}),
    ],
)
def test_the_worker_s_parts_are_called_by_the_batch_and_never_call_back(module: str, never: set[str]) -> None:
    # runtime.py orchestrates a batch and calls execution.py (a job's run) and settlement.py (what becomes of a
    # record); all three read invocation.py. Settlement names an Execution for type checking only.
    assert _worker_modules_imported_at_run_time(module) & never == set()


def test_the_worker_s_parts_load_without_the_batch() -> None:
    probe = (
        "import sys, functions.worker.execution, functions.worker.settlement\n"
        "print('functions.worker.runtime' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "False", result.stdout


FRAMEWORK = ("infra", "functions/worker", "jobctl")


def test_the_framework_names_nothing_of_the_example_app() -> None:
    # Jobs and resources by name; queues (ordinary words) as names in code: quoted, or in a physical name.
    from sqs_jobs.catalog import CATALOG
    from sqs_jobs.resources import AlarmTopic, DeadLetterQueues

    # The runtime's own kinds are the framework's (its alarm topic, its DLQs), whatever the app calls them.
    apps = [spec.name for spec in CATALOG.resources if not isinstance(spec, AlarmTopic | DeadLetterQueues)]
    words = [*CATALOG.job_names, *apps]
    patterns = [re.compile(rf"\b{re.escape(word)}\b") for word in words]
    patterns += [re.compile(rf"[\"'/-]{re.escape(queue)}[\"'/-]") for queue in CATALOG.queue_names]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in FRAMEWORK
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(pattern.search(line) for pattern in patterns)
    ]
    assert found == []


def test_the_wheels_version_is_read_with_the_standard_library_alone() -> None:
    # Hatch reads it in the wheel's isolated build environment, where nothing but the build backend is installed.
    probe = "import sys; sys.path.insert(0, 'lib'); import sqs_jobs._wheel_version as v; print(v.__version__)"
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("0.")
