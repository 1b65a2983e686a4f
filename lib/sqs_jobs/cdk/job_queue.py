"""One catalog queue: its SQS queue, DLQ and the worker Lambda that drains it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sqs_jobs.catalog_ref import ENV_CATALOG
from sqs_jobs.cdk.job_schedules import JobSchedules
from sqs_jobs.cdk.naming import (
    QUEUE_ARN,
    QUEUE_URL,
    SCHEDULE_GROUP,
    SCHEDULER_ROLE_ARN,
    SCHEDULES_DLQ_ARN,
    lane_parameter_name,
    lane_queue_name,
    parameter_name,
    pascal_case,
    physical_queue_name,
    schedules_parameter_name,
)
from sqs_jobs.cdk.parameter_reads import grant_parameter_reads
from sqs_jobs.cdk.resource_providers import MissingResourceError, ProvidedResource
from sqs_jobs.cdk.worker_code import ARCHITECTURE, HANDLER, RUNTIME
from sqs_jobs.specs import QueueSpec
from sqs_jobs.stack_names import contract_parameter_name
from sqs_jobs.worker.names import FLOW_SLOT_PREFIX, METRICS_NAMESPACE, SERVICE_NAME
from sqs_jobs.worker.settings import (
    ENV_DLQ_URL,
    ENV_IDEMPOTENCY_TABLE,
    ENV_LANES,
    ENV_QUEUE_NAME,
    ENV_QUEUE_URL,
    ENV_RUNTIME_ROLE_ID,
    resource_env_name,
)

# Outlives the DLQ's 14 days, so the logs of any dead-lettered job are still there when it is looked at.
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# What the worker does with the idempotency table, nothing more: Powertools' DynamoDBPersistenceLayer, and flow
# control's buckets and key slots (and, only where a key's limit is above one, BatchGetItem of its slots: below).
IDEMPOTENCY_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# The SSM parameters a publisher reads (JobPublisher.from_stack): the queue's URL and ARN, the role the scheduler
# sends a delayed job with, and the stack's schedule group and schedules DLQ.
PUBLISHER_QUEUE_PARAMETERS = (QUEUE_URL, QUEUE_ARN, SCHEDULER_ROLE_ARN)
PUBLISHER_SCHEDULES_PARAMETERS = (SCHEDULE_GROUP, SCHEDULES_DLQ_ARN)


class JobQueue(Construct):
    """`queue` -> `function` (through `event_source`), with `dead_letter_queue` keeping what fails, and
    `scheduler_role`, the role the stack's scheduler (`schedules`) sends the queue's scheduled and delayed jobs with.

    Every setting comes from the catalog's QueueSpec; the queues' physical names from `sqs_jobs.cdk.naming`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: QueueSpec,
        stack_name: str,
        code: lambda_.Code,
        layers: Sequence[lambda_.ILayerVersion],
        idempotency_table: dynamodb.ITable,
        resources: Mapping[str, ProvidedResource],
        schedules: JobSchedules,
        retain_logs: bool,
        catalog_ref: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.spec = spec
        self._stack_name = stack_name
        self._schedules = schedules
        queue_name = physical_queue_name(stack_name, spec.name, fifo=spec.fifo)
        # The DLQ names its one allowed source by ARN, built from the source's name: a reference to the
        # source queue would be a cycle, since the source's redrive policy references the DLQ.
        source_arn = Stack.of(self).format_arn(
            service="sqs", resource=queue_name, arn_format=ArnFormat.NO_RESOURCE_NAME
        )
        # The priority lanes other than the default one (whose queue is this queue): queues of their own that share
        # the DLQ, so the DLQ names them as sources too (docs/priorities.md).
        other_lanes = [lane for lane in spec.lanes if lane != spec.default_lane]
        lane_arns = [
            Stack.of(self).format_arn(
                service="sqs",
                resource=lane_queue_name(stack_name, spec, lane),
                arn_format=ArnFormat.NO_RESOURCE_NAME,
            )
            for lane in other_lanes
        ]
        # Both queues alike: encrypted, TLS-only, and FIFO together (order per message group; content-based
        # deduplication drops a re-publish within 5 minutes).
        common: dict[str, Any] = {
            "encryption": sqs.QueueEncryption.SQS_MANAGED,
            "enforce_ssl": True,
            "fifo": spec.fifo or None,
            "content_based_deduplication": spec.fifo or None,
        }
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            queue_name=physical_queue_name(stack_name, spec.name, dlq=True, fifo=spec.fifo),
            # Longer than the source's: a standard queue's DLQ counts from the original enqueue time.
            retention_period=Duration.seconds(spec.dlq_retention_s),
            # SQS's largest: room above the source's limit for a dead letter's evidence (docs/catalog.md).
            max_message_size_bytes=spec.dlq_max_message_bytes,
            **common,
            redrive_allow_policy=sqs.RedriveAllowPolicy(
                redrive_permission=sqs.RedrivePermission.BY_QUEUE,
                source_queues=[
                    sqs.Queue.from_queue_arn(self, "SourceQueueRef", source_arn),
                    *(
                        sqs.Queue.from_queue_arn(self, f"Lane{pascal_case(lane)}QueueRef", arn)
                        for lane, arn in zip(other_lanes, lane_arns, strict=True)
                    ),
                ],
            ),
        )
        source: dict[str, Any] = {
            "retention_period": Duration.seconds(spec.retention_s),
            # Lambda's guidance: 6x the function timeout plus the batching window (QueueSpec computes it).
            "visibility_timeout": Duration.seconds(spec.visibility_timeout_s),
            # Set, never SQS's default (1 MiB for queues created since 2025): the DLQ needs room above it.
            "max_message_size_bytes": spec.max_message_bytes,
            **common,
            # The safety net for crashes and timeouts; the worker dead-letters with evidence itself.
            "dead_letter_queue": sqs.DeadLetterQueue(
                queue=self.dead_letter_queue,
                max_receive_count=spec.receive_limit,
            ),
        }
        self.queue = sqs.Queue(self, "Queue", queue_name=queue_name, **source)
        # Each other priority lane: a queue like this one, with the same settings and the same DLQ.
        self.lanes: dict[str, sqs.Queue] = {
            lane: sqs.Queue(
                self, f"Lane{pascal_case(lane)}Queue", queue_name=lane_queue_name(stack_name, spec, lane), **source
            )
            for lane in other_lanes
        }

        # An explicit role: CDK's default attaches AWSLambdaBasicExecutionRole, which allows logs on "*".
        role = iam.Role(
            self,
            "ServiceRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Worker of the {spec.name} job queue",
        )
        self.role = role
        log_group = logs.LogGroup(
            self,
            "LogGroup",
            retention=LOG_RETENTION,
            removal_policy=RemovalPolicy.RETAIN if retain_logs else RemovalPolicy.DESTROY,
        )
        log_group.grant_write(role)
        self.log_group = log_group

        environment = {
            # The catalog the worker loads (sqs_jobs.catalog_ref): the one this stack was synthesized with.
            ENV_CATALOG: catalog_ref,
            ENV_QUEUE_NAME: spec.name,
            ENV_QUEUE_URL: self.queue.queue_url,
            ENV_DLQ_URL: self.dead_letter_queue.queue_url,
            ENV_IDEMPOTENCY_TABLE: idempotency_table.table_name,
            # SQS names this role's ID as the SenderId of what the worker sends: its own bookkeeping.
            ENV_RUNTIME_ROLE_ID: role.role_id,
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        }
        if self.lanes:
            # Where the worker sends what concerns a record of another lane (its backoff, a fresh copy).
            lanes = {lane.queue_arn: lane.queue_url for lane in self.lanes.values()}
            environment[ENV_LANES] = json.dumps(lanes, separators=(",", ":"), sort_keys=True)
        needed = {name: _provided(resources, name, spec) for name in spec.resources}
        environment.update({resource_env_name(name): item.value for name, item in needed.items()})
        # The worker's settings, which a durable job's function runs with too (sqs_jobs.cdk.durable_function).
        self.environment = dict(environment)

        self.function = lambda_.Function(
            self,
            "Worker",
            description=f"Runs the jobs of the {spec.name} queue: {', '.join(spec.job_names)}",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=code,
            layers=list(layers),
            role=role,
            timeout=Duration.seconds(spec.function_timeout_s),
            memory_size=spec.memory_mb,
            tracing=lambda_.Tracing.ACTIVE,  # adds X-Ray's PutTraceSegments on "*", which X-Ray requires
            log_group=log_group,
            environment=environment,
        )

        placements = {item.placement for item in needed.values() if item.placement is not None}
        if placements:
            # The catalog allows a queue one network. Set on the function's resource: CDK's `vpc` prop needs the
            # VPC looked up at synth, and would attach AWSLambdaVPCAccessExecutionRole ('*' for everything);
            # the network's grant (on the role's policy, which the function waits for) is the least Lambda needs.
            (placement,) = placements
            cfn_function = self.function.node.default_child
            assert isinstance(cfn_function, lambda_.CfnFunction)
            cfn_function.vpc_config = lambda_.CfnFunction.VpcConfigProperty(
                subnet_ids=list(placement.subnet_ids), security_group_ids=list(placement.security_group_ids)
            )

        window = spec.batching_window_s

        def event_source(queue: sqs.IQueue, lane: str | None) -> event_sources.SqsEventSource:
            return event_sources.SqsEventSource(
                queue,
                batch_size=spec.batch_size,
                max_batching_window=Duration.seconds(window) if window > 0 else None,
                # A failed record is retried alone; without this one failure would retry the whole batch.
                report_batch_item_failures=True,
                # Each lane's share: the most urgent lane all of max_concurrency, the others less the reserve.
                max_concurrency=spec.lane_concurrency(lane),
            )

        self.event_source = event_source(self.queue, spec.default_lane)
        # Also grants consuming the queue: ReceiveMessage, DeleteMessage, GetQueueAttributes, GetQueueUrl and
        # ChangeMessageVisibility (the worker's backoff), on this queue only.
        self.function.add_event_source(self.event_source)
        # One event source mapping per other lane, to the same worker, with the same grants on its queue.
        self.lane_event_sources = {lane: event_source(queue, lane) for lane, queue in self.lanes.items()}
        for lane_source in self.lane_event_sources.values():
            self.function.add_event_source(lane_source)
        # The worker dead-letters with evidence itself (permanent failure, last attempt)...
        self.dead_letter_queue.grant(self.function, "sqs:SendMessage")
        # ...and hands records it could not run back to their own queue (lane) as unrun copies (no time left, key
        # busy).
        for own in (self.queue, *self.lanes.values()):
            own.grant(self.function, "sqs:SendMessage")
        # The table only, not its index: the worker reads and writes records by key; the operator lists by index.
        iam.Grant.add_to_principal(
            grantee=self.function, actions=list(IDEMPOTENCY_ACTIONS), resource_arns=[idempotency_table.table_arn]
        )
        # A key's concurrency limit above one looks at its slots in one read (sqs_jobs.worker.key_concurrency):
        # that read, of those items only (by their partition keys).
        if any(job.concurrency is not None and job.concurrency.limit > 1 for job in spec.jobs):
            self.function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["dynamodb:BatchGetItem"],
                    resources=[idempotency_table.table_arn],
                    conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{FLOW_SLOT_PREFIX}*"]}},
                )
            )
        for item in needed.values():
            item.grant(self.function)
        # The queue's recurring schedules, and the role they and delayed jobs are sent with.
        self.scheduler_role = schedules.add_queue(spec, self.queue)
        # A job delayed beyond 15 minutes onto another lane is sent to that lane's queue with the same role.
        for lane_queue in self.lanes.values():
            lane_queue.grant(self.scheduler_role, "sqs:SendMessage")

    def grant_publish(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` enqueue jobs: SendMessage, GetQueueUrl, GetQueueAttributes on this queue only; delay them
        beyond 15 minutes (one-time schedules in the stack's group, sent with this queue's scheduler role); and read
        the SSM parameters that say where all that is, and the stack's job contract."""
        scheduling = self._schedules.grant_one_time_schedules(grantee, self.spec)
        names = [
            *(parameter_name(self._stack_name, self.spec.name, key) for key in PUBLISHER_QUEUE_PARAMETERS),
            *(schedules_parameter_name(self._stack_name, key) for key in PUBLISHER_SCHEDULES_PARAMETERS),
            # The job contract: which jobs exist and where they go, so an older wheel publishes newer jobs.
            contract_parameter_name(self._stack_name),
            # The priority lanes' queues (JobPublisher.from_stack reads them for a queue with lanes).
            *(
                lane_parameter_name(self._stack_name, self.spec.name, lane, key)
                for lane in self.lanes
                for key in (QUEUE_URL, QUEUE_ARN)
            ),
        ]
        reading = grant_parameter_reads(self, grantee, names)
        sending = self.queue.grant_send_messages(grantee)
        for lane_queue in self.lanes.values():
            sending = sending.combine(lane_queue.grant_send_messages(grantee))
        return sending.combine(scheduling).combine(reading)


def _provided(resources: Mapping[str, ProvidedResource], name: str, spec: QueueSpec) -> ProvidedResource:
    try:
        return resources[name]
    except KeyError:
        raise MissingResourceError(
            f"queue {spec.name!r} needs resource {name!r}, which the stack does not provide"
        ) from None
