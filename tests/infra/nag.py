"""cdk-nag's findings on a synthesized stack, for the tests of any app's stack."""

from __future__ import annotations

from typing import Any


def unacknowledged_findings(stack: Any) -> list[str]:
    """Unacknowledged findings of the AwsSolutions and Serverless packs, errors and warnings alike, as
    `rule (severity) at path: description`. validate_scope walks the construct tree a synth already prepared."""
    from cdk_nag import AwsSolutionsChecks, ServerlessChecks

    return [
        f"{violation.rule_name} ({violation.severity}) at {resource.construct_path}: {violation.description}"
        for pack in (AwsSolutionsChecks(), ServerlessChecks())
        for violation in pack.validate_scope(stack).violations
        for resource in violation.violating_resources
    ]
