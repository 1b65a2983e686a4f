"""The jobs of a catalog, composed into a construct: every queue with its worker, DLQ, alarms and endpoints, the
catalog's resources by kind, the idempotency table, the alarm topic, the schedules, the heartbeat canary and the
dashboard. `Jobs` puts them into a stack of a team's own; `JobsStack` (sqs_jobs.cdk.stack) is a stack of them.

A host stack may give the catalog's tables, buckets and secrets as its own constructs (`resources={"customers_table":
table}`: an `ITable`, `IBucket` or `ISecret`): the jobs use and are granted those, and create none of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sqs_jobs.cdk import monitoring, nag_suppressions
from sqs_jobs.cdk.alarm_topic import AlarmTopic, NewAlarmTopic
from sqs_jobs.cdk.asset_staging import check_handlers
from sqs_jobs.cdk.batch_workflows import BatchWorkflows
from sqs_jobs.cdk.context import StackContext
from sqs_jobs.cdk.dependencies_layer import DependenciesLayer
from sqs_jobs.cdk.durable_function import DurableJobFunction
from sqs_jobs.cdk.heartbeat_canary import HeartbeatCanary
from sqs_jobs.cdk.job_queue import JobQueue
from sqs_jobs.cdk.job_resources import GivenResource, JobResources
from sqs_jobs.cdk.job_results import JobResultsReading
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
from sqs_jobs.worker.names import LIFE, LIFE_AT, LIFE_INDEX

if TYPE_CHECKING:
    from aws_cdk import aws_cloudwatch as cloudwatch
    from aws_cdk import aws_sns as sns

# Powertools' DynamoDBPersistenceLayer defaults (key_attr, expiry_attr): the worker uses them unchanged.
IDEMPOTENCY_PARTITION_KEY = "id"
IDEMPOTENCY_TTL_ATTRIBUTE = "expiration"
# The largest value of a standard SSM parameter.
CONTRACT_STANDARD_BYTES = 4096


class JobsComposition:
    """What `Jobs` and `JobsStack` build into themselves (so a stack of them keeps the logical IDs it always had)."""

    idempotency_table: dynamodb.Table
    alarm_topic: sns.ITopic
    schedules: JobSchedules
    resources: JobResources
    queues: dict[str, JobQueue]
    durable_functions: dict[str, DurableJobFunction]
    alarms: dict[str, QueueAlarms]
    batches: BatchWorkflows
    results: JobResultsReading
    heartbeat: HeartbeatCanary
    dashboard: cloudwatch.Dashboard

    def _compose(
        self,
        *,
        context: StackContext,
        catalog: Catalog,
        catalog_ref: str,
        code_dirs: tuple[Path, ...],
        layer_dir: Path,
        given: Mapping[str, GivenResource],
    ) -> None:
        # Children of this construct: `self` is a Construct (Jobs) or a Stack (JobsStack).
        scope = cast("Construct", self)
        retain = context.retain_data
        # Before anything is built: a threshold CloudWatch or Scheduler can't take fails synth in one message.
        monitoring.check(*catalog)
        # First: without the bundled layer nothing else is worth building.
        shown = _shown(layer_dir, Path.cwd())
        dependencies = DependenciesLayer(scope, "Dependencies", directory=layer_dir, display_name=shown)
        check_handlers(code_dirs, catalog)
        code = worker_code(code_dirs)

        self.idempotency_table = SecureTable(
            scope,
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
            alarm_topic = AlarmTopic(scope, "AlarmTopic", existing_topic_arn=context.alarm_topic_arn)
        else:
            settings = NewAlarmTopic(
                alarm_name_prefix=alarm_name_prefix(context.stack_name), email=context.alarm_email, retain=retain
            )
            alarm_topic = AlarmTopic(scope, "AlarmTopic", new=settings)
        self.alarm_topic = alarm_topic.topic
        # Before the queues: each queue's scheduler role and recurring schedules are added to it as it's built.
        self.schedules = JobSchedules(scope, "Schedules", stack_name=context.stack_name, topic=self.alarm_topic)
        self.resources = JobResources(
            scope,
            "Resources",
            catalog=catalog,
            settings=context.resource_settings,
            given=given,
            retain=retain,
            stack_name=context.stack_name,
            alarm_topic=self.alarm_topic,
            alarm_topic_key=alarm_topic.key,
            create_mail_identity=context.create_mail_identity,
            mail_sandbox_recipients=context.mail_sandbox_recipients,
        )

        self.queues = {}
        # Per durable job, its durable function (sqs_jobs.cdk.durable_function).
        self.durable_functions = {}
        self.alarms = {}
        for spec in catalog:
            prefix = pascal_case(spec.name)
            job_queue = JobQueue(
                scope,
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
                scope,
                f"{prefix}Alarms",
                spec=spec,
                stack_name=context.stack_name,
                queue=job_queue.queue,
                dead_letter_queue=job_queue.dead_letter_queue,
                function=job_queue.function,
                topic=self.alarm_topic,
                lanes=job_queue.lanes,
            )
            QueueEndpoints(
                scope,
                f"{prefix}Endpoints",
                stack_name=context.stack_name,
                queue_name=spec.name,
                queue=job_queue.queue,
                dead_letter_queue=job_queue.dead_letter_queue,
                worker_role=job_queue.role,
                scheduler_role=job_queue.scheduler_role,
                lanes=job_queue.lanes,
            )
            self.queues[spec.name] = job_queue
            for job in spec.jobs:
                if job.durable is None:
                    continue
                self.durable_functions[job.name] = DurableJobFunction(
                    scope,
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
            scope,
            "Batches",
            stack_name=context.stack_name,
            catalog=catalog,
            table=self.idempotency_table,
            queues=self.queues,
            topic=self.alarm_topic,
            durable_functions={job: durable.function for job, durable in self.durable_functions.items()},
        )
        # Where services read how their jobs stand and what they returned (grant_read_results).
        self.results = JobResultsReading(scope, "Results", stack_name=context.stack_name, table=self.idempotency_table)
        self.heartbeat = HeartbeatCanary(
            scope, "Heartbeat", queues=[(item.spec, item.queue) for item in self.queues.values()]
        )
        self.dashboard = JobsDashboard(
            scope,
            "Dashboard",
            stack_name=context.stack_name,
            queues=[
                DashboardQueue(
                    spec=item.spec,
                    queue=item.queue,
                    dead_letter_queue=item.dead_letter_queue,
                    function=item.function,
                    limits=catalog.flow_limits(item.spec.name),
                    lanes=item.lanes,
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
            scope,
            ALARM_TOPIC_ARN_OUTPUT,
            value=self.alarm_topic.topic_arn,
            description="SNS topic every job alarm notifies",
        )
        CfnOutput(
            scope,
            DASHBOARD_OUTPUT,
            value=self.dashboard.dashboard_name,
            description="CloudWatch dashboard of every queue (docs/monitoring.md)",
        )
        CfnOutput(
            scope,
            IDEMPOTENCY_TABLE_OUTPUT,
            value=self.idempotency_table.table_name,
            description="DynamoDB table of the workers' idempotency records",
        )
        # The job contract publishers read (JobPublisher.from_stack): a service's wheel needn't know every job.
        contract = JobContract.from_catalog(catalog).to_json()
        fits_standard = len(contract.encode()) <= CONTRACT_STANDARD_BYTES
        ssm.StringParameter(
            scope,
            "JobContract",
            parameter_name=contract_parameter_name(context.stack_name),
            string_value=contract,
            description="Job contract: each job's queue, and the FIFO queues (sqs_jobs.contract)",
            # Standard parameters hold 4 KB: a catalog of very many jobs needs an advanced one (8 KB, charged).
            tier=ssm.ParameterTier.STANDARD if fits_standard else ssm.ParameterTier.ADVANCED,
        )
        # cdk-nag acknowledgements, each with its reason (construct metadata only: the template is unchanged).
        nag_suppressions.acknowledge(self)

    def grant_read_results(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` (a service's role) read how its jobs stand and what they returned (JobPublisher.result):
        GetItem of the idempotency table's key records, of a result's attributes only (sqs_jobs.cdk.job_results)."""
        return self.results.grant_read(grantee)

    def grant_send_events(self, grantee: iam.IGrantable, jobs: Iterable[str] | None = None) -> iam.Grant:
        """Let `grantee` (a service's role, an approval tool's) send events to durable jobs waiting for them
        (JobPublisher.send_event, `jobctl job event`): of `jobs` only (default: every durable job of the stack),
        reading whether each waits and completing its wait (sqs_jobs.cdk.job_results). NotDurableJobsError names a
        job that is not one of the stack's durable jobs."""
        from sqs_jobs.cdk.job_results import NotDurableJobsError

        chosen = sorted(set(jobs)) if jobs is not None else sorted(self.durable_functions)
        unknown = [job for job in chosen if job not in self.durable_functions]
        if unknown or not chosen:
            durable = ", ".join(sorted(self.durable_functions)) or "none"
            raise NotDurableJobsError(
                f"grant_send_events: {', '.join(unknown) or 'no job'} is not a durable job of this stack (its durable "
                f"jobs: {durable})"
            )
        return self.results.grant_send_events(grantee, {job: self.durable_functions[job].function for job in chosen})


class Jobs(Construct, JobsComposition):
    """The jobs of `catalog` inside a team's own stack. `catalog_ref` names the catalog as `package.module:NAME`
    (every function loads it); `code_dirs` are the project's packages (the functions' code asset,
    sqs_jobs.cdk.asset_staging.project_code_dirs); `layer_dir` is what `jobctl bundle` built. `resources`: the
    host's own tables, buckets and secrets for the catalog's resources of those names. `context`: the stack-wide
    settings (StackContext.parse reads them from CDK context); default: named after the host stack, nothing
    retained, no alarm e-mail."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        catalog: Catalog,
        catalog_ref: str,
        code_dirs: tuple[Path, ...],
        layer_dir: Path,
        resources: Mapping[str, GivenResource] | None = None,
        context: StackContext | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        settings = context or StackContext(stack_name=Stack.of(scope).stack_name, alarm_email=None, retain_data=False)
        self._compose(
            context=settings,
            catalog=catalog,
            catalog_ref=catalog_ref,
            code_dirs=code_dirs,
            layer_dir=layer_dir,
            given=resources or {},
        )


def _shown(path: Path, root: Path) -> str:
    # "build/layer" rather than an absolute path in the error message.
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
