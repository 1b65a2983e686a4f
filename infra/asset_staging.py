"""Staging the worker's code asset: a plain copy of its packages, compiled to bytecode. Standard library only, so
the cold-start benchmark lays out exactly what synth ships without starting the CDK.

Lambda's code directory is read-only, so a module without bytecode is compiled again on every cold start. The
copy is compiled by the staging interpreter, which must be the Lambda runtime's version, as hash-based `.pyc`
(unchecked: the asset never changes under them), which zipping can't invalidate as it can timestamps.
"""

from __future__ import annotations

import compileall
import py_compile
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# What the deployed worker imports from, in Lambda's order: its code asset (these packages at the zip root), the
# dependencies layer (`make bundle` writes build/layer; Lambda mounts its python/ on the path) and the runtime's
# own packages.
CODE_DIRS = (REPO_ROOT / "functions", REPO_ROOT / "lib" / "sqs_jobs")
LAYER_DIR = REPO_ROOT / "build" / "layer"
# The Lambda Python runtime's boto3 and its dependencies, as import names: the layer leaves them out
# (scripts/bundle_layer.sh, PROVIDED_BY_RUNTIME, names their distributions).
RUNTIME_MODULES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six")

# The Lambda runtime's Python (infra/worker_code.py RUNTIME): every .pyc is built for exactly this version.
RUNTIME_VERSION = (3, 13)
BYTECODE_MODE = py_compile.PycInvalidationMode.UNCHECKED_HASH

# Never shipped: bytecode caches of the working tree (compiled afresh instead) and any tests beside the code.
EXCLUDED = ("__pycache__", "*.pyc", "*.pyo", "tests", "test_*.py", "conftest.py", ".*")


class WrongInterpreterError(RuntimeError):
    """The synth runs on another Python than the Lambda runtime: its bytecode would be useless there."""


class BytecodeError(RuntimeError):
    """A module of the asset did not compile."""


def check_interpreter() -> None:
    if sys.version_info[:2] != RUNTIME_VERSION:
        wanted = ".".join(map(str, RUNTIME_VERSION))
        raise WrongInterpreterError(
            f"the worker's bytecode must be compiled by Python {wanted} (Lambda's python{wanted}); this synth runs "
            f"Python {sys.version_info.major}.{sys.version_info.minor}: run it from the project's venv (make synth)"
        )


def compile_tree(directory: Path) -> None:
    """Compile every module under `directory` for this interpreter, hash-based, unchecked."""
    if not compileall.compile_dir(str(directory), quiet=1, invalidation_mode=BYTECODE_MODE, workers=0):
        raise BytecodeError(f"compiling {directory} failed: see the errors printed above")


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
