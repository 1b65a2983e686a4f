"""Each catalog queue's worker Lambda: function settings, event source mapping, role, code asset."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from functions.catalog import CATALOG
from sqs_jobs.batches import OPEN_LIFE_PREFIX
from sqs_jobs.catalog_ref import ENV_CATALOG
from sqs_jobs.resources import AlarmTopic, DeadLetterQueues
from sqs_jobs.specs import JobSpec, QueueSpec
from sqs_jobs.worker.names import METRICS_NAMESPACE, SERVICE_NAME
from sqs_jobs.worker.settings import (
    ENV_DLQ_URL,
    ENV_IDEMPOTENCY_TABLE,
    ENV_QUEUE_NAME,
    ENV_QUEUE_URL,
    ENV_ROUTES,
    ENV_RUNTIME_ROLE_ID,
    durable_function_env_name,
    resource_env_name,
)
from tests.infra.cfn import (
    Permission,
    durable_ids,
    find_one,
    of_type,
    permissions,
    props,
    queue_id,
    render,
    role_id,
    role_statements,
    worker_id,
)
from tests.infra.conftest import Synth
from tests.infra.resource_grants import DLQ_REVIEW, dlq_arns, expected_grant, expected_value

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)
CONSUME = ("ChangeMessageVisibility", "DeleteMessage", "GetQueueAttributes", "GetQueueUrl", "ReceiveMessage")
# The example's jobs allow one run per key at most: no BatchGetItem of slots (tests/infra/test_sample_app.py).
IDEMPOTENCY = ("DeleteItem", "GetItem", "PutItem", "UpdateItem")


def _table_id(synth: Synth, partition_key: str) -> str:
    return find_one(
        synth.resources,
        "AWS::DynamoDB::Table",
        lambda p: p["KeySchema"] == [{"AttributeName": partition_key, "KeyType": "HASH"}],
    )


def _grant(synth: Synth, resource: str) -> set[Permission]:
    return expected_grant(
        synth.resources,
        CATALOG.resource(resource),
        catalog=CATALOG,
        stack_name=synth.context.stack_name,
        settings=synth.context.resource_settings,
        sandbox_recipients=synth.context.mail_sandbox_recipients,
    )


def _resource_value(synth: Synth, resource: str) -> object:
    return expected_value(synth.resources, CATALOG.resource(resource), synth.context.resource_settings)


def _dead_letter_index(synth: Synth) -> dict[str, dict[str, str]]:
    """What `dead_letter_queues` must hold, rendered: every catalog queue (in catalog order) -> its DLQ's URL and
    its worker role's unique ID (the SenderId of the runtime's evidence)."""
    stack_name = synth.context.stack_name
    return {
        spec.name: {
            "dlq_url": f"Ref:{queue_id(synth.resources, stack_name, spec, dlq=True)}",
            "worker_role_id": f"{role_id(synth.resources, worker_id(synth.resources, spec))}.RoleId",
        }
        for spec in CATALOG
    }


def test_one_worker_per_catalog_queue(synth: Synth) -> None:
    functions = of_type(synth.resources, "AWS::Lambda::Function")
    # And one function per durable job (test_durable.py).
    assert len(functions) == len(CATALOG.queues) + len(_durable_jobs(CATALOG.queues))
    for spec in CATALOG:
        worker_id(synth.resources, spec)


@QUEUES
def test_worker_runtime_architecture_handler_and_limits(synth: Synth, spec: QueueSpec) -> None:
    function = props(synth.resources, worker_id(synth.resources, spec))

    # The version make test runs on (Makefile LAMBDA_PYTHON): the tested runtime is the deployed runtime.
    assert function["Runtime"] == f"python{sys.version_info.major}.{sys.version_info.minor}" == "python3.13"
    assert function["Architectures"] == ["arm64"]
    assert function["Handler"] == "sqs_jobs.worker.entry.handler"
    assert function["Timeout"] == spec.function_timeout_s
    assert function["MemorySize"] == spec.memory_mb
    assert function["TracingConfig"] == {"Mode": "Active"}


@QUEUES
def test_worker_environment_names_its_queue_dlq_table_and_resources(synth: Synth, spec: QueueSpec) -> None:
    stack_name = synth.context.stack_name
    function = props(synth.resources, worker_id(synth.resources, spec))
    variables = dict(function["Environment"]["Variables"])
    # A JSON object built from references: compared rendered, key order included.
    index = variables.pop(resource_env_name("dead_letter_queues"), None)
    if "dead_letter_queues" in spec.resources:
        assert index is not None
        assert list(json.loads(render(index)).items()) == list(_dead_letter_index(synth).items())
    # The routes of the jobs its jobs may publish (JobSpec.publishes), each to its queue: only where there are any.
    routes = variables.pop(ENV_ROUTES, None)
    targets = CATALOG.publish_routes(spec.name)
    assert (routes is not None) == bool(targets)
    if routes is not None:
        rendered = json.loads(render(routes))
        assert {job: route[0] for job, route in rendered.items()} == {
            job: target for target in targets for job in CATALOG.queue(target).job_names
        }

    assert variables == {
        # The catalog it was synthesized with, which its worker loads (sqs_jobs.catalog_ref).
        ENV_CATALOG: "functions.catalog:CATALOG",
        ENV_QUEUE_NAME: spec.name,
        ENV_QUEUE_URL: {"Ref": queue_id(synth.resources, stack_name, spec)},
        ENV_DLQ_URL: {"Ref": queue_id(synth.resources, stack_name, spec, dlq=True)},
        ENV_IDEMPOTENCY_TABLE: {"Ref": _table_id(synth, "id")},
        # Its own role: what SQS names as the SenderId of the runtime's messages.
        ENV_RUNTIME_ROLE_ID: {"Fn::GetAtt": [role_id(synth.resources, worker_id(synth.resources, spec)), "RoleId"]},
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        **{
            resource_env_name(resource): _resource_value(synth, resource)
            for resource in spec.resources
            if resource != "dead_letter_queues"
        },
        # Its durable jobs' functions, by their alias's ARN (what a Ref of an alias gives).
        **{
            durable_function_env_name(job.name): {"Ref": durable_ids(synth, job.name)["alias"]}
            for job in _durable_jobs([spec])
        },
    }


@QUEUES
def test_worker_logs_to_its_own_log_group_kept_30_days(synth: Synth, spec: QueueSpec) -> None:
    function = props(synth.resources, worker_id(synth.resources, spec))

    log_group = function["LoggingConfig"]["LogGroup"]["Ref"]
    assert synth.resources[log_group]["Type"] == "AWS::Logs::LogGroup"
    # Longer than the DLQ's retention: a dead-lettered job's logs are still there when it's looked at.
    assert props(synth.resources, log_group)["RetentionInDays"] == 30 > spec.dlq_retention_s / 86_400


@QUEUES
def test_worker_uses_the_dependencies_layer(synth: Synth, spec: QueueSpec) -> None:
    (layer,) = of_type(synth.resources, "AWS::Lambda::LayerVersion")
    function = props(synth.resources, worker_id(synth.resources, spec))

    assert function["Layers"] == [{"Ref": layer}]


@QUEUES
def test_esm_reports_item_failures_with_bounded_concurrency(synth: Synth, spec: QueueSpec) -> None:
    queue = queue_id(synth.resources, synth.context.stack_name, spec)
    function = worker_id(synth.resources, spec)
    mapping = props(
        synth.resources,
        find_one(
            synth.resources,
            "AWS::Lambda::EventSourceMapping",
            lambda p: p["EventSourceArn"] == {"Fn::GetAtt": [queue, "Arn"]},
        ),
    )

    assert mapping["FunctionName"] == {"Ref": function}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": spec.max_concurrency}
    assert mapping["BatchSize"] == spec.batch_size
    if spec.batching_window_s:
        assert mapping["MaximumBatchingWindowInSeconds"] == spec.batching_window_s
    else:
        assert "MaximumBatchingWindowInSeconds" not in mapping


@QUEUES
def test_worker_role_has_exactly_the_grants_it_needs(synth: Synth, spec: QueueSpec) -> None:
    stack_name = synth.context.stack_name
    queue = queue_id(synth.resources, stack_name, spec)
    dlq = queue_id(synth.resources, stack_name, spec, dlq=True)
    function = worker_id(synth.resources, spec)
    log_group = props(synth.resources, function)["LoggingConfig"]["LogGroup"]["Ref"]
    idempotency_table = _table_id(synth, "id")
    expected = {
        ("logs:CreateLogStream", f"{log_group}.Arn"),
        ("logs:PutLogEvents", f"{log_group}.Arn"),
        # X-Ray's PutTraceSegments/PutTelemetryRecords take no resource ARN: "*" is the only form.
        ("xray:PutTraceSegments", "*"),
        ("xray:PutTelemetryRecords", "*"),
        *{(f"sqs:{action}", f"{queue}.Arn") for action in CONSUME},
        ("sqs:SendMessage", f"{dlq}.Arn"),
        ("sqs:SendMessage", f"{queue}.Arn"),  # unrun records handed back as copies
        *{(f"dynamodb:{action}", f"{idempotency_table}.Arn") for action in IDEMPOTENCY},
        # The heartbeat's count of stalled batches: a Query of the open batches' partitions of the life index only.
        (
            "dynamodb:Query",
            f"{idempotency_table}.Arn/index/jobs-by-life"
            f' if {{"ForAllValues:StringLike": {{"dynamodb:LeadingKeys": ["{OPEN_LIFE_PREFIX}*"]}}}}',
        ),
    }
    for resource in spec.resources:
        expected |= _grant(synth, resource)
    # A durable job's function shares the worker's role: its log group, its checkpoints, the worker's start, and
    # what the heartbeat's sweep reads of its executions.
    for job in _durable_jobs([spec]):
        durable = durable_ids(synth, job.name)
        expected |= {
            ("logs:CreateLogStream", f"{durable['log_group']}.Arn"),
            ("logs:PutLogEvents", f"{durable['log_group']}.Arn"),
            ("lambda:CheckpointDurableExecution", f"{durable['function']}.Arn:*"),
            ("lambda:GetDurableExecutionState", f"{durable['function']}.Arn:*"),
            ("lambda:InvokeFunction", f"Ref:{durable['alias']}"),
            ("lambda:GetDurableExecution", f"{durable['function']}.Arn:*"),
            ("lambda:GetDurableExecutionHistory", f"{durable['function']}.Arn:*"),
            ("lambda:ListDurableExecutionsByFunction", f"{durable['function']}.Arn"),
            ("lambda:ListDurableExecutionsByFunction", f"{durable['function']}.Arn:*"),
        }

    granted = permissions(role_statements(synth.resources, role_id(synth.resources, function)))

    assert granted == expected


@QUEUES
def test_worker_role_uses_star_only_for_xray_and_no_managed_policy(synth: Synth, spec: QueueSpec) -> None:
    role = role_id(synth.resources, worker_id(synth.resources, spec))
    granted = permissions(role_statements(synth.resources, role))

    assert {action for action, resource in granted if resource == "*"} == {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }
    assert not any(action.endswith("*") for action, _ in granted)
    # AWSLambdaBasicExecutionRole would allow CloudWatch Logs on "*".
    assert "ManagedPolicyArns" not in props(synth.resources, role)
    assert props(synth.resources, role)["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]


@QUEUES
def test_worker_sends_messages_only_to_its_dlq_and_its_own_queue(synth: Synth, spec: QueueSpec) -> None:
    # The DLQ for dead-lettering with evidence; its own queue for handing back unrun records.
    dlq = queue_id(synth.resources, synth.context.stack_name, spec, dlq=True)
    queue = queue_id(synth.resources, synth.context.stack_name, spec)
    role = role_id(synth.resources, worker_id(synth.resources, spec))

    granted = permissions(role_statements(synth.resources, role))

    assert {resource for action, resource in granted if action == "sqs:SendMessage"} == {f"{dlq}.Arn", f"{queue}.Arn"}


def test_code_asset_ships_the_projects_code_only_and_the_handler_is_the_frameworks(synth: Synth) -> None:
    functions = of_type(synth.resources, "AWS::Lambda::Function")
    keys = {props(synth.resources, key)["Code"]["S3Key"] for key in functions}
    assert len(keys) == 1, "every worker runs the same code asset"
    assert {props(synth.resources, key)["Handler"] for key in functions} <= {
        "sqs_jobs.worker.entry.handler",
        "sqs_jobs.durable.entry.handler",
    }
    # The zip's content is staged in the cloud assembly as asset.<hash>, zipped at publish time.
    asset = synth.assembly_dir / f"asset.{keys.pop().removesuffix('.zip')}"

    # The project's catalog and jobs; the framework is in the layer (`jobctl bundle`), at the installed version.
    assert sorted(path.name for path in asset.iterdir()) == ["functions"]
    shipped = {str(path.relative_to(asset)) for path in asset.rglob("*")}
    assert {"functions/__init__.py", "functions/catalog.py", "functions/jobs/order_confirmation.py"} <= shipped
    assert not [path for path in shipped if "/tests" in path or path.endswith("conftest.py")]
    # Bytecode for every module, for the runtime's Python only, hash-based (zipping can't invalidate it).
    sources = sorted(asset.rglob("*.py"))
    for source in sources:
        [compiled] = (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc")
        assert compiled.name == f"{source.stem}.{sys.implementation.cache_tag}.pyc"
        assert pyc_flags(compiled) == UNCHECKED_HASH
    assert len(list(asset.rglob("*.pyc"))) == len(sources)


def test_the_layer_ships_bytecode_for_the_runtime_too(synth: Synth) -> None:
    [layer] = of_type(synth.resources, "AWS::Lambda::LayerVersion")
    asset = synth.assembly_dir / f"asset.{props(synth.resources, layer)['Content']['S3Key'].removesuffix('.zip')}"
    sources = sorted((asset / "python").rglob("*.py"))
    assert sources
    tags = {compiled.name.split(".")[-2] for compiled in (asset / "python").rglob("*.pyc")}
    assert tags == {sys.implementation.cache_tag}
    for source in sources:
        [compiled] = (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc")
        assert pyc_flags(compiled) == UNCHECKED_HASH


# PEP 552: a .pyc's second word holds its flags; bit 0 hash-based, bit 1 check the source. Unchecked: 0b01.
UNCHECKED_HASH = 0b01


def pyc_flags(path: Path) -> int:
    with path.open("rb") as compiled:
        header = compiled.read(8)
    assert header[:4] == importlib.util.MAGIC_NUMBER, f"{path} was compiled by another Python"
    return int.from_bytes(header[4:8], "little")


def test_only_workers_given_the_dlqs_or_the_alarm_topic_may_read_the_dlqs_or_publish_alarms(synth: Synth) -> None:
    # Reading every DLQ and reporting to the alarm topic are resources of their own kinds; no other worker may.
    all_dlqs = dlq_arns(CATALOG, synth.context.stack_name)
    readers = set()
    for spec in CATALOG:
        granted = permissions(
            role_statements(synth.resources, role_id(synth.resources, worker_id(synth.resources, spec)))
        )
        touches_dlqs = {arn for _, arn in granted} & all_dlqs
        publishes = {action for action, _ in granted if action.startswith(("sns:", "kms:"))}
        kinds = {type(CATALOG.resource(name)) for name in spec.resources}
        if DeadLetterQueues in kinds:
            assert touches_dlqs == all_dlqs
            assert {action for action, arn in granted if arn in all_dlqs} == set(DLQ_REVIEW)
            readers.add(spec.name)
        else:
            assert not touches_dlqs, spec.name
        assert bool(publishes) == (AlarmTopic in kinds), spec.name
    assert readers, "the catalog has a job that reviews the DLQs"


def _durable_jobs(queues: Iterable[QueueSpec]) -> list[JobSpec]:
    return [job for spec in queues for job in spec.jobs if job.durable is not None]
