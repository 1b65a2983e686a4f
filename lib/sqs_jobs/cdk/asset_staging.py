"""Staging the worker's code asset: a plain copy of the project's packages, compiled to bytecode. Standard library
only, so the cold-start benchmark lays out exactly what synth ships without starting the CDK.

Lambda's code directory is read-only, so a module without bytecode is compiled again on every cold start. The
copy is compiled by the staging interpreter, which must be the Lambda runtime's version, as hash-based `.pyc`
(unchecked: the asset never changes under them), which zipping can't invalidate as it can timestamps.
"""

from __future__ import annotations

import py_compile
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqs_jobs.specs import Catalog

# What the deployed worker imports from, in Lambda's order: its code asset (the project's packages at the zip
# root), the dependencies layer (`jobctl bundle` writes the project's build/layer: the framework and the jobs'
# packages; Lambda mounts its python/ on the path) and the runtime's own packages.
# The Lambda Python runtime's boto3 and its dependencies, as import names: the layer leaves them out
# (sqs_jobs.cli.layer_bundle, PROVIDED_BY_RUNTIME, names their distributions).
RUNTIME_MODULES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six")

# The framework's import package: a job it defines (the DLQ review) ships in the layer, not the code asset.
FRAMEWORK_PACKAGE = "sqs_jobs"

# The Lambda runtime's Python (sqs_jobs.cdk.worker_code RUNTIME): every .pyc is built for exactly this version.
RUNTIME_VERSION = (3, 13)
BYTECODE_MODE = py_compile.PycInvalidationMode.UNCHECKED_HASH

# Never shipped: bytecode caches of the working tree (compiled afresh instead) and any tests beside the code.
EXCLUDED = ("__pycache__", "*.pyc", "*.pyo", "tests", "test_*.py", "conftest.py", ".*")


class WrongInterpreterError(RuntimeError):
    """The synth runs on another Python than the Lambda runtime: its bytecode would be useless there."""


class BytecodeError(RuntimeError):
    """A module of the asset did not compile."""


class HandlerNotShippedError(FileNotFoundError):
    """A job's handler module is not in the functions' code asset: its worker would fail at every start."""


def check_interpreter() -> None:
    if sys.version_info[:2] != RUNTIME_VERSION:
        wanted = ".".join(map(str, RUNTIME_VERSION))
        raise WrongInterpreterError(
            f"the worker's bytecode must be compiled by Python {wanted} (Lambda's python{wanted}); this synth runs "
            f"Python {sys.version_info.major}.{sys.version_info.minor}: run it from the project's venv"
        )


def compile_tree(directory: Path) -> None:
    """Compile every module under `directory` for this interpreter, hash-based, unchecked. In a process of its own:
    compileall's pool of workers would re-import the program that called it (a team's app.py, without a
    `__main__` guard, would synthesize again in each)."""
    mode = BYTECODE_MODE.name.lower().replace("_", "-")
    done = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", mode, str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BytecodeError(f"compiling {directory} failed: {' '.join(done.stdout.split())[-300:]}")


def stage(package_dirs: Sequence[Path], output_dir: Path, *, bytecode: bool = True) -> None:
    """Lay out the asset in `output_dir`: each package under its own name, compiled unless `bytecode` is false
    (which only the cold-start benchmark asks for, to measure what the bytecode saves)."""
    for package_dir in package_dirs:
        shutil.copytree(
            package_dir,
            output_dir / package_dir.name,
            ignore=shutil.ignore_patterns(*EXCLUDED),
            dirs_exist_ok=True,
        )
    if bytecode:
        compile_tree(output_dir)


def project_code_dirs(root: Path, catalog_ref: str, catalog: Catalog) -> tuple[Path, ...]:
    """The functions' code asset: the project's own packages under `root`, the catalog's and each job's (the
    framework's own jobs are in the layer)."""
    tops = [catalog_ref.split(":", 1)[0].split(".", 1)[0]]
    tops += [job.handler.split(".", 1)[0] for queue in catalog for job in queue.jobs]
    return tuple(root / top for top in dict.fromkeys(tops) if top != FRAMEWORK_PACKAGE)


def check_handlers(code_dirs: Sequence[Path], catalog: Catalog) -> None:
    """Every job's handler module is a file of the code asset (the framework's own jobs are in the layer)."""
    shipped = {path.name: path for path in code_dirs}
    for queue in catalog:
        for job in queue.jobs:
            top, _, rest = job.handler.partition(".")
            if top == FRAMEWORK_PACKAGE:
                continue
            base = shipped.get(top)
            module = base.joinpath(*rest.split(".")) if base is not None and rest else base
            if module is None or not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
                where = f"{top}/{rest.replace('.', '/')}.py" if rest else f"{top}/__init__.py"
                raise HandlerNotShippedError(
                    f"job {job.name!r} (queue {queue.name!r}): its handler {job.handler!r} is not in the functions' "
                    f"code (no {where} under the project's packages {', '.join(sorted(shipped)) or 'none'})"
                )
