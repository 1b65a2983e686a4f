"""The grant to read some of the stack's SSM parameters, by their names as written (each grant that lets a service
find something of the stack: the queues, the batch table, the results table)."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct


def grant_parameter_reads(scope: Construct, grantee: iam.IGrantable, names: Iterable[str]) -> iam.Grant:
    """`ssm:GetParameters` on the parameters named `names` (`/<stack>/...`), and nothing else. Names as written,
    never a `StringParameter`'s `parameter_name`: that is a token resolving to `/<name>`, which after the ARN's
    `parameter/` would name no parameter."""
    stack = Stack.of(scope)
    return iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["ssm:GetParameters"],
        resource_arns=[
            stack.format_arn(
                service="ssm",
                resource="parameter",
                # The names start with "/", which the ARN's "parameter/" already holds.
                resource_name=name.removeprefix("/"),
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
            for name in names
        ],
    )
