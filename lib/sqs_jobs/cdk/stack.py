"""The stack: composes the constructs for every queue in the catalog. `build_app` is what app.py runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App, CfnOutput, Stack, Tags, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sqs_jobs.catalog_ref import PROJECT_SETTING, CatalogRefError, find_project, load_catalog
from sqs_jobs.cdk import monitoring, nag_suppressions
from sqs_jobs.cdk.alarm_topic import AlarmTopic, NewAlarmTopic
from sqs_jobs.cdk.asset_staging import project_code_dirs
from sqs_jobs.cdk.batch_workflows import BatchWorkflows
from sqs_jobs.cdk.context import ContextError, StackContext
from sqs_jobs.cdk.dependencies_layer import DependenciesLayer
from sqs_jobs.cdk.durable_function import DurableJobFunction
from sqs_jobs.cdk.heartbeat_canary import HeartbeatCanary
from sqs_jobs.cdk.job_queue import JobQueue
from sqs_jobs.cdk.job_resources import JobResources
from sqs_jobs.cdk.job_schedules import JobSchedules
from sqs_jobs.cdk.jobs_dashboard import DashboardQueue, DashboardSchedules, JobsDashboard
from sqs_jobs.cdk.naming import (
    ALARM_TOPIC_ARN_OUTPUT,
    DASHBOARD_OUTPUT,
    IDEMPOTENCY_TABLE_OUTPUT,
    alarm_name_prefix,
    pascal_case,
)
from sqs_jobs.cdk.queue_alarms import QueueAlarms
from sqs_jobs.cdk.queue_endpoints import QueueEndpoints
from sqs_jobs.cdk.secure_table import SecureTable
from sqs_jobs.cdk.worker_code import worker_code
from sqs_jobs.contract import JobContract
from sqs_jobs.specs import Catalog
from sqs_jobs.stack_names import contract_parameter_name
from sqs_jobs.worker.names import LIFE, LIFE_AT, LIFE_INDEX, SERVICE_NAME

# Powertools' DynamoDBPersistenceLayer defaults (key_attr, expiry_attr): the worker uses them unchanged.
IDEMPOTENCY_PARTITION_KEY = "id"
IDEMPOTENCY_TTL_ATTRIBUTE = "expiration"
# The largest value of a standard SSM parameter.
CONTRACT_STANDARD_BYTES = 4096
# Context flag (not a stack setting): `cdk synth -c nag=true` runs cdk-nag during synth (cdk-nag installed).
NAG_CONTEXT_KEY = "nag"
# `-c catalog=package.module:NAME`: the catalog the stack is built from and its functions load.
CATALOG_CONTEXT_KEY = "catalog"


class JobsStack(Stack):
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
        retain = context.retain_data
        # Before anything is built: a threshold CloudWatch or Scheduler can't take fails synth in one message.
        monitoring.check(*catalog)
        # First: without the bundled layer nothing else is worth building.
        shown = _shown(layer_dir, Path.cwd())
        dependencies = DependenciesLayer(self, "Dependencies", directory=layer_dir, display_name=shown)
        code = worker_code(code_dirs)

        self.idempotency_table = SecureTable(
            self,
            "IdempotencyTable",
            partition_key=IDEMPOTENCY_PARTITION_KEY,
            time_to_live_attribute=IDEMPOTENCY_TTL_ATTRIBUTE,
            retain=retain,
        ).table
        # The keys in flight (running, retrying, cancelled) for the operator's lists, without a scan: sparse, since
        # a record carries `life` only while its key is in flight (sqs_jobs.worker.names, docs/jobctl.md).
        self.idempotency_table.add_global_secondary_index(
            index_name=LIFE_INDEX,
            partition_key=dynamodb.Attribute(name=LIFE, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=LIFE_AT, type=dynamodb.AttributeType.NUMBER),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        if context.alarm_topic_arn:
            alarm_topic = AlarmTopic(self, "AlarmTopic", existing_topic_arn=context.alarm_topic_arn)
        else:
            settings = NewAlarmTopic(
                alarm_name_prefix=alarm_name_prefix(context.stack_name), email=context.alarm_email, retain=retain
            )
            alarm_topic = AlarmTopic(self, "AlarmTopic", new=settings)
        self.alarm_topic = alarm_topic.topic
        # Before the queues: each queue's scheduler role and recurring schedules are added to it as it's built.
        self.schedules = JobSchedules(self, "Schedules", stack_name=context.stack_name, topic=self.alarm_topic)
        self.resources = JobResources(
            self,
            "Resources",
            catalog=catalog,
            settings=context.resource_settings,
            retain=retain,
            stack_name=context.stack_name,
            alarm_topic=self.alarm_topic,
            alarm_topic_key=alarm_topic.key,
            create_mail_identity=context.create_mail_identity,
            mail_sandbox_recipients=context.mail_sandbox_recipients,
        )

        self.queues: dict[str, JobQueue] = {}
        # Per durable job, its durable function (sqs_jobs.cdk.durable_function).
        self.durable_functions: dict[str, DurableJobFunction] = {}
        self.alarms: dict[str, QueueAlarms] = {}
        for spec in catalog:
            prefix = pascal_case(spec.name)
            job_queue = JobQueue(
                self,
                f"{prefix}Queue",
                spec=spec,
                stack_name=context.stack_name,
                code=code,
                layers=[dependencies.layer],
                idempotency_table=self.idempotency_table,
                resources=self.resources.provided,
                schedules=self.schedules,
                retain_logs=retain,
                catalog_ref=catalog_ref,
            )
            self.resources.dead_letter_queues.add(spec.name, job_queue.dead_letter_queue, job_queue.role)
            self.alarms[spec.name] = QueueAlarms(
                self,
                f"{prefix}Alarms",
                spec=spec,
                stack_name=context.stack_name,
                queue=job_queue.queue,
                dead_letter_queue=job_queue.dead_letter_queue,
                function=job_queue.function,
                topic=self.alarm_topic,
            )
            QueueEndpoints(
                self,
                f"{prefix}Endpoints",
                stack_name=context.stack_name,
                queue_name=spec.name,
                queue=job_queue.queue,
                dead_letter_queue=job_queue.dead_letter_queue,
                worker_role=job_queue.role,
                scheduler_role=job_queue.scheduler_role,
            )
            self.queues[spec.name] = job_queue
            for job in spec.jobs:
                if job.durable is None:
                    continue
                self.durable_functions[job.name] = DurableJobFunction(
                    self,
                    f"{prefix}{pascal_case(job.name)}Durable",
                    spec=spec,
                    job=job,
                    stack_name=context.stack_name,
                    code=code,
                    layers=[dependencies.layer],
                    role=job_queue.role,
                    environment=job_queue.environment,
                    worker=job_queue.function,
                    topic=self.alarm_topic,
                    retain_logs=retain,
                )

        # Where publishers define batches, and where each worker may send their callbacks (JobSpec.publishes).
        self.batches = BatchWorkflows(
            self,
            "Batches",
            stack_name=context.stack_name,
            catalog=catalog,
            table=self.idempotency_table,
            queues=self.queues,
            topic=self.alarm_topic,
            durable_functions={job: durable.function for job, durable in self.durable_functions.items()},
        )
        self.heartbeat = HeartbeatCanary(
            self, "Heartbeat", queues=[(item.spec, item.queue) for item in self.queues.values()]
        )
        self.dashboard = JobsDashboard(
            self,
            "Dashboard",
            stack_name=context.stack_name,
            queues=[
                DashboardQueue(
                    spec=item.spec,
                    queue=item.queue,
                    dead_letter_queue=item.dead_letter_queue,
                    function=item.function,
                    limits=catalog.flow_limits(item.spec.name),
                )
                for item in self.queues.values()
            ],
            schedules=DashboardSchedules(
                dead_letter_queue=self.schedules.dead_letter_queue,
                group_name=self.schedules.group.schedule_group_name,
            ),
            alarms=[
                *(alarm for queue_alarms in self.alarms.values() for alarm in queue_alarms.alarms.values()),
                self.schedules.alarm,
                self.batches.stalled_alarm,
                *(alarm for durable in self.durable_functions.values() for alarm in durable.alarms.values()),
            ],
        ).dashboard

        CfnOutput(
            self,
            ALARM_TOPIC_ARN_OUTPUT,
            value=self.alarm_topic.topic_arn,
            description="SNS topic every job alarm notifies",
        )
        CfnOutput(
            self,
            DASHBOARD_OUTPUT,
            value=self.dashboard.dashboard_name,
            description="CloudWatch dashboard of every queue (docs/monitoring.md)",
        )
        CfnOutput(
            self,
            IDEMPOTENCY_TABLE_OUTPUT,
            value=self.idempotency_table.table_name,
            description="DynamoDB table of the workers' idempotency records",
        )
        # The job contract publishers read (JobPublisher.from_stack): a service's wheel needn't know every job.
        contract = JobContract.from_catalog(catalog).to_json()
        fits_standard = len(contract.encode()) <= CONTRACT_STANDARD_BYTES
        ssm.StringParameter(
            self,
            "JobContract",
            parameter_name=contract_parameter_name(context.stack_name),
            string_value=contract,
            description="Job contract: each job's queue, and the FIFO queues (sqs_jobs.contract)",
            # Standard parameters hold 4 KB: a catalog of very many jobs needs an advanced one (8 KB, charged).
            tier=ssm.ParameterTier.STANDARD if fits_standard else ssm.ParameterTier.ADVANCED,
        )
        # cdk-nag acknowledgements, each with its reason (construct metadata only: the template is unchanged).
        nag_suppressions.acknowledge(self)


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


def _shown(path: Path, root: Path) -> str:
    # "build/layer" rather than an absolute path in the error message.
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
