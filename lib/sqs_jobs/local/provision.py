"""Creates, on any SQS/DynamoDB/SES/S3 endpoint (the local moto server, or moto's mock_aws in tests), the same
queues, DLQs, worker roles and functions the CDK stack creates, and each catalog resource by its kind
(sqs_jobs.local.resource_providers), with the same settings, from the same catalog."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from moto.core.models import DEFAULT_ACCOUNT_ID

from sqs_jobs.cdk.asset_staging import RUNTIME_VERSION
from sqs_jobs.cdk.naming import (
    DLQ_URL,
    QUEUE_ARN,
    QUEUE_URL,
    WORKER_ROLE_ID,
    lane_parameter_name,
    lane_queue_name,
    parameter_name,
    physical_queue_name,
)
from sqs_jobs.contract import JobContract
from sqs_jobs.flow_control import RateLimit
from sqs_jobs.local.resource_providers import GlobalIndex, LocalResources, create_table
from sqs_jobs.specs import Catalog, QueueSpec
from sqs_jobs.stack_names import (
    DEFAULT_STACK_NAME,
    DURABLE_ALIAS,
    batches_parameter_name,
    contract_parameter_name,
    durable_function_name,
    resource_parameter_name,
    results_parameter_name,
)
from sqs_jobs.worker.clients import new_session
from sqs_jobs.worker.names import LIFE, LIFE_AT, LIFE_INDEX
from sqs_jobs.worker.settings import WorkerSettings, endpoint_rate_limits

# Who may assume a worker role: Lambda, as in the stack.
_LAMBDA_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
)


def queue_parameters(
    stack_name: str, queue: str, url: str, dlq_url: str, arn: str, worker_role_id: str
) -> dict[str, str]:
    """The SSM parameters through which publishers and jobctl find a queue, as the stack writes them."""
    values = {QUEUE_URL: url, DLQ_URL: dlq_url, QUEUE_ARN: arn, WORKER_ROLE_ID: worker_role_id}
    return {parameter_name(stack_name, queue, key): value for key, value in values.items()}


def fifo_attributes(spec: QueueSpec) -> dict[str, str]:
    """Set at creation only (SQS can't turn a queue FIFO later); the stack sets the same."""
    return {"FifoQueue": "true", "ContentBasedDeduplication": "true"} if spec.fifo else {}


def queue_attributes(spec: QueueSpec, dlq_arn: str) -> dict[str, str]:
    """The source queue's SQS attributes; the stack sets the same (tests/infra/test_engine_matches_stack.py)."""
    return {
        "VisibilityTimeout": str(spec.visibility_timeout_s),
        "MessageRetentionPeriod": str(spec.retention_s),
        "MaximumMessageSize": str(spec.max_message_bytes),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": spec.receive_limit}),
        "SqsManagedSseEnabled": "true",
    }


def dlq_attributes(spec: QueueSpec, source_arn: str, lane_arns: tuple[str, ...] = ()) -> dict[str, str]:
    """The DLQ's attributes; `lane_arns`: the queue's priority lanes other than the default one, which share it."""
    return {
        "MessageRetentionPeriod": str(spec.dlq_retention_s),
        "MaximumMessageSize": str(spec.dlq_max_message_bytes),
        "RedriveAllowPolicy": json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [source_arn, *lane_arns]}),
        "SqsManagedSseEnabled": "true",
    }


@dataclass(frozen=True)
class LocalLane:
    """One SQS queue a queue's worker consumes: a priority lane's (`name`), or the queue's own (`name` None)."""

    name: str | None
    url: str
    arn: str


@dataclass(frozen=True)
class LocalQueue:
    spec: QueueSpec
    url: str
    arn: str
    dlq_url: str
    dlq_arn: str
    # The worker's IAM role: workers run on credentials from AssumeRole of it, as Lambda runs them.
    worker_role_arn: str
    worker_role_id: str
    # Its priority lanes, the most urgent first (the default lane's queue is `url`); empty without lanes.
    lanes: tuple[LocalLane, ...] = ()

    @property
    def sources(self) -> tuple[LocalLane, ...]:
        """The queues its event source mappings poll, the most urgent first: its lanes, or itself."""
        return self.lanes or (LocalLane(None, self.url, self.arn),)

    @property
    def other_lanes(self) -> tuple[LocalLane, ...]:
        """Its priority lanes other than the default one (whose queue is the queue's own)."""
        return tuple(lane for lane in self.lanes if lane.arn != self.arn)


@dataclass(frozen=True)
class LocalDeployment:
    """What provision() made: per catalog queue its URLs and ARNs, and the shared tables."""

    stack_name: str
    region: str
    queues: dict[str, LocalQueue]
    idempotency_table: str
    resources: dict[str, str]
    # Per queue, the rate limits of the endpoints its jobs use (sqs_jobs.worker.settings.endpoint_rate_limits).
    endpoint_limits: dict[str, dict[str, tuple[str, RateLimit]]] = field(default_factory=dict)
    # Per queue, the queues its worker may publish to (Catalog.publish_routes: a batch's callbacks); it is given
    # their jobs' routes.
    publish_routes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def worker_settings(self, queue: str) -> WorkerSettings:
        local = self.queues[queue]
        return WorkerSettings(
            queue=local.spec,
            queue_url=local.url,
            dlq_url=local.dlq_url,
            idempotency_table=self.idempotency_table,
            runtime_role_id=local.worker_role_id,
            resources={name: self.resources[name] for name in local.spec.resources},
            endpoint_limits=self.endpoint_limits.get(queue, {}),
            routes={
                job: (target, self.queues[target].url)
                for target in self.publish_routes.get(queue, ())
                for job in self.queues[target].spec.job_names
            },
            durable_functions={
                job.name: local_durable_function_arn(self.region, self.stack_name, job.name)
                for job in local.spec.jobs
                if job.durable is not None
            },
            lane_urls={lane.arn: lane.url for lane in local.other_lanes},
        )

    def worker_session(self, sts_client: Any, queue: str, session_name: str) -> boto3.session.Session:
        """A session on credentials of the queue's worker role, as Lambda gives its function: what the worker
        sends then carries the role's ID as SenderId."""
        credentials = sts_client.assume_role(
            RoleArn=self.queues[queue].worker_role_arn, RoleSessionName=session_name[:64]
        )["Credentials"]
        return new_session(
            aws_access_key_id=credentials["AccessKeyId"],
            aws_secret_access_key=credentials["SecretAccessKey"],
            aws_session_token=credentials["SessionToken"],
            region_name=self.region,
        )


def _worker_role(iam: Any, stack_name: str, queue: str) -> tuple[str, str]:
    """The queue's worker role (ARN, unique ID), created or found."""
    name = f"{stack_name}-{queue}-worker"[:64]
    try:
        role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=_LAMBDA_TRUST)["Role"]
    except iam.exceptions.EntityAlreadyExistsException:
        role = iam.get_role(RoleName=name)["Role"]
    return str(role["Arn"]), str(role["RoleId"])


def worker_function_name(stack_name: str, queue: str) -> str:
    return f"{stack_name}-{queue}-worker"


def local_durable_function_arn(region: str, stack_name: str, job: str) -> str:
    """A durable job's function's alias ARN as the worker is told it; the local engine runs the function itself
    (sqs_jobs.local.durable), by the job's name."""
    function = durable_function_name(stack_name, job)
    return f"arn:aws:lambda:{region}:{DEFAULT_ACCOUNT_ID}:function:{function}:{DURABLE_ALIAS}"


def _placeholder_code() -> bytes:
    """The local functions' code: never run (the engine runs the worker in-process), but Lambda wants a zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "README.txt", "The local engine runs sqs_jobs.worker.entry in-process; this zip is never run.\n"
        )
    return buffer.getvalue()


def _worker_function(lambda_client: Any, deployment: LocalDeployment, queue: str) -> None:
    """The queue's worker function and its SQS event source mapping, as the stack declares them, so that
    `jobctl queue pause|resume` and `jobctl job show` find them through Lambda's API here as on AWS."""
    local = deployment.queues[queue]
    name = worker_function_name(deployment.stack_name, queue)
    environment = {"Variables": deployment.worker_settings(queue).to_environ()}
    try:
        lambda_client.get_function(FunctionName=name)
    except lambda_client.exceptions.ResourceNotFoundException:
        lambda_client.create_function(
            FunctionName=name,
            Runtime="python{}.{}".format(*RUNTIME_VERSION),
            Role=local.worker_role_arn,
            Handler="sqs_jobs.worker.entry.handler",
            Code={"ZipFile": _placeholder_code()},
            Timeout=local.spec.function_timeout_s,
            Environment=environment,
        )
    for source in local.sources:  # one per priority lane, each with the lane's share of the concurrency
        if lambda_client.list_event_source_mappings(EventSourceArn=source.arn)["EventSourceMappings"]:
            continue
        lambda_client.create_event_source_mapping(
            EventSourceArn=source.arn,
            FunctionName=name,
            BatchSize=local.spec.batch_size,
            FunctionResponseTypes=["ReportBatchItemFailures"],
            ScalingConfig={"MaximumConcurrency": local.spec.lane_concurrency(source.name)},
        )


def _detach_moto_sqs_triggers() -> None:
    """moto invokes a mapped function itself on every SendMessage (in Docker, which doesn't exist here); the
    engine's emulator is the poller instead. Unhook moto's, in this process, where its backends live."""
    from moto.sqs.models import sqs_backends

    for account in sqs_backends.values():
        for backend in account.values():
            for queue in backend.queues.values():
                queue.lambda_event_source_mappings.clear()


def provision(
    client: Callable[[str], Any],
    catalog: Catalog,
    stack_name: str = DEFAULT_STACK_NAME,
    settings: Mapping[str, str] | None = None,
) -> LocalDeployment:
    """Create (or find) every resource of the stack. Idempotent: a second call returns the same deployment.
    `settings` sets a resource's local value by name: an endpoint's URL (its stand-in's), the mail sender's
    address, a secret's value (else its `local_value`)."""
    sqs = client("sqs")
    iam = client("iam")
    queues: dict[str, LocalQueue] = {}
    for spec in catalog:
        source_name = physical_queue_name(stack_name, spec.name, fifo=spec.fifo)
        dlq_url = sqs.create_queue(
            QueueName=physical_queue_name(stack_name, spec.name, dlq=True, fifo=spec.fifo),
            Attributes=fifo_attributes(spec),
        )["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        arn_prefix = dlq_arn.rsplit(":", 1)[0] + ":"
        source_arn = arn_prefix + source_name
        # Each priority lane is a queue like the queue's own, with the same settings and the one DLQ.
        lanes = [LocalLane(lane, "", arn_prefix + lane_queue_name(stack_name, spec, lane)) for lane in spec.lanes]
        other_arns = tuple(lane.arn for lane in lanes if lane.arn != source_arn)
        sqs.set_queue_attributes(QueueUrl=dlq_url, Attributes=dlq_attributes(spec, source_arn, other_arns))
        url = sqs.create_queue(QueueName=source_name, Attributes=fifo_attributes(spec))["QueueUrl"]
        sqs.set_queue_attributes(QueueUrl=url, Attributes=queue_attributes(spec, dlq_arn))
        for index, lane in enumerate(lanes):
            lane_url = url
            if lane.arn != source_arn:
                lane_url = sqs.create_queue(QueueName=lane.arn.rsplit(":", 1)[1])["QueueUrl"]
                sqs.set_queue_attributes(QueueUrl=lane_url, Attributes=queue_attributes(spec, dlq_arn))
            lanes[index] = LocalLane(lane.name, lane_url, lane.arn)
        role_arn, role_id = _worker_role(iam, stack_name, spec.name)
        queues[spec.name] = LocalQueue(
            spec=spec,
            url=url,
            arn=source_arn,
            dlq_url=dlq_url,
            dlq_arn=dlq_arn,
            worker_role_arn=role_arn,
            worker_role_id=role_id,
            lanes=tuple(lanes),
        )

    dynamodb = client("dynamodb")
    idempotency_table = f"{stack_name}-idempotency"
    create_table(
        dynamodb,
        idempotency_table,
        key="id",
        ttl_attribute="expiration",
        index=GlobalIndex(LIFE_INDEX, LIFE, LIFE_AT),
    )
    # The account from a queue ARN (a catalog has at least one queue): no STS call needed.
    account = next(iter(queues.values())).arn.split(":")[4]
    makers = LocalResources(
        client,
        stack_name=stack_name,
        account=account,
        settings=settings or {},
        dead_letter_queues={
            name: {"dlq_url": local.dlq_url, "worker_role_id": local.worker_role_id} for name, local in queues.items()
        },
    )
    resources = {spec.name: makers.provide(spec) for spec in catalog.resources}
    ssm = client("ssm")
    for local in queues.values():
        parameters = queue_parameters(
            stack_name, local.spec.name, local.url, local.dlq_url, local.arn, local.worker_role_id
        )
        for lane in local.other_lanes:
            assert lane.name is not None
            for key, value in ((QUEUE_URL, lane.url), (QUEUE_ARN, lane.arn)):
                parameters[lane_parameter_name(stack_name, local.spec.name, lane.name, key)] = value
        for name, value in parameters.items():
            ssm.put_parameter(Name=name, Value=value, Type="String", Overwrite=True)
    # Each resource's value where services find it, as the stack writes it.
    for resource in catalog.resources:
        if resource.published:
            parameter = resource_parameter_name(stack_name, resource.name)
            ssm.put_parameter(Name=parameter, Value=resources[resource.name], Type="String", Overwrite=True)
    # Where publishers define batches, as the stack writes it.
    ssm.put_parameter(Name=batches_parameter_name(stack_name), Value=idempotency_table, Type="String", Overwrite=True)
    # Where services read their jobs' results, as the stack writes it.
    ssm.put_parameter(Name=results_parameter_name(stack_name), Value=idempotency_table, Type="String", Overwrite=True)
    # The job contract publishers read, as the stack writes it.
    ssm.put_parameter(
        Name=contract_parameter_name(stack_name),
        Value=JobContract.from_catalog(catalog).to_json(),
        Type="String",
        Overwrite=True,
    )
    deployment = LocalDeployment(
        stack_name=stack_name,
        region=sqs.meta.region_name,
        queues=queues,
        idempotency_table=idempotency_table,
        resources=resources,
        endpoint_limits={spec.name: endpoint_rate_limits(catalog, spec) for spec in catalog},
        publish_routes={spec.name: catalog.publish_routes(spec.name) for spec in catalog},
    )
    lambda_client = client("lambda")
    for queue in queues:
        _worker_function(lambda_client, deployment, queue)
    _detach_moto_sqs_triggers()
    return deployment
