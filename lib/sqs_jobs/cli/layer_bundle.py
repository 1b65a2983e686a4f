"""`jobctl bundle`: the workers' dependencies layer of a project, without Docker.

The layer holds what the deployed workers import beyond the project's own code (the code asset) and the Lambda
runtime's boto3: the framework's worker (`sqs_jobs`, copied from the installed distribution, so the layer runs
the version the project's tests ran) and the third-party packages of the project's `lambda` group, prebuilt wheels
for the Lambda target (CPython 3.13 on arm64, Amazon Linux 2023) whatever machine builds it. A dependency without
such a wheel fails the bundle instead of shipping a module built for the wrong machine.

Where the packages' versions come from, first that applies:
1. `--requirements FILE` (a pip requirements file), with the framework's `worker` extra as installed here;
2. the project's uv.lock, its `lambda` dependency group (`uv export`): the versions its tests ran against;
3. the project's requirements-lambda.txt, with the framework's `worker` extra as installed here;
4. the framework's `worker` extra at the versions installed beside jobctl.

Bytecode is compiled by this interpreter, which must be the runtime's version, hash-based and unchecked: Lambda's
code directories are read-only, so without it every cold start compiles every module it imports. Re-running with
nothing changed is a no-op (a stamp of what went in).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqs_jobs.cdk.asset_staging import (
    RUNTIME_VERSION,
    BytecodeError,
    WrongInterpreterError,
    check_interpreter,
    compile_tree,
)
from sqs_jobs.cli.errors import OperatorError

# The Lambda target (keep in step with sqs_jobs.cdk.worker_code's RUNTIME and ARCHITECTURE): python3.13 is Amazon
# Linux 2023, glibc 2.34, and the workers run on arm64.
TARGET_PYTHON = ".".join(map(str, RUNTIME_VERSION))
UV_PLATFORM = "aarch64-manylinux_2_34"
PIP_PLATFORM = "manylinux_2_34_aarch64"
# The runtime ships boto3 and its dependencies: vendoring them would shadow the runtime's own copies and make the
# layer ten times bigger. Distribution names, normalized.
PROVIDED_BY_RUNTIME = frozenset({"boto3", "botocore", "s3transfer", "urllib3", "python-dateutil", "six"})
# The dependency group of a uv project that names what its workers import.
LAYER_GROUP = "lambda"
FRAMEWORK_DISTRIBUTION = "sqs-jobs"
# Framework subpackages a worker never imports (the CLI, the local engine, the CDK constructs, the testing API):
# left out of the layer.
NOT_IN_LAYER = ("cli", "local", "cdk", "testing")
# What the bundle writes beside python/ (DependenciesLayer keeps them out of the layer).
REQUIREMENTS_FILE = "requirements.txt"
# A project's list of what its jobs import (pip's format), read when it has no uv.lock `lambda` group.
PROJECT_REQUIREMENTS = "requirements-lambda.txt"
STAMP_FILE = ".stamp"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class BundleError(OperatorError):
    """The layer can't be built: its message says what is missing and what to do."""


@dataclass(frozen=True)
class Installer:
    """uv (fast, resolves for the target) or pip (in every venv `python -m venv` makes)."""

    command: tuple[str, ...]
    is_uv: bool

    @classmethod
    def find(cls, uv: str | None = None) -> Installer:
        found = uv or shutil.which("uv")
        if found:
            return cls((found,), is_uv=True)
        if importlib.util.find_spec("pip") is not None:
            return cls((sys.executable, "-m", "pip"), is_uv=False)
        raise BundleError(
            "jobctl bundle installs wheels with uv or pip, and this Python has no pip and no uv is on PATH: pass "
            "--uv PATH, or install one (`uv pip install pip`, or `pip install uv`)"
        )

    def install(self, requirements: Path, target: Path, *, resolve: bool) -> None:
        if self.is_uv:
            command = [*self.command, "pip", "install", "--python-version", TARGET_PYTHON]
            command += ["--python-platform", UV_PLATFORM]
        else:
            command = [*self.command, "install", "--disable-pip-version-check", "--python-version", TARGET_PYTHON]
            command += ["--platform", PIP_PLATFORM, "--implementation", "cp"]
        command += [
            "--quiet",
            "--target",
            str(target),
            "--only-binary",
            ":all:",
            "--no-compile",
            "-r",
            str(requirements),
        ]
        if not resolve:
            command.append("--no-deps")
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise BundleError(f"installing the layer's packages for CPython {TARGET_PYTHON} on arm64 failed: {last}")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str | None:
    found = _NAME.match(line)
    return normalized(found.group(1)) if found and not line.lstrip().startswith(("#", "-")) else None


def locked_requirements(project_root: Path, installer: Installer) -> list[str] | None:
    """The `lambda` group of the project's uv.lock, one pinned line per package (None: no lock or no group)."""
    if not installer.is_uv or not (project_root / "uv.lock").is_file() or not _declares_layer_group(project_root):
        return None
    done = subprocess.run(
        [
            *installer.command,
            "export",
            "--locked",
            "--only-group",
            LAYER_GROUP,
            "--no-hashes",
            "--no-emit-project",
            "--no-emit-workspace",
            "--no-header",
            "--no-annotate",
            "--quiet",
        ],
        cwd=project_root,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BundleError(f"uv export of the {LAYER_GROUP!r} group of {project_root / 'uv.lock'} failed: {last}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _declares_layer_group(project_root: Path) -> bool:
    """Whether the project's pyproject.toml declares the `lambda` dependency group (PEP 735 `[dependency-groups]`,
    what `uv export --only-group` exports); a project without one gets the framework's worker extra."""
    import tomllib

    try:
        project = tomllib.loads((project_root / "pyproject.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    except tomllib.TOMLDecodeError as error:
        raise BundleError(f"{project_root / 'pyproject.toml'} is not valid TOML: {error}") from None
    groups = project.get("dependency-groups")
    return isinstance(groups, dict) and LAYER_GROUP in groups


def installed_worker_requirements() -> list[str]:
    """The framework's `worker` extra, pinned at the versions installed here."""
    pins = []
    for requirement in importlib.metadata.requires(FRAMEWORK_DISTRIBUTION) or []:
        if "extra ==" not in requirement or not re.search(r"""extra\s*==\s*["']worker["']""", requirement):
            continue
        name = requirement_name(requirement)
        if name is None or name == FRAMEWORK_DISTRIBUTION:
            continue
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise BundleError(
                f"{name} is not installed: install the framework with its worker extra (sqs-jobs[worker])"
            ) from None
    return pins


def framework_dir() -> Path:
    import sqs_jobs

    return Path(sqs_jobs.__file__).resolve().parent


def _framework_files(source: Path) -> list[Path]:
    return sorted(
        path
        for path in source.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in (".pyc", ".pyo")
        and path.relative_to(source).parts[0] not in NOT_IN_LAYER
    )


def _stamp(requirements: Sequence[str], source: Path) -> str:
    digest = hashlib.sha256()
    for part in (TARGET_PYTHON, UV_PLATFORM, *requirements, Path(__file__).read_text()):
        digest.update(part.encode() + b"\n")
    for path in _framework_files(source):
        digest.update(str(path.relative_to(source)).encode() + b"\n" + path.read_bytes())
    return digest.hexdigest()


def _prune_runtime_packages(site: Path) -> None:
    # A resolving install pulls boto3 and its kin in: the runtime has them.
    for dist_info in site.glob("*.dist-info"):
        name = normalized(dist_info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        if name not in PROVIDED_BY_RUNTIME:
            continue
        record = dist_info / "RECORD"
        lines = record.read_text().splitlines() if record.is_file() else []
        tops = {line.split("/", 1)[0].split(",", 1)[0] for line in lines}
        for top in tops - {dist_info.name}:
            target = site / top
            if target.is_dir():
                shutil.rmtree(target)
            elif target.is_file():
                target.unlink()
        shutil.rmtree(dist_info)


def bundle(
    project_root: Path,
    out: Path,
    *,
    requirements_file: Path | None = None,
    uv: str | None = None,
    catalog_ref: str | None = None,
) -> str:
    """Build (or keep, if up to date) the layer directory `out` (its `python/`); returns what was done, one line.
    With the project's `catalog_ref`, then checks that every import the deployed worker makes at its start is in
    the project's code, the layer or the Lambda runtime (BundleError naming the first that isn't)."""
    said = _build(project_root, out, requirements_file=requirements_file, uv=uv)
    if catalog_ref is not None:
        _check_deployed_imports(project_root, out, catalog_ref)
    return said


def _check_deployed_imports(project_root: Path, out: Path, catalog_ref: str) -> None:
    from sqs_jobs.catalog_ref import CatalogRefError, load_catalog
    from sqs_jobs.cdk.asset_staging import project_code_dirs
    from sqs_jobs.cli.deployed_imports import DeployedWorker, start_roots, undeployed_imports

    try:
        catalog = load_catalog(catalog_ref, search_path=project_root)
    except CatalogRefError as error:
        raise BundleError(f"the layer is built, but its check can't load the catalog: {error}") from None
    worker = DeployedWorker.from_layout(project_code_dirs(project_root, catalog_ref, catalog), out / "python")
    roots = start_roots(catalog)
    problems = undeployed_imports(roots, worker, _what_to_do, shown_from=project_root)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BundleError(f"the deployed worker would fail at its start: {problems[0]}{more}")


def _what_to_do(name: str) -> str:
    distributions = importlib.metadata.packages_distributions().get(name, [])
    what = distributions[0] if distributions else name
    return f"add {what} to {PROJECT_REQUIREMENTS} (or uv.lock's {LAYER_GROUP} group), then jobctl bundle"


def _build(project_root: Path, out: Path, *, requirements_file: Path | None, uv: str | None) -> str:
    try:
        check_interpreter()
    except WrongInterpreterError as error:
        raise BundleError(str(error)) from None
    installer = Installer.find(uv)
    locked = None if requirements_file is not None else locked_requirements(project_root, installer)
    if locked is not None:
        # The lock pins every package and its dependencies: installed as locked, nothing resolved.
        lines, resolve = locked, False
    else:
        listed = requirements_file or project_root / PROJECT_REQUIREMENTS
        if requirements_file is not None and not requirements_file.is_file():
            raise BundleError(f"--requirements {requirements_file}: no such file")
        lines = listed.read_text().splitlines() if listed.is_file() else []
        # The framework's worker at the versions installed here, unless the file pins them; the rest resolved.
        named = {requirement_name(line) for line in lines}
        lines += [pin for pin in installed_worker_requirements() if requirement_name(pin) not in named]
        resolve = True
    requirements = [
        line.strip()
        for line in lines
        if requirement_name(line) is not None
        and requirement_name(line) not in (*PROVIDED_BY_RUNTIME, FRAMEWORK_DISTRIBUTION)
    ]
    source = framework_dir()
    stamp = _stamp(requirements, source)
    if (out / "python").is_dir() and (out / STAMP_FILE).is_file() and (out / STAMP_FILE).read_text().strip() == stamp:
        return f"bundle: {out} is up to date"
    # Built beside the target and swapped at the end: an interrupted run never leaves a half-filled layer.
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    site = staging / "python"
    site.mkdir(parents=True)
    (staging / REQUIREMENTS_FILE).write_text("".join(f"{line}\n" for line in requirements))
    if requirements:
        installer.install(staging / REQUIREMENTS_FILE, site, resolve=resolve)
        _prune_runtime_packages(site)
    for path in _framework_files(source):
        target = site / "sqs_jobs" / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    for cache in site.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    try:
        compile_tree(site)
    except BytecodeError as error:
        raise BundleError(str(error)) from None
    (staging / STAMP_FILE).write_text(stamp + "\n")
    installed = sum(1 for _ in site.glob("*.dist-info"))
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(out)
    return f"bundle: sqs_jobs and {installed} packages for CPython {TARGET_PYTHON} on arm64 in {out}"
