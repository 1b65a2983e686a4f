"""What makes a deployed stack's stateful resources the same resources after an upgrade.

CloudFormation replaces a resource whose logical ID disappears (a delete and a create) or whose
replacement-requiring property changes; for a table, a queue, a bucket, a key or a log group that is data lost.
`identity` keeps, per stateful resource, its type, those properties and its deletion policies, so two templates
can be compared. `python -m tests.infra.stateful > tests/infra/stateful_baseline.json` writes the baseline from
the current stack (only when a migration is documented: docs/infrastructure.md, "Upgrading a deployed stack").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

# Per stateful type, the properties whose change makes CloudFormation replace the resource (each type's
# reference, "Update requires: Replacement"), that the stack sets.
REPLACING_PROPERTIES: dict[str, tuple[str, ...]] = {
    "AWS::DynamoDB::Table": ("TableName", "KeySchema", "LocalSecondaryIndexes"),
    "AWS::SQS::Queue": ("QueueName", "FifoQueue"),
    "AWS::S3::Bucket": ("BucketName",),
    "AWS::KMS::Key": ("KeySpec", "KeyUsage", "MultiRegion"),
    "AWS::Logs::LogGroup": ("LogGroupName",),
    "AWS::SES::EmailIdentity": ("EmailIdentity",),
    "AWS::SecretsManager::Secret": ("Name",),
    "AWS::Scheduler::ScheduleGroup": ("Name",),
    "AWS::SNS::Topic": ("TopicName", "FifoTopic"),
}
# What each must keep so that a stack delete or a replacement doesn't delete the data either.
POLICIES = ("DeletionPolicy", "UpdateReplacePolicy")


def identity(resources: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Logical ID -> type, replacing properties and deletion policies, for every stateful resource."""
    found: dict[str, dict[str, Any]] = {}
    for logical_id, resource in sorted(resources.items()):
        kind = resource["Type"]
        if kind not in REPLACING_PROPERTIES:
            continue
        properties = resource.get("Properties", {})
        found[logical_id] = {
            "Type": kind,
            "Properties": {name: properties[name] for name in REPLACING_PROPERTIES[kind] if name in properties},
            **{policy: resource[policy] for policy in POLICIES if policy in resource},
        }
    return found


def replacements(before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each stateful resource of `before` that `after` would delete, replace, or stop protecting."""
    found: list[str] = []
    for logical_id, old in before.items():
        new = after.get(logical_id)
        if new is None:
            found.append(f"{logical_id} ({old['Type']}) is gone: CloudFormation would delete it")
        elif new["Type"] != old["Type"]:
            found.append(f"{logical_id} changes type {old['Type']} -> {new['Type']}: a new resource")
        elif new["Properties"] != old["Properties"]:
            found.append(f"{logical_id} changes {old['Properties']} -> {new['Properties']}: a replacement")
        else:
            found += [
                f"{logical_id} {policy} {old.get(policy, 'Delete')} -> {new.get(policy, 'Delete')}"
                for policy in POLICIES
                if old.get(policy, "Delete") == "Retain" and new.get(policy, "Delete") != "Retain"
            ]
    return found


def main() -> None:
    from sqs_jobs.cdk.stack import build_app
    from tests.infra.conftest import REPO_ROOT

    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    app, stack = build_app(context)
    template = app.synth().get_stack_artifact(stack.artifact_id).template
    json.dump(identity(template["Resources"]), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
