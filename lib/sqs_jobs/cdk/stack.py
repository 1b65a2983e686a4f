"""The stack: composes the constructs for every queue in the catalog. `build_app` is what app.py runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App, Stack, Tags, Validations
from constructs import Construct

from sqs_jobs.catalog_ref import PROJECT_SETTING, CatalogRefError, find_project, load_catalog
from sqs_jobs.cdk.asset_staging import project_code_dirs
from sqs_jobs.cdk.context import ContextError, StackContext
from sqs_jobs.cdk.jobs import JobsComposition
from sqs_jobs.specs import Catalog
from sqs_jobs.worker.names import SERVICE_NAME

# Context flag (not a stack setting): `cdk synth -c nag=true` runs cdk-nag during synth (cdk-nag installed).
NAG_CONTEXT_KEY = "nag"
# `-c catalog=package.module:NAME`: the catalog the stack is built from and its functions load.
CATALOG_CONTEXT_KEY = "catalog"


class JobsStack(Stack, JobsComposition):
    """Per catalog queue: JobQueue, QueueAlarms, QueueEndpoints. Per catalog resource what its kind provides
    (JobResources). Shared: the idempotency table, the alarm topic (or an existing one), the job schedules (group,
    DLQ, alarm), the heartbeat canary's schedules and the dashboard."""

    def __init__(
        self,
        scope: Construct,
        *,
        context: StackContext,
        catalog: Catalog,
        catalog_ref: str,
        code_dirs: tuple[Path, ...],
        layer_dir: Path,
    ) -> None:
        """`catalog_ref` names `catalog` as `package.module:NAME` (sqs_jobs.catalog_ref): what every function it
        deploys loads, so it must be importable from the functions' code. `code_dirs`: the project's packages, the
        functions' code asset (project_code_dirs). `layer_dir`: what `jobctl bundle` built (the framework's worker
        and the jobs' packages)."""
        # No env=: environment-agnostic, so synth needs no account lookup and no credentials.
        super().__init__(
            scope,
            context.stack_name,
            stack_name=context.stack_name,
            description="Background jobs on SQS + Lambda: queues, DLQs, workers, idempotency, alarms, heartbeats",
        )
        Tags.of(self).add("project", SERVICE_NAME)
        self._compose(
            context=context,
            catalog=catalog,
            catalog_ref=catalog_ref,
            code_dirs=code_dirs,
            layer_dir=layer_dir,
            given={},
        )


def build_app(
    context: Mapping[str, Any] | None = None,
    *,
    catalog: Catalog | None = None,
    project_root: Path | None = None,
    code_dirs: tuple[Path, ...] | None = None,
    layer_dir: Path | None = None,
) -> tuple[App, JobsStack]:
    """The app and its one stack. The catalog is named by context `catalog` (`package.module:NAME`), else by the
    project's pyproject.toml (`[tool.sqs-jobs] catalog`), and loaded from it unless `catalog` gives the object.
    The project's root (its pyproject.toml's directory, else the working directory) holds its packages (the code
    asset, project_code_dirs) and `build/layer` (`jobctl bundle`)."""
    app = App(context=dict(context) if context else None)
    given = app.node.try_get_context(CATALOG_CONTEXT_KEY)
    project = find_project(Path.cwd())
    root = project_root or (project.root if project is not None else Path.cwd())
    catalog_ref = str(given or (project.catalog_ref if project is not None else ""))
    source = f"-c {CATALOG_CONTEXT_KEY}" if given else f"{PROJECT_SETTING} in pyproject.toml"
    if not catalog_ref:
        raise ContextError(
            f"no catalog: name it in the project's pyproject.toml ({PROJECT_SETTING} = 'package.module:NAME') or "
            f"with -c {CATALOG_CONTEXT_KEY}=package.module:NAME"
        )
    if catalog is None:
        try:
            catalog = load_catalog(catalog_ref, search_path=root)
        except CatalogRefError as error:
            raise ContextError(f"{source}: {error}") from error
    settings = StackContext.parse(app.node.try_get_context, catalog)
    stack = JobsStack(
        app,
        context=settings,
        catalog=catalog,
        catalog_ref=catalog_ref,
        code_dirs=code_dirs if code_dirs is not None else project_code_dirs(root, catalog_ref, catalog),
        layer_dir=layer_dir if layer_dir is not None else root / "build" / "layer",
    )
    if str(app.node.try_get_context(NAG_CONTEXT_KEY)).lower() == "true":
        # `-c nag=true`: cdk-nag (a dev dependency, so loaded only on request) checks the synth too.
        from cdk_nag import AwsSolutionsChecks, ServerlessChecks

        Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))
    return app, stack
