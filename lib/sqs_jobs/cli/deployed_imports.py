"""What the deployed worker imports at its start, checked against what is deployed: the handler's module and each
catalog job's module, and every module of the code asset and of the layer's framework they import, must be there,
and each of their third-party imports in the layer or the Lambda runtime (boto3 and its dependencies).

The tests run in a venv with every package installed, so a job whose package is missing from the layer passes
them and fails on AWS alone, at the worker's cold start (ModuleNotFoundError: every record of its queue goes back,
then to the DLQ without evidence). `jobctl bundle` runs this check on the layer it built, naming the job's module
and line, the import and the fix.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqs_jobs.cdk.asset_staging import FRAMEWORK_PACKAGE, RUNTIME_MODULES
from sqs_jobs.specs import Catalog

# The module Lambda calls (sqs_jobs.cdk.worker_code HANDLER); it loads the jobs' modules by name at its start.
HANDLER_MODULE = "sqs_jobs.worker.entry"
# What the worker loads only for the features a catalog turns on, inside the runtime where the walk from the handler
# doesn't see it: a traced queue's spans (OpenTelemetry), a durable job's function's handler (its SDK).
TRACING_MODULE = "sqs_jobs.worker.tracing"
DURABLE_HANDLER_MODULE = "sqs_jobs.durable.entry"


def start_roots(catalog: Catalog) -> list[str]:
    """The modules the deployed functions import at their start for `catalog`: the handler, each job's module, and
    the modules of the features it turns on, each needing its packages in the layer as much as a job does."""
    roots = [HANDLER_MODULE, *(job.handler for queue in catalog for job in queue.jobs)]
    if any(queue.tracing for queue in catalog):
        roots.append(TRACING_MODULE)
    if any(job.durable is not None for queue in catalog for job in queue.jobs):
        roots.append(DURABLE_HANDLER_MODULE)
    return roots


@dataclass(frozen=True)
class DeployedWorker:
    """Where the deployed worker's imports come from: its code asset's packages, its layer, the runtime."""

    code: Mapping[str, Path]  # top-level package -> its source directory (the framework: its copy in the layer)
    layer: frozenset[str]  # top-level modules and packages in the layer
    runtime: frozenset[str] = frozenset(RUNTIME_MODULES)

    @classmethod
    def from_layout(cls, packages: Iterable[Path], layer: Path) -> DeployedWorker:
        """The project's packages (the code asset) and a layer's python/ directory (the framework in it)."""
        code = {path.name: path for path in packages}
        code[FRAMEWORK_PACKAGE] = layer / FRAMEWORK_PACKAGE
        return cls(code=code, layer=frozenset(top_level_names(layer)) - {FRAMEWORK_PACKAGE})

    def source(self, module: str) -> Path | None:
        """The file of `module` in the code asset, or None."""
        top, *rest = module.split(".")
        if top not in self.code:
            return None
        path = self.code[top].joinpath(*rest)
        candidates = (path.with_name(path.name + ".py"), path / "__init__.py") if rest else (path / "__init__.py",)
        return next((candidate for candidate in candidates if candidate.is_file()), None)


def top_level_names(layer: Path) -> Iterator[str]:
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


def undeployed_imports(
    roots: Iterable[str],
    worker: DeployedWorker,
    what_to_do: Callable[[str], str],
    shown_from: Path | None = None,
) -> list[str]:
    """One line per import the deployed worker would fail on at its start, following the code asset's modules from
    `roots` (the handler's module and the jobs'). `what_to_do` says how to deploy a missing top-level package;
    `shown_from`: files are named relative to it."""
    problems: list[str] = []
    pending = [(module, "the worker loads it at its start") for module in roots]
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
        where = source.relative_to(shown_from) if shown_from and source.is_relative_to(shown_from) else source
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
                f"or the Lambda runtime): {what_to_do(top)}"
            )
    return list(dict.fromkeys(problems))
