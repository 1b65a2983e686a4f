"""Security checks on the shared synth: cdk-nag (AwsSolutions, Serverless), cfn-lint, and template-wide IAM rules.

Per-queue checks live beside the resources they check: encryption and TLS-only policies, redrive-allow policies
(test_queues.py), each worker's exact grants (test_workers.py), the heartbeat roles (test_heartbeat.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from aws_cdk import Validations

from tests.infra.cfn import of_type, render
from tests.infra.conftest import REPO_ROOT, Synth
from tests.infra.nag import unacknowledged_findings

# cfn-lint warnings allowed in the template, each with why; any other warning, and every error, fails.
ALLOWED_CFN_LINT_WARNINGS = {
    # CDK adds DependsOn the role (and its default policy) to every function so the policy exists before the
    # function is invoked; the role half is also implied by the Role GetAtt. Harmless, and not ours to remove.
    "W3005": "redundant DependsOn that CDK generates for Lambda functions on their role",
}
# The only actions a "*" resource is acceptable for: X-Ray's trace APIs take no resource ARN.
STAR_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
# cdk-nag names a GetAtt in a finding's ID by the logical ID; the docs write the construct's role instead.
_GETATT = re.compile(r"<[A-Za-z0-9]+\.Arn>")
# How CDK keys an acknowledged rule in a construct's metadata.
_ACKNOWLEDGED_PREFIX = "Annotation::"
_DOCUMENTED_RULE = re.compile(r"^\| `((?:AwsSolutions|Serverless)-[^`]+)` \| ", re.MULTILINE)


@pytest.fixture(scope="module")
def nag_violations(synth: Synth) -> list[str]:
    """Unacknowledged findings of both packs on the shared synth's stack: no second synth (~1 s)."""
    return unacknowledged_findings(synth.stack)


@pytest.fixture(scope="module")
def acknowledged(synth: Synth) -> list[tuple[str, str, str]]:
    """(rule, construct path, reason) of every acknowledgement in the stack."""
    prefix = _ACKNOWLEDGED_PREFIX
    found: list[tuple[str, str, str]] = []
    for construct in synth.stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                for key, reason in dict(entry.data).items():
                    assert key.startswith(prefix), key
                    found.append((key.removeprefix(prefix), construct.node.path, str(reason)))
    return found


def test_cdk_nag_finds_nothing_unacknowledged(nag_violations: list[str]) -> None:
    assert nag_violations == []


def test_every_acknowledgement_is_documented_with_a_specific_reason(
    synth: Synth, acknowledged: list[tuple[str, str, str]]
) -> None:
    assert acknowledged, "nag_suppressions.acknowledge was not applied"
    for rule, path, reason in acknowledged:
        assert rule.startswith(("AwsSolutions-", "Serverless-")), (rule, path)
        assert len(reason) >= 100, f"{rule} at {path}: say why, specifically ({reason!r})"
    # The stack's own acknowledgements are listed in the docs; a resource kind's are declared once, with their
    # reasons, by its provider (lib/sqs_jobs/cdk/resource_providers.py), which the docs point to.
    kinds = _kind_acknowledgements(synth)
    docs = (REPO_ROOT / "docs" / "infrastructure.md").read_text()
    stacks_own = {_GETATT.sub("<function.Arn>", rule) for rule, _, _ in acknowledged if rule not in kinds}
    assert stacks_own == set(_DOCUMENTED_RULE.findall(docs))


def _kind_acknowledgements(synth: Synth) -> set[str]:
    """Rules acknowledged for a resource's kind: on what its provider made, or on a grantee of its grant."""
    rules = {rule for provided in synth.stack.resources.provided.values() for rule, _ in provided.findings}
    resources_path = synth.stack.resources.node.path + "/"
    for construct in synth.stack.node.find_all():
        if construct.node.path.startswith(resources_path):
            for entry in construct.node.metadata:
                if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                    rules |= {key.removeprefix(_ACKNOWLEDGED_PREFIX) for key in dict(entry.data)}
    return rules


def test_a_resource_grants_findings_are_acknowledged_only_on_the_workers_it_is_granted_to(
    synth: Synth, acknowledged: list[tuple[str, str, str]]
) -> None:
    for name, provided in synth.stack.resources.provided.items():
        grantees = {
            f"{synth.stack.node.path}/{item.node.id}/ServiceRole/DefaultPolicy/Resource"
            for item in synth.stack.queues.values()
            if name in item.spec.resources
        }
        for rule, _ in provided.findings:
            assert {path for found, path, _ in acknowledged if found == rule} == grantees, (name, rule)


def test_cfn_lint_finds_no_errors(synth: Synth) -> None:
    from cfnlint.api import lint_file

    template = synth.assembly_dir / synth.stack.template_file
    matches = lint_file(template)
    errors = [f"{match.rule.id} {match.message} ({match.path})" for match in matches if match.rule.id[0] == "E"]
    warnings = {match.rule.id for match in matches if match.rule.id[0] == "W"}

    assert errors == []
    assert warnings <= set(ALLOWED_CFN_LINT_WARNINGS), sorted(warnings - set(ALLOWED_CFN_LINT_WARNINGS))


def _statements(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    statements = document["Statement"]
    return list(statements) if isinstance(statements, list) else [statements]


def _as_list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _identity_policies(synth: Synth) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every identity-based statement in the stack: inline policies, roles' policies, managed policies."""
    for key, policy in of_type(synth.resources, "AWS::IAM::Policy").items():
        for statement in _statements(policy["Properties"]["PolicyDocument"]):
            yield key, statement
    for key, policy in of_type(synth.resources, "AWS::IAM::ManagedPolicy").items():
        for statement in _statements(policy["Properties"]["PolicyDocument"]):
            yield key, statement
    for key, role in of_type(synth.resources, "AWS::IAM::Role").items():
        for inline in role["Properties"].get("Policies", []):
            for statement in _statements(inline["PolicyDocument"]):
                yield key, statement


def test_no_identity_policy_in_the_stack_allows_star_but_for_xray(synth: Synth) -> None:
    # Stack-wide, not only the workers': a construct added later (or a CDK custom resource) is caught too.
    statements = list(_identity_policies(synth))
    assert statements
    for key, statement in statements:
        assert statement["Effect"] == "Allow", (key, statement)
        assert not {"NotAction", "NotResource"} & set(statement), (key, statement)
        actions = set(_as_list(statement["Action"]))
        resources = {render(resource) for resource in _as_list(statement["Resource"])}
        assert not any(action == "*" or action.endswith(":*") for action in actions), (key, statement)
        if "*" in resources:
            assert actions <= STAR_ACTIONS, (key, statement)


def test_no_role_has_a_managed_policy(synth: Synth) -> None:
    # AWS-managed policies (AWSLambdaBasicExecutionRole and the like) grant on "*".
    roles = of_type(synth.resources, "AWS::IAM::Role")
    assert roles
    assert {key for key, role in roles.items() if role["Properties"].get("ManagedPolicyArns")} == set()
