"""A durable job's function in the template (sqs_jobs.cdk.durable_function), on the shared synth: its DurableConfig from
the catalog, the alias the worker starts it through, the grants AWS documents, and its alarms."""

from __future__ import annotations

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cdk.durable_function import CHECKPOINT_ACTIONS, DURABLE_HANDLER, SWEEP_LIST_ACTION, SWEEP_READ_ACTIONS
from sqs_jobs.specs import JobSpec, QueueSpec
from sqs_jobs.stack_names import DURABLE_ALIAS, durable_function_name
from sqs_jobs.worker.settings import ENV_DURABLE_JOB, durable_function_env_name
from tests.infra.cfn import durable_ids, of_type, permissions, props, render, role_id, role_statements, worker_id
from tests.infra.conftest import Synth

DURABLE = [(spec, job) for spec in CATALOG for job in spec.jobs if job.durable is not None]
DURABLE_JOBS = pytest.mark.parametrize(("spec", "job"), DURABLE, ids=[job.name for _, job in DURABLE])


def test_the_example_catalog_has_a_durable_job() -> None:
    assert [job.name for _, job in DURABLE] == ["import_orders"]


@DURABLE_JOBS
def test_its_function_runs_the_durable_handler_with_the_catalogs_durable_config(
    synth: Synth, spec: QueueSpec, job: JobSpec
) -> None:
    assert job.durable is not None
    function = props(synth.resources, durable_ids(synth, job.name)["function"])
    assert function["Handler"] == DURABLE_HANDLER
    assert function["FunctionName"] == durable_function_name(synth.context.stack_name, job.name)
    assert function["DurableConfig"] == {
        "ExecutionTimeout": job.durable.execution_timeout_s,
        "RetentionPeriodInDays": job.durable.retention_days,
    }
    assert function["Timeout"] == job.durable.function_timeout_s
    assert function["MemorySize"] == job.durable.memory_mb
    worker = props(synth.resources, worker_id(synth.resources, spec))
    # The worker's environment and role, and which job it runs.
    expected = {**worker["Environment"]["Variables"], ENV_DURABLE_JOB: job.name}
    expected.pop(durable_function_env_name(job.name))
    assert function["Environment"]["Variables"] == expected
    assert function["Role"] == worker["Role"]


@DURABLE_JOBS
def test_the_worker_starts_it_through_its_alias_and_may_invoke_nothing_else(
    synth: Synth, spec: QueueSpec, job: JobSpec
) -> None:
    ids = durable_ids(synth, job.name)
    alias = props(synth.resources, ids["alias"])
    assert alias["Name"] == DURABLE_ALIAS
    # The current version, which CDK publishes as the code or configuration changes.
    (version,) = of_type(synth.resources, "AWS::Lambda::Version")
    assert render(alias["FunctionVersion"]) == f"{version}.Version"
    worker = worker_id(synth.resources, spec)
    variables = props(synth.resources, worker)["Environment"]["Variables"]
    assert variables[durable_function_env_name(job.name)] == {"Ref": ids["alias"]}
    granted = permissions(role_statements(synth.resources, role_id(synth.resources, worker)))
    assert {resource for action, resource in granted if action == "lambda:InvokeFunction"} == {f"Ref:{ids['alias']}"}
    # The checkpoint actions AWS lists for a durable function's role, on its executions (`<function ARN>:*`) only.
    for action in CHECKPOINT_ACTIONS:
        assert {resource for granted_action, resource in granted if granted_action == action} == {
            f"{ids['function']}.Arn:*"
        }


@DURABLE_JOBS
def test_its_worker_may_read_its_executions_for_the_heartbeat_sweep_and_no_other_functions(
    synth: Synth, spec: QueueSpec, job: JobSpec
) -> None:
    ids = durable_ids(synth, job.name)
    granted = permissions(role_statements(synth.resources, role_id(synth.resources, worker_id(synth.resources, spec))))

    def resources_of(action: str) -> set[str]:
        return {resource for granted_action, resource in granted if granted_action == action}

    # An execution is authorized by its own ARN, `<function ARN>:<version>/durable-execution/...`: `:*` matches
    # this function's executions of every version, and nothing else.
    for action in SWEEP_READ_ACTIONS:
        assert resources_of(action) == {f"{ids['function']}.Arn:*"}
    # The list names the function unqualified (every version's executions): its ARN, and its executions'.
    assert resources_of(SWEEP_LIST_ACTION) == {f"{ids['function']}.Arn", f"{ids['function']}.Arn:*"}
    assert not {resource for _, resource in granted if resource == "*" and _.startswith("lambda:")}


@DURABLE_JOBS
def test_its_executions_failing_or_timing_out_page(synth: Synth, spec: QueueSpec, job: JobSpec) -> None:
    function = durable_ids(synth, job.name)["function"]
    found = {}
    for key in of_type(synth.resources, "AWS::CloudWatch::Alarm"):
        alarm = props(synth.resources, key)
        if alarm.get("Namespace") == "AWS/Lambda" and alarm.get("Dimensions") == [
            {"Name": "FunctionName", "Value": {"Ref": function}}
        ]:
            found[alarm["MetricName"]] = alarm
    assert set(found) == {"DurableExecutionFailed", "DurableExecutionTimedOut"}
    for alarm in found.values():
        assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == ("Sum", 300, 1)
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"
        assert alarm["AlarmActions"] and alarm["OKActions"]
        assert alarm["AlarmName"].startswith(f"{synth.context.stack_name}-{spec.name}-durable-")
