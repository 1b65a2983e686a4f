"""Reading the synthesized CloudFormation template: find resources, render intrinsics, list permissions."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqs_jobs.cdk.naming import physical_queue_name
from sqs_jobs.cdk.worker_code import HANDLER
from sqs_jobs.specs import QueueSpec
from sqs_jobs.worker.settings import ENV_QUEUE_NAME

Resources = Mapping[str, Mapping[str, Any]]
Permission = tuple[str, str]

# Pseudo parameters rendered as placeholders: the stack is environment-agnostic.
_PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "${Region}", "AWS::AccountId": "${Account}"}


def render(value: object) -> str:
    """One comparable string for a CloudFormation value: `Id.Attr` for GetAtt, `Ref:Id` for Ref."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref":
            return _PSEUDO.get(argument, f"Ref:{argument}")
        if function == "Fn::GetAtt":
            return f"{argument[0]}.{argument[1]}"
        if function == "Fn::Join":
            return str(argument[0]).join(render(part) for part in argument[1])
    raise AssertionError(f"no rendering for {value!r}")


def of_type(resources: Resources, type_name: str) -> dict[str, Mapping[str, Any]]:
    return {key: value for key, value in resources.items() if value["Type"] == type_name}


def props(resources: Resources, logical_id: str) -> Mapping[str, Any]:
    properties: Mapping[str, Any] = resources[logical_id].get("Properties", {})
    return properties


def find_one(resources: Resources, type_name: str, where: Callable[[Mapping[str, Any]], bool]) -> str:
    """The logical ID of the one resource of `type_name` whose properties satisfy `where`."""
    candidates = of_type(resources, type_name).items()
    found = [key for key, value in candidates if where(value.get("Properties", {}))]
    assert len(found) == 1, f"expected one {type_name}, found {found}"
    return found[0]


def queue_id(resources: Resources, stack_name: str, spec: QueueSpec, *, dlq: bool = False) -> str:
    name = physical_queue_name(stack_name, spec.name, dlq=dlq, fifo=spec.fifo)
    return find_one(resources, "AWS::SQS::Queue", lambda p: p.get("QueueName") == name)


def worker_id(resources: Resources, spec: QueueSpec) -> str:
    """The queue's worker: its durable jobs' functions have its environment too, and their own handler."""
    return find_one(
        resources,
        "AWS::Lambda::Function",
        lambda p: (
            p.get("Environment", {}).get("Variables", {}).get(ENV_QUEUE_NAME) == spec.name
            and p.get("Handler") == HANDLER
        ),
    )


def role_id(resources: Resources, function_id: str) -> str:
    role = props(resources, function_id)["Role"]
    assert set(role) == {"Fn::GetAtt"} and role["Fn::GetAtt"][1] == "Arn", role
    return str(role["Fn::GetAtt"][0])


def role_statements(resources: Resources, role: str) -> list[Mapping[str, Any]]:
    """Every statement of every inline policy attached to `role`."""
    return [
        statement
        for policy in of_type(resources, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def permissions(statements: Iterable[Mapping[str, Any]]) -> set[Permission]:
    """(action, rendered resource) pairs; only Allow statements are expected in a worker's role. A statement's
    condition is part of what it allows: its resources read `<resource> if <condition as JSON>`."""
    pairs: set[Permission] = set()
    for statement in statements:
        assert statement["Effect"] == "Allow", statement
        assert not {"NotAction", "NotResource"} & set(statement), statement
        condition = statement.get("Condition")
        suffix = f" if {json.dumps(condition, sort_keys=True)}" if condition else ""
        for action in _as_list(statement["Action"]):
            pairs.update((action, render(resource) + suffix) for resource in _as_list(statement["Resource"]))
    return pairs


def conditioned(resource: str, condition: Mapping[str, Any]) -> str:
    """A resource as `permissions` renders it under `condition`."""
    return f"{resource} if {json.dumps(condition, sort_keys=True)}"


def _as_list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def durable_ids(synth: Any, job: str) -> dict[str, str]:
    """A durable job's function, its alias and its log group, by logical ID (`synth`: tests.infra.conftest.Synth)."""
    from sqs_jobs.cdk.durable_function import DURABLE_HANDLER
    from sqs_jobs.worker.settings import ENV_DURABLE_JOB

    resources = synth.resources
    function = find_one(
        resources,
        "AWS::Lambda::Function",
        lambda p: (
            p.get("Handler") == DURABLE_HANDLER
            and p.get("Environment", {}).get("Variables", {}).get(ENV_DURABLE_JOB) == job
        ),
    )
    alias = find_one(resources, "AWS::Lambda::Alias", lambda p: p.get("FunctionName") == {"Ref": function})
    log_group = str(props(resources, function)["LoggingConfig"]["LogGroup"]["Ref"])
    return {"function": function, "alias": alias, "log_group": log_group}
