"""What the deployed worker imports when it starts is there on Lambda: the handler's module and each catalog job's
module, and every module they import, are in the worker's code asset (the project's packages:
sqs_jobs.cdk.asset_staging.project_code_dirs) or the framework's copy in the layer, and each of their top-level
third-party imports is in the dependencies layer (`make bundle` vendors the framework and uv.lock's `lambda`
dependency group into build/layer) or in the Lambda runtime (boto3 and its dependencies).

The tests run in a venv with every dependency group installed, so a job whose driver is declared only in the `dev`
group passes its tests and fails on AWS alone, at the worker's cold start (ModuleNotFoundError: every record of
its queue goes back, then to the DLQ without evidence). This test is where a team meets it first: in `make check`,
before any synth or deploy, naming the job's module and line, the import, the group it is declared in and the fix.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from functions.catalog import CATALOG
from infra.project import LAYER_DIR, code_dirs
from infra.project import PROJECT_ROOT as REPO_ROOT
from sqs_jobs.cdk.asset_staging import FRAMEWORK_PACKAGE, RUNTIME_MODULES
from sqs_jobs.cli import layer_bundle
from sqs_jobs.specs import Catalog
from tests.sample_app.catalog import CATALOG as SAMPLE_CATALOG

# The module Lambda calls (sqs_jobs.cdk.worker_code HANDLER); it loads the jobs' modules by name at its start.
HANDLER_MODULE = "sqs_jobs.worker.entry"
# The dependency group `jobctl bundle` vendors into the layer.
LAYER_GROUP = "lambda"
LAYER = LAYER_DIR / "python"


@dataclass(frozen=True)
class DeployedWorker:
    """Where the deployed worker's imports come from: its code asset's packages, its layer, the runtime."""

    code: Mapping[str, Path]  # top-level package -> its source directory (the framework: its copy in the layer)
    layer: frozenset[str]  # top-level modules and packages in the layer
    runtime: frozenset[str] = frozenset(RUNTIME_MODULES)

    @classmethod
    def as_built(cls, packages: Sequence[Path] | None = None, layer: Path = LAYER) -> DeployedWorker:
        if not (layer / FRAMEWORK_PACKAGE).is_dir():
            pytest.fail(f"{layer.relative_to(REPO_ROOT)} is missing: run `make bundle` (make check does)")
        code = {path.name: path for path in (packages if packages is not None else code_dirs())}
        code[FRAMEWORK_PACKAGE] = layer / FRAMEWORK_PACKAGE
        return cls(code=code, layer=frozenset(_top_level_names(layer)) - {FRAMEWORK_PACKAGE})

    def source(self, module: str) -> Path | None:
        """The file of `module` in the code asset, or None."""
        top, *rest = module.split(".")
        if top not in self.code:
            return None
        path = self.code[top].joinpath(*rest)
        candidates = (path.with_name(path.name + ".py"), path / "__init__.py") if rest else (path / "__init__.py",)
        return next((candidate for candidate in candidates if candidate.is_file()), None)


def _top_level_names(layer: Path) -> Iterator[str]:
    """What `import <name>` finds in a directory on the path: packages (directories) and modules (source files and
    extension modules), not the wheels' metadata."""
    for entry in layer.iterdir():
        if entry.is_dir() and entry.name.isidentifier():
            yield entry.name
        elif entry.is_file() and entry.name.endswith((".py", ".so", ".pyd")):
            yield entry.name.split(".")[0]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _guards_import_error(statement: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError"}
    for handler in statement.handlers:
        caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(kind, ast.Name) and kind.id in names for kind in caught):
            return True
    return False


def top_level_imports(source: Path, module: str) -> Iterator[tuple[str, int]]:
    """(module name, line) of every import a module runs when it is imported: at its top level, not under `if
    TYPE_CHECKING` nor in a `try` that catches ImportError (an optional import). `from a import b` yields `a` and
    `a.b` (b may be a submodule)."""
    package = module if source.name == "__init__.py" else module.rpartition(".")[0]

    def visit(statements: Iterable[ast.stmt]) -> Iterator[tuple[str, int]]:
        for node in statements:
            if isinstance(node, ast.Import):
                yield from ((alias.name, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                yield base, node.lineno
                yield from ((f"{base}.{alias.name}", node.lineno) for alias in node.names if alias.name != "*")
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test):
                    yield from visit(node.body)
                yield from visit(node.orelse)
            elif isinstance(node, ast.Try):
                if not _guards_import_error(node):
                    yield from visit(node.body)
                for handler in node.handlers:
                    yield from visit(handler.body)
                yield from visit(node.orelse)
                yield from visit(node.finalbody)
            elif isinstance(node, ast.With):
                yield from visit(node.body)

    yield from visit(ast.parse(source.read_text(), str(source)).body)


def _declared_groups(distribution: str) -> list[str]:
    """The dependency groups of pyproject.toml (and `project` for its dependencies) that name `distribution`."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    lists = {"project": project["project"].get("dependencies", []), **project.get("dependency-groups", {})}
    wanted = canonicalize_name(distribution)
    return [
        group
        for group, specs in lists.items()
        if any(isinstance(spec, str) and canonicalize_name(Requirement(spec).name) == wanted for spec in specs)
    ]


def _what_to_do(name: str) -> str:
    distributions = packages_distributions().get(name, [])
    if not distributions:
        return f"{name} is not installed in the project's venv either"
    distribution = distributions[0]
    if canonicalize_name(distribution) == "sqs-jobs-example":
        return f"{name} is this repository's own package, outside the worker's code asset"
    groups = _declared_groups(distribution)
    if LAYER_GROUP in groups:
        return f"{distribution} is in the {LAYER_GROUP} group, but not in the layer: run `make bundle`"
    declared = f"in the {' and '.join(groups)} group only" if groups else "in no dependency group"
    return f"{distribution} is declared {declared}: `uv add --group {LAYER_GROUP} {distribution}`, then `make bundle`"


def undeployed_imports(roots: Iterable[str], worker: DeployedWorker) -> list[str]:
    """One line per import the deployed worker would fail on at its start, following the code asset's modules from
    `roots` (the handler's module and the jobs')."""
    problems: list[str] = []
    pending = [(root, "the worker loads it at its start") for root in roots]
    seen: set[str] = set()
    while pending:
        module, why = pending.pop(0)
        if module in seen:
            continue
        seen.add(module)
        source = worker.source(module)
        if source is None:
            problems.append(
                f"{module} ({why}) is not in the worker's code asset, which holds only the packages "
                f"{', '.join(sorted(worker.code))} (the project's: sqs_jobs.cdk.asset_staging.project_code_dirs)"
            )
            continue
        where = source.relative_to(REPO_ROOT) if source.is_relative_to(REPO_ROOT) else source
        for name, line in top_level_imports(source, module):
            top = name.partition(".")[0]
            if not top or top in sys.stdlib_module_names:
                continue
            if top in worker.code:
                if worker.source(name) is not None:  # else a name defined in a module, not a submodule
                    pending.append((name, f"imported by {where}:{line}"))
                continue
            if top in worker.layer or top in worker.runtime:
                continue
            problems.append(
                f"{where}:{line} imports {top}, which the deployed worker lacks (not in its code asset, its layer "
                f"or the Lambda runtime): {_what_to_do(top)}"
            )
    return list(dict.fromkeys(problems))


def _roots(catalog: Catalog) -> list[str]:
    return [HANDLER_MODULE, *(job.handler for queue in catalog for job in queue.jobs)]


def test_every_module_the_worker_imports_at_its_start_is_deployed() -> None:
    assert undeployed_imports(_roots(CATALOG), DeployedWorker.as_built()) == []


def test_the_layer_is_built_from_the_group_this_test_reads() -> None:
    assert layer_bundle.LAYER_GROUP == LAYER_GROUP


def test_a_jobs_driver_declared_only_for_development_is_named_with_its_group_and_the_fix() -> None:
    # The sample app's database job imports pg8000, which pyproject.toml declares in the dev group only (the app is
    # a test's, never deployed). Were its package shipped in the code asset, its worker would still fail to start.
    shipped_with_tests = DeployedWorker.as_built((*code_dirs(), REPO_ROOT / "tests"))

    assert undeployed_imports(_roots(SAMPLE_CATALOG), shipped_with_tests) == [
        "tests/sample_app/close_account.py:13 imports pg8000, which the deployed worker lacks (not in its code asset, "
        "its layer or the Lambda runtime): pg8000 is declared in the dev group only: "
        "`uv add --group lambda pg8000`, then `make bundle`"
    ]


def test_a_job_module_outside_the_code_asset_is_named() -> None:
    problems = undeployed_imports(_roots(SAMPLE_CATALOG), DeployedWorker.as_built())

    assert problems == [
        f"{job.handler} (the worker loads it at its start) is not in the worker's code asset, which holds only the "
        "packages functions, sqs_jobs (the project's: sqs_jobs.cdk.asset_staging.project_code_dirs)"
        for queue in SAMPLE_CATALOG
        for job in queue.jobs
    ]


def test_an_optional_or_type_checking_import_is_not_one_the_start_needs(tmp_path: Path) -> None:
    package = tmp_path / "jobs_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "job.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "try:\n    import orjson\nexcept ImportError:\n    orjson = None\n"
        "if TYPE_CHECKING:\n    import mypy_boto3_sqs\n"
        "import boto3\nimport aws_lambda_powertools\nfrom . import helpers\n"
    )
    (package / "helpers.py").write_text("import pg8000\n")
    worker = DeployedWorker(code={"jobs_pkg": package}, layer=frozenset({"aws_lambda_powertools"}))

    [problem] = undeployed_imports(["jobs_pkg.job"], worker)

    assert problem.startswith(f"{package / 'helpers.py'}:1 imports pg8000, which the deployed worker lacks")
    assert problem.endswith(
        "pg8000 is declared in the dev group only: `uv add --group lambda pg8000`, then `make bundle`"
    )
