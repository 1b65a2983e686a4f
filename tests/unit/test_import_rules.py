"""The stack and the operator's tools read the runtime's names without loading the runtime: `lib/sqs_jobs/cdk/` and
`jobctl`'s status and console import no Powertools, and lib/sqs_jobs/worker/names.py imports nothing but the
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
    "module",
    [
        "sqs_jobs.cdk.stack",
        "sqs_jobs.cdk.monitoring",
        "sqs_jobs.cli.status",
        "sqs_jobs.cli.console.charts",
        "sqs_jobs.worker.settings",
    ],
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
    tree = ast.parse((ROOT / "lib" / "sqs_jobs" / "worker" / "names.py").read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def _worker_modules_imported_at_run_time(module: str) -> set[str]:
    """The worker's modules `module` imports, at the top or in a function; those under TYPE_CHECKING aside."""
    tree = ast.parse((ROOT / "lib" / "sqs_jobs" / "worker" / f"{module}.py").read_text())
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
        elif isinstance(node, ast.ImportFrom) and node.module == "sqs_jobs.worker":
            imported |= {f"sqs_jobs.worker.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    return {name.removeprefix("sqs_jobs.worker.") for name in imported if name.startswith("sqs_jobs.worker.")}


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
        "import sys, sqs_jobs.worker.execution, sqs_jobs.worker.settlement\n"
        "print('sqs_jobs.worker.runtime' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "False", result.stdout


# The whole distribution: what a team installs.
FRAMEWORK = ("lib/sqs_jobs",)


def test_the_framework_names_nothing_of_the_example_app() -> None:
    # Jobs and resources by name; queues (ordinary words) as names in code: quoted, or in a physical name.
    from functions.catalog import CATALOG
    from sqs_jobs.resources import AlarmTopic, DeadLetterQueues

    # The runtime's own kinds are the framework's (its alarm topic, its DLQs), whatever the app calls them.
    apps = [spec.name for spec in CATALOG.resources if not isinstance(spec, AlarmTopic | DeadLetterQueues)]
    # The framework's own jobs (the DLQ review) and their queue are the framework's names, added by one line.
    jobs = [job.name for queue in CATALOG for job in queue.jobs if not job.handler.startswith("sqs_jobs.")]
    queues = [queue.name for queue in CATALOG if any(not job.handler.startswith("sqs_jobs.") for job in queue.jobs)]
    words = [*jobs, *apps]
    patterns = [re.compile(rf"\b{re.escape(word)}\b") for word in words]
    patterns += [re.compile(rf"[\"'/-]{re.escape(queue)}[\"'/-]") for queue in queues]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in FRAMEWORK
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(pattern.search(line) for pattern in patterns)
    ]
    assert found == []


def test_importing_the_package_loads_nothing_but_it() -> None:
    # A service's `from sqs_jobs import JobPublisher` loads the publisher's modules; the worker's entry, jobctl's
    # start-up, the CDK app load what they name. No catalog is built, no boto3 imported by `import sqs_jobs`.
    probe = (
        "import sys; sys.path.insert(0, 'lib'); import sqs_jobs\n"
        "print(sorted(m for m in sys.modules if m.startswith(('sqs_jobs', 'boto', 'functions'))))\n"
        "from sqs_jobs import JobPublisher\n"
        "print(JobPublisher.__module__)"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['sqs_jobs']", "sqs_jobs.publisher"]


@pytest.mark.parametrize(
    ("package", "never"),
    [
        # The publisher (the distribution's top-level modules) runs in services with boto3 alone.
        ("", ("sqs_jobs.worker", "sqs_jobs.durable.", "sqs_jobs.cli", "sqs_jobs.cdk", "sqs_jobs.local")),
        # The worker runs on Lambda with its layer: never the CLI, the CDK, the local engine or the testing API.
        ("worker", ("sqs_jobs.cli", "sqs_jobs.cdk", "sqs_jobs.local", "sqs_jobs.testing")),
        ("durable", ("sqs_jobs.cli", "sqs_jobs.cdk", "sqs_jobs.local", "sqs_jobs.testing")),
        ("maintenance", ("sqs_jobs.cli", "sqs_jobs.cdk", "sqs_jobs.local", "sqs_jobs.testing")),
    ],
)
def test_the_arrows_inside_the_distribution_point_one_way(package: str, never: tuple[str, ...]) -> None:
    base = ROOT / "lib" / "sqs_jobs" / package
    sources = sorted(base.glob("*.py")) if not package else sorted(base.rglob("*.py"))
    found = []
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [
                f"{source.relative_to(ROOT)}: {name}"
                for name in names
                if name.startswith(never) and name not in SHARED_CODEC
            ]
    assert found == []


# The worker's standard-library-only modules every side reads a key's record with: the names and the codec the
# runtime writes it with (the publisher's results, jobctl, the stack). They import nothing else, so a service
# that reads results still needs boto3 alone.
SHARED_CODEC = ("sqs_jobs.worker.key_life", "sqs_jobs.worker.names")


@pytest.mark.parametrize("module", SHARED_CODEC)
def test_the_shared_codec_imports_the_standard_library_and_itself_only(module: str) -> None:
    source = ROOT / "lib" / (module.replace(".", "/") + ".py")
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module or "")
    outside = {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names}
    assert outside <= set(SHARED_CODEC), outside


# A feature's code, loaded only by a queue whose jobs declare it (issue 33: pay only for what a queue uses), and the
# failure path's.
FEATURE_MODULES = (
    "sqs_jobs.flow_control",
    "sqs_jobs.resources",
    "sqs_jobs.durable",
    "sqs_jobs.batches",
    "sqs_jobs.schedule_expressions",
    "sqs_jobs.worker.flow_control",
    "sqs_jobs.worker.rate_limit",
    "sqs_jobs.worker.key_concurrency",
    "sqs_jobs.worker.uniqueness",
    "sqs_jobs.worker.batch_members",
    "sqs_jobs.worker.durable_start",
    "sqs_jobs.worker.http",
    "sqs_jobs.worker.secrets",
    "sqs_jobs.worker.deadletter",
    # Traces: OpenTelemetry and the worker's spans, for a queue that says `tracing` only.
    "sqs_jobs.worker.tracing",
    "opentelemetry",
    # The failure path's: loaded by the first record that fails or is handed back.
    "sqs_jobs.worker.failure_path",
    "sqs_jobs.worker.classify",
    "zoneinfo",
)


@pytest.mark.parametrize(
    ("job", "loaded"),
    [
        ({}, ()),
        ({"unique_for_s": 60}, ("sqs_jobs.worker.uniqueness",)),
        # The catalog's own import; the worker's flow control is loaded by the first record that passes it.
        ({"concurrency": "KeyConcurrency(limit=2)"}, ("sqs_jobs.flow_control",)),
    ],
)
def test_a_worker_loads_a_features_code_only_for_a_queue_that_uses_it(
    job: dict[str, object], loaded: tuple[str, ...]
) -> None:
    settings = ", ".join(f"{name}={value}" for name, value in job.items())
    probe = (
        "import io, sys\n"
        "from sqs_jobs.worker.entry import handler\n"
        "from sqs_jobs.specs import Catalog, JobSpec, QueueSpec\n"
        + ("from sqs_jobs.flow_control import KeyConcurrency\n" if "concurrency" in job else "")
        + f"queue = QueueSpec(name='plain', jobs=(JobSpec(name='work', handler='bench.noop_job', {settings}),))\n"
        "Catalog(queues=(queue,))\n"
        "from sqs_jobs.worker.clients import ClientFactory, new_session\n"
        "from sqs_jobs.worker.observability import Observability\n"
        "from sqs_jobs.worker.runtime import Worker\n"
        "from sqs_jobs.worker.settings import WorkerSettings\n"
        "settings = WorkerSettings(\n"
        "    queue=queue, queue_url='q', dlq_url='d', idempotency_table='t', runtime_role_id='r'\n"
        ")\n"
        "Worker(settings=settings, clients=ClientFactory(session=new_session(region_name='us-east-1')),\n"
        "       observability=Observability.create(output=io.StringIO()))\n"
        f"print(sorted(set({FEATURE_MODULES!r}) & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(sorted(loaded))
